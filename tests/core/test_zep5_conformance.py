"""Every accumulation group any command writes follows ZEP 5: the group's attributes and the
attributes of every array in it validate against the draft's two JSON schemas (read here from
the schema files, not through accumulus), strides have one entry per dimension, > 0 exactly
on the accumulated ones, and every array the tree names is there. Positioned arrays (``--at``)
live in a subgroup a ZEP 5 reader does not look at; they are checked to be where the group's
``accumulus`` attribute says."""

from __future__ import annotations

import json
import shutil
from importlib import resources
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import zarr

import accumulus
from command_line import run
from cubes import VAR, synthetic_dataset, write_cube
from ingest.helpers import Truth, truth, write_granule


def _schema(name: str) -> dict:
    text = resources.files("accumulus.accumulation.model").joinpath("schemas", name).read_text()
    return json.loads(text)


GROUP_SCHEMA = _schema("group.schema.json")
ARRAY_SCHEMA = _schema("array.schema.json")


def tree_arrays(node: dict) -> set[str]:
    keys = ("_DATA_WEIGHTED", "_DATA_UNWEIGHTED", "_WEIGHTS")
    found = {node[k] for k in keys if k in node}
    for key, child in node.items():
        if key not in keys:
            found |= tree_arrays(child)
    return found


def check_store(path: Path) -> int:
    """Validate every accumulation group of the store at ``path``; how many positioned
    accumulations they hold."""
    with zarr.config.set({"array.rectilinear_chunks": True}):  # month chunks (rechunk)
        root = zarr.open_group(path, mode="r", use_consolidated=False)
        groups = [
            (p, node)
            for p, node in root.members(max_depth=None)
            if isinstance(node, zarr.Group) and p.rpartition("/")[2].endswith("_accumulation_group")
        ]
    assert groups, f"no accumulation group in {path}"
    positioned = 0
    for where, group in groups:
        attrs = group.attrs.asdict()
        jsonschema.validate(attrs, GROUP_SCHEMA)
        dims = None
        for name, array in group.arrays():
            array_attrs = array.attrs.asdict()
            jsonschema.validate(array_attrs, ARRAY_SCHEMA)
            strides = array_attrs["_ACCUMULATION_STRIDE"]
            assert len(strides) == len(array_attrs["_ARRAY_DIMENSIONS"]), f"{where}/{name}"
            assert all(s >= 0 for s in strides) and any(s > 0 for s in strides), name
            dims = dims or sorted(array_attrs["_ARRAY_DIMENSIONS"])
            assert sorted(array_attrs["_ARRAY_DIMENSIONS"]) == dims, name
        members = {n for n, _ in group.arrays()}
        assert tree_arrays(attrs["_ACCUMULATION_GROUP"]) <= members, where
        for item in attrs.get("accumulus", {}).get("positioned", []):
            positioned += 1
            for name in item["arrays"].values():
                # Not among the group's own arrays, which a ZEP 5 reader may all validate.
                assert name not in members and "/" in name, name
                assert isinstance(group[name], zarr.Array), name
    return positioned


@pytest.fixture
def cube(tmp_path) -> Path:
    path = tmp_path / "cube.zarr"
    write_cube(synthetic_dataset({"time": 70, "lat": 6, "lon": 8}, seed=1), path,
               {"time": 10, "lat": 3, "lon": 4})  # fmt: skip
    return path


def ok(capsys, monkeypatch, *args: str) -> str:
    code, out, err = run(capsys, monkeypatch, *args)
    assert code == 0, err
    return out


@pytest.mark.parametrize(
    "options",
    [
        [],
        ["--minimal"],
        ["--at", "time=1", "--at", "lat=1,lon=1", "--dims", "time", "--dims", "lat,lon"],
        ["--at", "time=month", "--weights", "area"],
    ],
)
def test_accumulate(cube, capsys, monkeypatch, options):
    ok(capsys, monkeypatch, "accumulate", str(cube), VAR, *options)
    positioned = check_store(cube)
    # The default layout is positioned (every day, every cell); --minimal is ZEP 5 only.
    assert bool(positioned) == ("--minimal" not in options)


def daily(steps: int) -> Truth:
    t = truth(steps, nlat=4, nlon=6, seed=3)
    return Truth(t.packed, np.arange(steps) * 24, t.lat, t.lon)


def test_append_updates_stay_conformant(tmp_path, capsys, monkeypatch):
    t = daily(90)
    granules = [write_granule(tmp_path / f"g{i}.nc", t, a, a + 30) for i, a in enumerate((0, 30))]
    store = tmp_path / "appended.zarr"
    ok(capsys, monkeypatch, "append", str(store), str(granules[0]), "--chunks", "time=8")
    ok(capsys, monkeypatch, "accumulate", str(store), VAR, "--at", "time=month")
    assert check_store(store)
    for granule in granules[1:]:
        ok(capsys, monkeypatch, "append", str(store), str(granule))
        assert check_store(store)


def test_rechunk(cube, tmp_path, capsys, monkeypatch):
    ok(capsys, monkeypatch, "accumulate", str(cube), VAR, "--at", "time=month")
    out = tmp_path / "monthly.zarr"
    ok(capsys, monkeypatch, "rechunk", str(cube), str(out), "--chunks", "time=month")
    assert check_store(out)


def test_convert(tmp_path, capsys, monkeypatch):
    granule = write_granule(tmp_path / "g.nc", daily(40), 0, 40)
    out = tmp_path / "converted.zarr"
    ok(capsys, monkeypatch, "convert", str(granule), str(out))
    ok(capsys, monkeypatch, "accumulate", str(out), VAR, "--at", "lat=1,lon=1")
    assert check_store(out)


def test_sidecar(cube, tmp_path, capsys, monkeypatch):
    side = tmp_path / "side.zarr"
    ok(capsys, monkeypatch, "accumulate", str(cube), VAR, "--into", str(side), "--at", "time=1")
    assert check_store(side)


def test_groups_of_the_old_layout_are_still_read(cube, capsys, monkeypatch):
    """Groups written before the positioned arrays moved to their subgroup (directly in the
    group, named bare) answer as they did."""
    ok(capsys, monkeypatch, "accumulate", str(cube), VAR, "--at", "time=1", "--dims", "time")
    ranges = {"time": ("2001-01-04", "2001-02-20")}
    before = accumulus.average(str(cube), VAR, ["time"], ranges)
    group = cube / f"{VAR}_accumulation_group"
    for moved in (group / "accumulus_positions").iterdir():
        if not moved.name.startswith("."):
            shutil.move(moved, group / moved.name)
    shutil.rmtree(group / "accumulus_positions")
    attrs = group / ".zattrs"
    attrs.write_text(attrs.read_text().replace("accumulus_positions/", ""))
    zarr.consolidate_metadata(str(cube))
    assert "acc_uw_time_at_1" in {n for n, _ in zarr.open_group(group, mode="r").arrays()}
    after = accumulus.average(str(cube), VAR, ["time"], ranges)
    assert before.attrs["raw_chunks_read"] == after.attrs["raw_chunks_read"] == 0
    assert after.attrs["accumulation_chunks_read"] > 0
    np.testing.assert_allclose(after.values, before.values, rtol=1e-12)
