"""Stores the ZEP 5 reference generator really writes (``tests/data/zep5_generator``: see
its README for how the committed store was made): no attributes on the variable or its 1-D
arrays, a ``<M8[m]`` time axis with fill value 0, -99 as missing while the fill value is 0,
float32 accumulations in the generator's permuted layout with ``accumulation_delta_filter``.
``average``, ``inspect`` and ``verify`` answer on it as it is, read-only; the averages equal
the generator's own rule (negative = missing, weight cos(latitude) where the value is >= 0)
computed here from the raw values with NumPy, by both routes."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr
from fastapi.testclient import TestClient

import accumulus
from accumulus.errors import AccumulusError
from accumulus.service import create_app
from accumulus.stores.inferred_conventions import ArrayDoc, GroupDoc, infer
from tools import tool

from .generator import DATA, generate

FIXTURE = DATA / "store.zarr"
DIMS = ("latitude", "longitude", "time")


@pytest.fixture
def store(tmp_path) -> Path:
    path = tmp_path / "generated.zarr"
    shutil.copytree(FIXTURE, path)
    return path


def _files(path: Path) -> dict[str, str]:
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def _generator_rule(path: Path, box: dict[str, slice], over: tuple[str, ...]) -> np.ndarray:
    """The generator's weighted mean (compute.py: ``mask = block >= fill_value``, weights
    cos(latitude) where valid) of the raw values in ``box``, from zarr and NumPy alone."""
    variable = zarr.open_array(path / "variable", mode="r")
    values = variable[...].astype("f8")[tuple(box[d] for d in DIMS)]
    latitude = zarr.open_array(path / "latitude", mode="r")[...][box["latitude"]]
    weights = (values >= variable.fill_value) * np.cos(np.deg2rad(latitude))[:, None, None]
    axes = tuple(DIMS.index(d) for d in over)
    with np.errstate(invalid="ignore"):  # NaN where nothing is valid, as accumulus says too
        return (values * weights).sum(axis=axes) / weights.sum(axis=axes)


def test_the_fixture_is_what_the_generator_writes():
    for name in ("variable", *DIMS):  # no attributes at all
        assert not (FIXTURE / name / ".zattrs").exists()
    time = json.loads((FIXTURE / "time" / ".zarray").read_text())
    assert time["dtype"] == "<M8[m]" and time["fill_value"] == 0
    variable = zarr.open_array(FIXTURE / "variable", mode="r")
    assert variable.fill_value == 0 and (variable[...] == -99).any() and (variable[...] == 0).any()
    acc_lat = json.loads((FIXTURE / "variable_accumulation_group/acc_lat/.zarray").read_text())
    assert acc_lat["dtype"] == "<f4"
    assert acc_lat["filters"][0]["id"] == "accumulation_delta_filter"


def test_inspect_reports_what_was_inferred(store):
    info = accumulus.inspect(str(store))
    assert info["dimensions"] == {"latitude": 12, "longitude": 16, "time": 40}
    dims = {a["path"]: a["dims"] for a in info["arrays"]}
    assert dims == {"variable": list(DIMS), **{d: [d] for d in DIMS}}
    assert set(info["inferred"]) == {"variable", *DIMS}
    assert "generator's rule" in info["inferred"]["variable"]
    (group,) = info["accumulation_groups"]
    assert group["producer"] == "foreign" and group["weights"] == "area"


BOXES = [  # (ranges by label, the same box by index)
    ({}, {}),
    (
        {"latitude": (-60, 60), "time": ("2000-06-01T02:00", "2000-06-01T17:30")},
        {"latitude": slice(2, 10), "time": slice(4, 36)},
    ),
    (
        {"longitude": (-150, 20), "time": ("2000-06-01T05:00", "2000-06-01T05:30")},
        {"longitude": slice(1, 9), "time": slice(10, 12)},
    ),
]


@pytest.mark.parametrize("over", [("time",), ("latitude", "longitude"), DIMS])
@pytest.mark.parametrize(("ranges", "box"), BOXES)
def test_average_follows_the_generators_rule_by_both_routes(store, over, ranges, box):
    box = {d: box.get(d, slice(None)) for d in DIMS}
    expected = _generator_rule(store, box, over)
    for use_accumulation in (True, False):
        result = accumulus.query(
            str(store), "variable", over, ranges, use_accumulation=use_accumulation
        )
        # float32 sums as the generator stores them: its rounding, no more.
        np.testing.assert_allclose(result.data.values, expected, rtol=2e-6)
    assert result.data.attrs  # the plan's numbers


def test_accumulations_are_used_and_read_only(store):
    before = _files(store)
    result = accumulus.query(str(store), "variable", ["latitude", "longitude"])
    # The generator's lat+lon accumulation answers: no raw chunk is read.
    assert result.plan.accumulation_reads and not result.plan.raw_reads
    assert all(report.ok for report in accumulus.verify(str(store), "variable"))
    run = subprocess.run(
        [sys.executable, "-m", "accumulus", "average", str(store), "variable", "--over", "time",
         "--range", "time=2000-06-01T00:00/2000-06-01T04:30", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    answer = np.array(json.loads(run.stdout)["values"])
    box = {"latitude": slice(None), "longitude": slice(None), "time": slice(0, 10)}
    np.testing.assert_allclose(answer, _generator_rule(store, box, ("time",)), rtol=2e-6)
    assert _files(store) == before


def test_the_same_store_with_consolidated_metadata(store):
    """Consolidated by someone else (zarr alone): inferred from the snapshot, no listing."""
    zarr.consolidate_metadata(zarr.storage.LocalStore(store))
    assert accumulus.inspect(str(store))["consolidated"]
    box = {d: slice(None) for d in DIMS}
    for use_accumulation in (True, False):
        got = accumulus.average(str(store), "variable", ["time"], use_accumulation=use_accumulation)
        np.testing.assert_allclose(got.values, _generator_rule(store, box, ("time",)), rtol=2e-6)


def test_the_service_serves_it(store):
    client = TestClient(create_app([str(store)]))
    response = client.get("/api/datasets/generated/variable/average?over=latitude,longitude")
    assert response.status_code == 200, response.text
    box = {d: slice(None) for d in DIMS}
    expected = _generator_rule(store, box, ("latitude", "longitude"))
    np.testing.assert_allclose(response.json()["values"], expected, rtol=2e-6)


def test_writing_to_it_is_refused_with_the_missing_convention(store):
    with pytest.raises(AccumulusError, match="_ARRAY_DIMENSIONS"):
        accumulus.accumulate(str(store), "variable", ["time"], rebuild=True)


def test_inference_refuses_what_it_cannot_tell():
    tree = {"_ACCUMULATION_GROUP": {"y": {"_DATA_WEIGHTED": "a"}, "x": {}}}
    group = GroupDoc(tree, {"a": {"_ARRAY_DIMENSIONS": ["y", "x"]}})
    square = {"v": ArrayDoc((4, 4), 0.0, {})}
    # Both orders fit a square array without 1-D arrays: the group's order decides.
    assert infer(square, {"v_accumulation_group": group}).attrs["v"]["_ARRAY_DIMENSIONS"] == [
        "y", "x",
    ]  # fmt: skip
    arrays = {
        "v": ArrayDoc((3, 5), 0.0, {}), "y": ArrayDoc((5,), 0, {}), "x": ArrayDoc((3,), 0, {}),
    }  # fmt: skip
    assert infer(arrays, {"v_accumulation_group": group}).attrs["v"]["_ARRAY_DIMENSIONS"] == [
        "x", "y",
    ]  # fmt: skip
    wrong = {**arrays, "x": ArrayDoc((4,), 0, {})}
    with pytest.raises(AccumulusError, match=r"'v' has no _ARRAY_DIMENSIONS.*no order"):
        infer(wrong, {"v_accumulation_group": group})
    with pytest.raises(AccumulusError, match="cannot be the 3 dimensions"):
        infer({"v": ArrayDoc((2, 3, 4), 0.0, {})}, {"v_accumulation_group": group})
    # With attributes of its own, only the dimensions are inferred, not the missing rule.
    noted = infer({"v": ArrayDoc((4, 4), 0.0, {"units": "K"})}, {"v_accumulation_group": group})
    assert "_accumulus_missing_below" not in noted.attrs["v"]


@pytest.mark.slow
def test_the_generator_run_here_writes_the_committed_fixture(tmp_path):
    """Runs the generator as published (Python 3.11, zarr 2.13.3, dask 2023.2.0, numcodecs
    < 0.12, from the registry) and checks that it writes what is committed. (Its own zarr
    cannot read back the arrays it writes with ``accumulation_delta_filter``, which need the
    chunk shape to decode; accumulus reads them.)"""
    tool("python3.11", "Debian: apt-get install python3.11-venv")  # skips where absent
    path = generate(tmp_path / "generated.zarr")
    assert _files(path) == _files(FIXTURE)  # byte for byte: the generator is deterministic
    assert all(report.ok for report in accumulus.verify(str(path), "variable"))
    expected = _generator_rule(path, {d: slice(None) for d in DIMS}, ("time",))
    np.testing.assert_allclose(
        accumulus.average(str(path), "variable", ["time"]).values, expected, rtol=2e-6
    )
