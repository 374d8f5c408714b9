"""Stores carrying the ZEP 3 draft chunk grid, written by hand from the seed's example."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import accumulus
from accumulus.errors import AccumulusError
from accumulus.grid import array_bounds, locate
from accumulus.raw_cube import RawCube
from accumulus.stores.opening import open_store

from .conftest import run_cli

EDGES_0 = (0, 5, 10, 15, 30, 45, 65, 100)
EDGES_1 = tuple(range(0, 101, 10))
VALUES = (np.arange(10000, dtype="<f4").reshape(100, 100) % 97) + 1.0


def draft_document(grid: dict, **extra) -> dict:
    return {
        "zarr_format": 3,
        "node_type": "array",
        "shape": [100, 100],
        "data_type": "float32",
        "chunk_grid": grid,
        "fill_value": "NaN",
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": ["a", "b"],
        "attributes": {"units": "K"},
        **extra,
    }


SEED_GRID = {
    "type": "rectangular",
    "chunk_shape": [[5, 5, 5, 15, 15, 20, 35], 10],
    "separator": "/",
}


def write_draft_store(
    path: Path,
    document: dict,
    key=lambda i, j: f"c{i}/{j}",
    *,
    consolidated: bool = False,
    edges=(EDGES_0, EDGES_1),
) -> Path:
    """A v3 group holding array ``x`` described by ``document``; chunk (i, j) of VALUES is
    stored raw (the bytes codec, little-endian) under ``x/<key(i, j)>``."""
    (path / "x").mkdir(parents=True)
    group = {"zarr_format": 3, "node_type": "group", "attributes": {"title": "draft"}}
    if consolidated:
        group["consolidated_metadata"] = {
            "kind": "inline",
            "must_understand": False,
            "metadata": {"x": document},
        }
    (path / "zarr.json").write_text(json.dumps(group))
    (path / "x" / "zarr.json").write_text(json.dumps(document))
    e0, e1 = edges
    for i in range(len(e0) - 1):
        for j in range(len(e1) - 1):
            chunk = path / "x" / key(i, j)
            chunk.parent.mkdir(parents=True, exist_ok=True)
            chunk.write_bytes(VALUES[e0[i] : e0[i + 1], e1[j] : e1[j + 1]].tobytes())
    return path


@pytest.fixture
def seed_store(tmp_path) -> Path:
    return write_draft_store(tmp_path / "draft.zarr", draft_document(SEED_GRID))


def test_zarr_alone_does_not_read_the_draft(seed_store):
    # zarr-python stops at the draft's missing chunk_key_encoding (or, given one, at the
    # "rectangular" grid): the wrapper is what makes such stores readable.
    with pytest.raises((KeyError, ValueError)):
        zarr.open_array(seed_store / "x", mode="r")


def test_seed_store_reads_through_open_store(seed_store):
    array = zarr.open_array(open_store(seed_store), path="x", mode="r")
    np.testing.assert_array_equal(array[:], VALUES)
    bounds = array_bounds(array)
    assert (bounds[0].edges, bounds[1].edges) == (EDGES_0, EDGES_1)
    chunk, offset = locate(bounds, (17, 17))
    assert chunk == (3, 1)
    # The value at (17, 17) is the one stored in key "c3/1", at that offset.
    stored = np.frombuffer((seed_store / "x" / "c3" / "1").read_bytes(), "<f4").reshape(15, 10)
    assert stored[offset] == array[17, 17] == VALUES[17, 17]
    assert dict(array.attrs) == {"units": "K"}


def test_xarray_reads_the_draft_through_the_wrapper(seed_store):
    ds = xr.open_zarr(open_store(seed_store), consolidated=False)
    assert ds["x"].dims == ("a", "b")
    assert ds["x"].chunks == (tuple(np.diff(EDGES_0)), (10,) * 10)
    np.testing.assert_array_equal(ds["x"].values, VALUES)


def test_accumulate_and_average_on_a_draft_store(seed_store):
    accumulus.accumulate(str(seed_store), "x", [("a",), ("b",)], weights="none")
    # a = 15..29 are exactly chunk 3 of axis 0: prefix sums only.
    result = accumulus.query(str(seed_store), "x", "a", {"a": (15, 29)})
    np.testing.assert_allclose(
        result.data.values, VALUES[15:30].astype("f8").mean(axis=0), rtol=1e-12
    )
    assert result.stats.raw_chunks_read == 0
    # a = 17..40 cuts chunks 3 and 4 of axis 0: raw reads there, one per b chunk.
    result = accumulus.query(str(seed_store), "x", "a", {"a": (17, 40)})
    np.testing.assert_allclose(
        result.data.values, VALUES[17:41].astype("f8").mean(axis=0), rtol=1e-12
    )
    assert result.stats.raw_chunks_read == 2 * 10
    assert all(r.ok for r in accumulus.verify(str(seed_store), "x"))


def test_consolidated_draft_metadata(tmp_path):
    store = write_draft_store(tmp_path / "c.zarr", draft_document(SEED_GRID), consolidated=True)
    cube = RawCube.open(str(store))
    assert cube.consolidated
    var = cube.variable("x")
    assert (var.bounds[0].edges, var.bounds[1].edges) == (EDGES_0, EDGES_1)
    np.testing.assert_array_equal(var.array[:], VALUES)


def test_draft_grid_with_its_own_chunk_key_encoding(tmp_path):
    document = draft_document(
        {"name": "rectangular", "configuration": {"chunk_shape": SEED_GRID["chunk_shape"]}},
        chunk_key_encoding={"name": "default", "configuration": {"separator": "/"}},
    )
    store = write_draft_store(tmp_path / "k.zarr", document, key=lambda i, j: f"c/{i}/{j}")
    array = zarr.open_array(open_store(store), path="x", mode="r")
    np.testing.assert_array_equal(array[:], VALUES)


def test_draft_regular_spelling_and_dot_separator(tmp_path):
    grid = {"type": "regular", "chunk_shape": [25, 10], "separator": "."}
    store = write_draft_store(
        tmp_path / "r.zarr",
        draft_document(grid),
        key=lambda i, j: f"c{i}.{j}",
        edges=(tuple(range(0, 101, 25)), EDGES_1),
    )
    array = zarr.open_array(open_store(store), path="x", mode="r")
    assert array.chunks == (25, 10)
    np.testing.assert_array_equal(array[:], VALUES)


def test_invalid_draft_grid_is_one_clear_error(tmp_path):
    grid = {**SEED_GRID, "chunk_shape": [[5, 5, 5, 15, 15, 20, 30], 10]}
    store = write_draft_store(tmp_path / "bad.zarr", draft_document(grid))
    with pytest.raises(AccumulusError, match=r"add up to 95, but its length is 100"):
        RawCube.open(str(store)).variable("x")
    failed = run_cli("inspect", str(store))
    assert failed.returncode == 2
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and "ZEP 3 chunk_shape" in lines[0] and "95" in lines[0]


def test_rechunk_turns_a_draft_store_into_standard_zarr(seed_store, tmp_path):
    out = tmp_path / "standard.zarr"
    accumulus.rechunk(str(seed_store), str(out), "b=25")
    array = zarr.open_array(out / "x", mode="r")  # zarr alone, no accumulus wrapper
    assert array.metadata.chunk_grid.to_dict()["name"] == "rectilinear"
    assert array.read_chunk_sizes == (tuple(np.diff(EDGES_0)), (25,) * 4)
    np.testing.assert_array_equal(array[:], VALUES)
    assert (out / "x" / "c" / "3" / "1").exists()
