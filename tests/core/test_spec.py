"""The ZEP 5 layout as written: the tree of the draft's example, and attributes that
validate against the draft's two JSON schemas."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import accumulus
from accumulus.accumulation.model import spec
from cubes import VAR, synthetic_dataset, write_cube

# The generator's tree is the example of the ZEP 5 draft, array names and all.
from .test_reference_generator import TREE as DRAFT_EXAMPLE


def shape_of(tree):
    """The tree with array names replaced by their key: its structure only."""
    return {k: shape_of(v) if isinstance(v, dict) else k for k, v in tree.items()}


def test_tree_has_the_shape_of_the_draft_example(tmp_path):
    dims = ("latitude", "longitude", "time")
    ds = xr.Dataset(
        {VAR: (dims, np.random.default_rng(0).random((6, 8, 10)))},
        coords={
            "latitude": np.linspace(-50, 50, 6),
            "longitude": np.linspace(0, 350, 8),
            "time": pd.date_range("2000-06-01", periods=10),
        },
    )
    write_cube(ds, tmp_path / "c.zarr", {"latitude": 3, "longitude": 4, "time": 5})
    accumulus.accumulate(str(tmp_path / "c.zarr"), VAR, weights="area", minimal=True)
    attrs = json.loads((tmp_path / "c.zarr" / f"{VAR}_accumulation_group" / ".zattrs").read_text())
    tree = attrs["_ACCUMULATION_GROUP"]
    ours = shape_of(tree)
    # Ours also names the unweighted sums; otherwise the same tree as the draft's example.
    for node in (ours["latitude"], ours["longitude"], ours["time"]):
        assert node.pop("_DATA_UNWEIGHTED") == "_DATA_UNWEIGHTED"
    ours["latitude"]["longitude"].pop("_DATA_UNWEIGHTED")
    assert ours == shape_of(DRAFT_EXAMPLE)


def test_written_attributes_validate_against_the_schemas(tmp_path):
    ds = synthetic_dataset({"time": 12, "lat": 6, "lon": 4}, seed=0)
    write_cube(ds, tmp_path / "c.zarr", {"time": 5, "lat": 3, "lon": 4}, zarr_format=3)
    accumulus.accumulate(str(tmp_path / "c.zarr"), VAR, strides={"time": 2})
    group_dir = tmp_path / "c.zarr" / f"{VAR}_accumulation_group"
    group = json.loads((group_dir / "zarr.json").read_text())["attributes"]
    jsonschema.validate(group, spec._schema("group.schema.json"))
    names = {n for leaf in spec.tree_leaves(group[spec.TREE_KEY]).values() for n in leaf.values()}
    assert names
    for name in names:
        meta = json.loads((group_dir / name / "zarr.json").read_text())
        jsonschema.validate(meta["attributes"], spec._schema("array.schema.json"))
        assert meta["dimension_names"] == meta["attributes"]["_ARRAY_DIMENSIONS"]
        attrs = meta["attributes"]
        strides = dict(zip(attrs["_ARRAY_DIMENSIONS"], attrs["_ACCUMULATION_STRIDE"], strict=True))
        assert strides.get("time") in (0, 2)


def test_schema_rejects_what_the_draft_forbids():
    schema = spec._schema("group.schema.json")
    for bad in (
        {"_ACCUMULATION_GROUP": {"time": {"_WEIGHTS": 3}}},  # array names are strings
        {"_ACCUMULATION_GROUP": {"time": "acc_time"}},  # dimension keys hold objects
        {"accumulus": {}},  # the tree is required
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
