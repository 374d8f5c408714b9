"""Groups holding positioned accumulations (``--at``) stay ZEP 5 groups: the chunk-end arrays
are exactly as ZEP 5 says, the attributes validate against the draft's schemas, and a ZEP 5
reader that knows nothing of positions (written here from the draft alone, as the reference
generator's users read groups) finds only the chunk-end arrays and answers right from them,
while the positioned arrays are described in the ``accumulus`` attribute only."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
import zarr

import accumulus
from accumulus.accumulation.model import spec
from cubes import VAR, area_weights, synthetic_dataset, write_cube

CHUNKS = {"time": 10, "lat": 3, "lon": 4}


def zep5_leaves(tree: dict, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], dict]:
    """What a ZEP 5 reader finds in ``_ACCUMULATION_GROUP``: dimension path -> arrays."""
    keys = ("_DATA_WEIGHTED", "_DATA_UNWEIGHTED", "_WEIGHTS")
    found = {path: {k: tree[k] for k in keys if k in tree}} if any(k in tree for k in keys) else {}
    for key, child in tree.items():
        if key not in keys:
            found |= zep5_leaves(child, (*path, key))
    return found


def zep5_time_mean(group: zarr.Group, chunk: int, first: int, last: int) -> np.ndarray:
    """The weighted time mean over raw chunks [first, last] (inclusive) the ZEP 5 way: the
    time leaf's arrays, entry (k+1)·stride - 1 holding chunks [0, k]."""
    leaf = zep5_leaves(group.attrs["_ACCUMULATION_GROUP"])[("time",)]
    data, weights = group[leaf["_DATA_WEIGHTED"]], group[leaf["_WEIGHTS"]]
    dims = data.attrs["_ARRAY_DIMENSIONS"]
    stride = data.attrs["_ACCUMULATION_STRIDE"][dims.index("time")]
    assert stride == 1 and data.shape[dims.index("time")] == -(-120 // chunk)

    def between(array):
        taken = np.moveaxis(array[:], dims.index("time"), 0)
        return taken[last] - (taken[first - 1] if first else 0)

    return between(data) / between(weights)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Every default combination: time at month ends (positioned), the others at chunk ends."""
    path = tmp_path_factory.mktemp("mixed") / "c.zarr"
    ds = synthetic_dataset({"time": 120, "lat": 6, "lon": 8}, seed=4)
    write_cube(ds, path, CHUNKS)
    accumulus.accumulate(str(path), VAR, weights="area", at={"time": "month"})
    return path, ds


def test_attributes_validate_and_name_only_chunk_end_arrays(mixed):
    path, _ = mixed
    group = zarr.open_group(path / f"{VAR}_accumulation_group", mode="r")
    attrs = group.attrs.asdict()
    jsonschema.validate(attrs, spec._schema("group.schema.json"))
    leaves = zep5_leaves(attrs["_ACCUMULATION_GROUP"])
    # time's combination is positioned: ZEP 5 readers see no time accumulation.
    assert set(leaves) == {("lat",), ("lon",), ("lat", "lon")}
    for arrays in leaves.values():
        for name in arrays.values():
            array_attrs = group[name].attrs.asdict()
            jsonschema.validate(array_attrs, spec._schema("array.schema.json"))
            strides = dict(zip(array_attrs["_ARRAY_DIMENSIONS"],
                               array_attrs["_ACCUMULATION_STRIDE"], strict=True))  # fmt: skip
            assert strides["time"] == 0
    [positioned] = attrs["accumulus"]["positioned"]
    assert positioned["at"] == {"time": "month"}
    assert positioned["positions"]["time"] == [31, 59, 90, 120]  # 2001: Jan, Feb, Mar, April
    named = {n for arrays in leaves.values() for n in arrays.values()}
    assert not named & set(positioned["arrays"].values())
    for name in positioned["arrays"].values():
        # No stride in chunks could say where these entries end: no _ACCUMULATION_STRIDE.
        assert "_ACCUMULATION_STRIDE" not in group[name].attrs
        assert group[name].attrs["_ARRAY_DIMENSIONS"] == ["time", "lat", "lon"]


def test_a_zep5_reader_answers_from_the_chunk_end_arrays(tmp_path):
    """With time at chunk ends and at every element, the ZEP 5 reader uses the chunk-end
    arrays, as ZEP 5 defines them, and is not confused by the positioned ones beside them."""
    ds = synthetic_dataset({"time": 120, "lat": 6, "lon": 8}, seed=5)
    write_cube(ds, tmp_path / "c.zarr", CHUNKS)
    accumulus.accumulate(str(tmp_path / "c.zarr"), VAR, ["time", "lat,lon"], weights="area",
                         at={"lat": 1, "lon": 1})  # fmt: skip
    group = zarr.open_group(tmp_path / "c.zarr" / f"{VAR}_accumulation_group", mode="r")
    assert set(zep5_leaves(group.attrs["_ACCUMULATION_GROUP"])) == {("time",)}
    got = zep5_time_mean(group, CHUNKS["time"], 2, 7)
    data = ds[VAR].isel(time=slice(20, 80)).astype("f8")
    expected = data.weighted(area_weights(data)).mean("time")
    np.testing.assert_allclose(got, expected.values, rtol=1e-9)


def test_a_group_with_only_positioned_accumulations_is_an_empty_zep5_tree(tmp_path):
    ds = synthetic_dataset({"time": 40, "lat": 3, "lon": 2}, seed=6)
    write_cube(ds, tmp_path / "c.zarr", CHUNKS, zarr_format=3)
    accumulus.accumulate(str(tmp_path / "c.zarr"), VAR, ["time"], at={"time": 1})
    meta = json.loads((tmp_path / "c.zarr" / f"{VAR}_accumulation_group" / "zarr.json").read_text())
    attrs = meta["attributes"]
    jsonschema.validate(attrs, spec._schema("group.schema.json"))
    assert zep5_leaves(attrs["_ACCUMULATION_GROUP"]) == {}
    assert attrs["_ACCUMULATION_GROUP"]["time"] == {"lat": {"lon": {}}, "lon": {}}
