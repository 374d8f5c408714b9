"""Building a group again keeps what it was built with (issue 37): ``accumulate --rebuild``,
``--allow-missing-chunks`` or a plain re-run keep the combinations, ``--at`` positions,
strides and weights unless told otherwise, and say what they kept; ``--reset`` goes back to
the defaults. Answers after a rebuild equal xarray's on the raw data as it now is."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import accumulus
from accumulus.accumulation.model import spec
from command_line import run
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference

CHUNKS = {"time": 30, "lat": 4, "lon": 5}  # 30-day chunks: month ends fall inside them
MONTHS = ("2001-02-01", "2001-03-31")  # whole months, cutting two chunks


@pytest.fixture
def cube(tmp_path: Path) -> tuple[xr.Dataset, Path]:
    ds = synthetic_dataset({"time": 120, "lat": 8, "lon": 10}, seed=11)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, CHUNKS)
    return ds, path


def layout(path: Path, where: Path | None = None) -> dict[str, str]:
    """Each accumulation of the group, by its dimensions: where its entries are."""
    groups = accumulus.inspect(str(where or path))["accumulation_groups"]
    (group,) = [g for g in groups if g["path"] == spec.group_name(VAR)]
    return {"+".join(acc["dims"]): acc["at"] for acc in group["accumulations"]}


def month_map(path: Path, **options) -> accumulus.QueryResult:
    return accumulus.query(
        str(path), VAR, ["time"], {"time": MONTHS}, plan="accumulation", **options
    )


def test_a_rebuild_after_a_lost_chunk_keeps_the_month_positions(cube, capsys, monkeypatch):
    """The tour: ``--at time=month``, a raw chunk lost, ``--rebuild --allow-missing-chunks``."""
    _, path = cube
    assert run(capsys, monkeypatch, "accumulate", str(path), VAR, "--at", "time=month")[0] == 0
    built = layout(path)
    assert built["time"] == "time=month"
    (path / VAR / "2.0.0").unlink()  # March's days: missing values from now on
    code, out, err = run(
        capsys, monkeypatch, "accumulate", str(path), VAR, "--rebuild", "--allow-missing-chunks"
    )
    assert code == 0, err
    kept = next(line for line in out.splitlines() if "kept from the last build" in line)
    assert "--at time=month" in kept and "weights area" in kept
    assert layout(path) == built
    result = month_map(path)
    assert result.stats.raw_chunks_read == 0 and result.stats.accumulation_chunks_read > 0
    now = xr.open_zarr(path)[VAR]  # the lost chunk reads as missing values
    assert np.isnan(now.isel(time=slice(60, 90), lat=0, lon=0)).all()
    expected = xarray_reference(now.sel(time=slice(*MONTHS)), ["time"], "area", "mean")
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)
    series = accumulus.average(
        str(path), VAR, ["lat", "lon"], {"time": ("2001-01-05", "2001-04-20")}
    )
    expected = xarray_reference(
        now.sel(time=slice("2001-01-05", "2001-04-20")), ["lat", "lon"], "area", "mean"
    )
    np.testing.assert_allclose(series.values, expected.values, rtol=1e-9)


def test_strides_weights_and_dims_are_kept_and_given_ones_replace_them(cube):
    ds, path = cube
    accumulus.accumulate(str(path), VAR, ["time", "lat,lon"], strides={"time": 2}, weights="none")
    again = accumulus.accumulate(str(path), VAR)  # a plain re-run: nothing to do
    assert again.action == "up to date" and "--stride time=2" in again.kept
    rebuilt = accumulus.accumulate(str(path), VAR, rebuild=True)
    assert rebuilt.action == "rebuilt"
    assert (
        rebuilt.kept
        == "kept from the last build: dims time, lat+lon; --stride time=2; weights none"
    )
    assert rebuilt.group.config() == again.group.config()
    # What is given replaces what was kept, dimension by dimension.
    changed = accumulus.accumulate(str(path), VAR, at={"time": "month"}, rebuild=True)
    assert layout(path) == {"time": "time=month", "lat+lon": "chunk ends"}
    assert changed.group.weights == "none" and "--at" not in changed.kept
    # Another configuration without --rebuild is refused, as before.
    with pytest.raises(accumulus.AccumulusError, match="--rebuild"):
        accumulus.accumulate(str(path), VAR, weights="area")
    # --reset: the defaults, whatever was built.
    reset = accumulus.accumulate(str(path), VAR, reset=True)
    assert reset.kept == "" and reset.group.weights == "area"
    assert set(layout(path)) == {"time", "lat", "lon", "lat+lon"}
    result = month_map(path, use_accumulation=True)
    expected = xarray_reference(ds[VAR].sel(time=slice(*MONTHS)), ["time"], "area", "mean")
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)


def test_a_group_whose_strides_were_edited_is_rebuilt_as_it_was_built(cube):
    """The record keeps the request: a rebuild after the attributes were edited (which a
    query refuses to use) rebuilds what was built, not the defaults."""
    _, path = cube
    accumulus.accumulate(str(path), VAR, ["time"], strides={"time": 2}, at=None)
    for attrs_file in (path / spec.group_name(VAR)).glob("*/.zattrs"):
        attrs = json.loads(attrs_file.read_text())
        attrs["_ACCUMULATION_STRIDE"] = [1, 0, 0]
        attrs_file.write_text(json.dumps(attrs))
    zarr.consolidate_metadata(str(path))
    rebuilt = accumulus.accumulate(str(path), VAR, rebuild=True)
    assert "--stride time=2" in rebuilt.kept
    assert [acc.strides for acc in rebuilt.group.accumulations] == [(2,)]
    (report,) = accumulus.verify(str(path))
    assert report.ok, report.problems


def test_a_sidecar_keeps_its_positions(cube, tmp_path, capsys, monkeypatch):
    ds, path = cube
    side = tmp_path / "side.zarr"
    accumulus.accumulate(str(path), VAR, ["time"], at="time=month", into=str(side))
    code, out, err = run(
        capsys, monkeypatch, "accumulate", str(path), VAR, "--into", str(side), "--rebuild"
    )
    assert code == 0, err
    assert "kept from the last build: dims time; --at time=month; weights area" in out
    assert layout(path, side) == {"time": "time=month"}
    result = month_map(side)
    assert result.stats.raw_chunks_read == 0
    expected = xarray_reference(ds[VAR].sel(time=slice(*MONTHS)), ["time"], "area", "mean")
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)
