"""Bad stores and broken accumulation groups: clear errors, nothing written, and an
interrupted build that queries ignore until it is rerun."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import xarray as xr
import zarr

import accumulus
import command_line
from accumulus import AccumulusError
from accumulus.accumulation.build import accumulate
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference

SIZES = {"time": 30, "lat": 8, "lon": 10}
CHUNKS = {"time": 10, "lat": 4, "lon": 5}


@pytest.fixture
def cube(tmp_path):
    path = tmp_path / "cube.zarr"
    ds = synthetic_dataset(SIZES, seed=9)
    write_cube(ds, path, CHUNKS)
    return path, ds


def test_non_monotonic_coordinate_is_refused(tmp_path):
    ds = synthetic_dataset({"time": 6, "lon": 5}, seed=1)
    ds = ds.assign_coords(lon=[0.0, 10.0, 5.0, 20.0, 30.0])
    write_cube(ds, tmp_path / "c.zarr", {"time": 3, "lon": 5})
    with pytest.raises(AccumulusError, match="'lon' is not monotonic"):
        accumulus.average(str(tmp_path / "c.zarr"), VAR, ["time"], {"lon": (0, 10)})


def test_not_a_cube(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(AccumulusError, match="not a Zarr datacube"):
        accumulus.average(str(tmp_path / "empty"), VAR, ["time"])
    with pytest.raises(AccumulusError, match="store not found"):
        accumulus.inspect(str(tmp_path / "absent.zarr"))
    with pytest.raises(AccumulusError, match="Protocol not known: nosuch"):
        accumulus.inspect("nosuch://example.org/x.zarr")


def _edit_group_attrs(path, edit):
    attrs_file = path / f"{VAR}_accumulation_group" / ".zattrs"
    attrs = json.loads(attrs_file.read_text())
    edit(attrs)
    attrs_file.write_text(json.dumps(attrs))
    zarr.consolidate_metadata(path)


def test_attributes_that_do_not_validate(cube):
    path, _ = cube
    accumulus.accumulate(str(path), VAR)

    def corrupt(attrs):
        attrs["_ACCUMULATION_GROUP"]["time"]["_WEIGHTS"] = 42

    _edit_group_attrs(path, corrupt)
    with pytest.raises(AccumulusError, match=r"ZEP 5 schema at _ACCUMULATION_GROUP/time/_WEIGHTS"):
        accumulus.average(str(path), VAR, ["time"])
    [report] = accumulus.verify(str(path), VAR)
    assert not report.ok and "schema" in report.problems[0]


def test_stride_attribute_of_wrong_length(cube):
    path, _ = cube
    accumulus.accumulate(str(path), VAR, [("time",)])
    array_attrs = path / f"{VAR}_accumulation_group" / "acc_time" / ".zattrs"
    attrs = json.loads(array_attrs.read_text())
    attrs["_ACCUMULATION_STRIDE"] = [1, 0]
    array_attrs.write_text(json.dumps(attrs))
    zarr.consolidate_metadata(path)
    with pytest.raises(AccumulusError, match="same length"):
        accumulus.average(str(path), VAR, ["time"])


def test_missing_accumulation_chunk(cube, capsys, monkeypatch):
    path, _ = cube
    accumulus.accumulate(str(path), VAR, [("time",)])
    chunk = next((path / f"{VAR}_accumulation_group" / "acc_time").glob("0.*"))
    chunk.unlink()
    # Over latitude too, so that the weighted sums are read (a map over time alone divides
    # the weights out and reads the unweighted ones).
    with pytest.raises(AccumulusError, match="acc_time has a missing chunk"):
        accumulus.average(str(path), VAR, ["time", "lat"])
    # verify and inspect name the missing object (its fill values are not "differing sums")
    [report] = accumulus.verify(str(path), VAR)
    [problem] = report.problems
    assert f"acc_time: 1 chunk objects missing (first {VAR}_accumulation_group/acc_time/0." in (
        problem
    )
    assert f"accumulate {path} {VAR} --rebuild" in problem
    [group] = accumulus.inspect(str(path))["accumulation_groups"]
    assert group["missing_chunks"] == {
        f"{VAR}_accumulation_group/acc_time": {
            "count": 1,
            "first": f"{VAR}_accumulation_group/acc_time/{chunk.name}",
        }
    }
    _, text, _ = command_line.run(capsys, monkeypatch, "inspect", str(path))
    assert "damaged: 1 chunk objects missing" in text and "complete;" not in text
    accumulus.accumulate(str(path), VAR, [("time",)], rebuild=True)
    [report] = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    assert accumulus.inspect(str(path))["accumulation_groups"][0]["missing_chunks"] == {}


@pytest.mark.parametrize("grown", [True, False])
@pytest.mark.parametrize("deleted", ["acc_time", ""])
def test_a_group_with_an_array_deleted_by_hand(tmp_path, deleted, grown):
    """One array (or the whole group) was deleted by hand while the consolidated metadata
    still lists it; the data grew since, or not: one line naming it (not "up to date"),
    nothing resized, and ``--rebuild`` makes the group again."""
    path = tmp_path / "cube.zarr"
    ds = synthetic_dataset({**SIZES, "time": 40}, seed=9)
    write_cube(ds.isel(time=slice(0, 30)), path, CHUNKS)
    accumulus.accumulate(str(path), VAR, [("time",), ("lat",)])
    if grown:
        ds.isel(time=slice(30, 40)).to_zarr(path, append_dim="time", consolidated=True)
    else:
        ds = ds.isel(time=slice(0, 30))
    group = path / f"{VAR}_accumulation_group"
    shutil.rmtree(group / deleted)
    kept = {p: p.read_bytes() for p in group.rglob(".zarray")} if deleted else {}
    with pytest.raises(AccumulusError) as refused:
        accumulus.accumulate(str(path), VAR, [("time",), ("lat",)])
    message = str(refused.value)
    assert f"{VAR}_accumulation_group/acc_" in message and "is not in the store" in message
    assert f"{VAR} --rebuild" in message and "\n" not in message
    assert {p: p.read_bytes() for p in kept} == kept  # no array resized
    rebuilt = accumulus.accumulate(str(path), VAR, [("time",), ("lat",)], rebuild=True)
    assert rebuilt.action in ("built", "rebuilt")
    [report] = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    got = accumulus.average(str(path), VAR, ["time", "lat"])
    expected = xarray_reference(ds[VAR], ["time", "lat"], "area", "mean")
    np.testing.assert_allclose(got.transpose(*expected.dims), expected, rtol=1e-9)


def test_corrupt_accumulation_chunk(cube):
    path, _ = cube
    accumulus.accumulate(str(path), VAR, [("time",)])
    chunk = next((path / f"{VAR}_accumulation_group" / "acc_wt_time").glob("0.*"))
    chunk.write_bytes(b"this is not a compressed chunk")
    with pytest.raises(AccumulusError, match=r"cannot read accumulation array .*acc_wt_time"):
        accumulus.average(str(path), VAR, ["time", "lat"])
    [report] = accumulus.verify(str(path), VAR)
    assert not report.ok


def test_corrupt_raw_chunk_stops_a_build_naming_it(cube):
    path, _ = cube
    (path / VAR / "1.0.0").write_bytes(b"this is not a compressed chunk")
    with pytest.raises(AccumulusError) as stopped:
        accumulus.accumulate(str(path), VAR, [("time",)])
    message = str(stopped.value)
    assert f"cannot read '{VAR}': chunk {VAR}/1.0.0 cannot be read" in message
    assert "the build stopped there" in message and "\n" not in message


def test_corrupt_raw_chunk_stops_a_rechunk_naming_it(cube, tmp_path):
    path, _ = cube
    (path / VAR / "1.0.0").write_bytes(b"this is not a compressed chunk")
    with pytest.raises(AccumulusError) as stopped:
        accumulus.rechunk(str(path), str(tmp_path / "out.zarr"), "time=12")
    message = str(stopped.value)
    assert f"chunk {VAR}/1.0.0 cannot be read" in message and "\n" not in message
    assert "nothing was written" in message and not (tmp_path / "out.zarr").exists()


def test_interrupted_build_is_ignored_then_completed(cube, monkeypatch):
    path, ds = cube

    def raw_files() -> (
        dict
    ):  # netcdf-c's NCZarr metadata aside (accumulus.stores.nczarr_metadata adds it)
        files = {p: p.read_bytes() for p in (path / VAR).iterdir() if p.name != ".zattrs"}
        attrs = json.loads((path / VAR / ".zattrs").read_text())
        return {**files, "attrs": {k: v for k, v in attrs.items() if k != "_nczarr_array"}}

    raw_before = raw_files()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(accumulate.compute, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        accumulus.accumulate(str(path), VAR)
    monkeypatch.undo()

    assert raw_files() == raw_before
    result = accumulus.query(str(path), VAR, ["lat", "lon"])
    assert "incomplete" in result.note and result.stats.accumulation_chunks_read == 0
    expected = xarray_reference(ds[VAR], ["lat", "lon"], "area", "mean")
    np.testing.assert_allclose(result.data, expected, rtol=1e-9)
    [report] = accumulus.verify(str(path), VAR)
    assert "incomplete" in report.problems[0]

    assert accumulus.accumulate(str(path), VAR).action == "rebuilt"
    result = accumulus.query(str(path), VAR, ["lat", "lon"])
    assert result.stats.raw_chunks_read == 0
    np.testing.assert_allclose(result.data, expected, rtol=1e-9)


def test_read_only_zip_store_answers_but_refuses_writes(cube, tmp_path):
    path, ds = cube
    accumulus.accumulate(str(path), VAR)
    archive = shutil.make_archive(str(tmp_path / "cube"), "zip", path)
    got = accumulus.average(archive, VAR, ["time"])
    expected = xarray_reference(ds[VAR], ["time"], "area", "mean")
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    with pytest.raises(AccumulusError, match="zip stores are read-only"):
        accumulus.accumulate(archive, VAR, rebuild=True)


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("consolidated", [True, False])
def test_xarray_written_stores_as_they_are(tmp_path, zarr_format, consolidated):
    ds = synthetic_dataset(SIZES, seed=4)
    ds[VAR].encoding = {"chunks": tuple(CHUNKS[d] for d in ds[VAR].dims)}
    url = f"file://{tmp_path}/c.zarr"
    ds.to_zarr(tmp_path / "c.zarr", zarr_format=zarr_format, consolidated=consolidated)
    accumulus.accumulate(url, VAR)
    got = accumulus.average(url, VAR, ["lat", "lon"], {"time": ("2001-01-03", "2001-01-22")})
    expected = xarray_reference(
        ds[VAR].sel(time=slice("2001-01-03", "2001-01-22")), ["lat", "lon"], "area", "mean"
    )
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    # xarray still opens the store, accumulation group and all.
    xr.testing.assert_allclose(xr.open_zarr(tmp_path / "c.zarr")[VAR].load(), ds[VAR])


def test_memory_store(cube):
    _, ds = cube
    ds[VAR].encoding = {"chunks": (10, 4, 5)}
    ds.to_zarr("memory://bad-input-test", zarr_format=2, consolidated=True)
    accumulus.accumulate("memory://bad-input-test", VAR)
    got = accumulus.average("memory://bad-input-test", VAR, ["time"])
    np.testing.assert_allclose(got, xarray_reference(ds[VAR], ["time"], "area", "mean"))
