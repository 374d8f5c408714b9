"""The build record (issue 12): a group says what it was built from, so that attributes
edited or raw chunks removed since are found, never summed into a wrong number.

The damaged stores are built here: a ZEP 5 group (Zarr v2), a sharded cube (v3), a sidecar,
a positioned accumulation. Queries check the attributes a snapshot holds (no request);
``verify`` checks every covered raw chunk's size; ``accumulate --rebuild`` refuses to sum a
lost chunk as missing values unless ``--allow-missing-chunks``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient

import accumulus
from accumulus.accumulation.model import spec
from accumulus.service import create_app
from command_line import files, refused, run
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference

CHUNKS = {"time": 5, "lat": 4, "lon": 5}
TIME = ("2001-01-02", "2001-01-18")


def built(tmp_path: Path, kind: str):
    """A cube of ``kind`` with its accumulations: (dataset, cube path, where its group is,
    extra options for average)."""
    ds = synthetic_dataset({"time": 20, "lat": 8, "lon": 10}, seed=7)
    cube = tmp_path / "cube.zarr"
    if kind == "sharded":
        write_cube(ds, cube, CHUNKS, zarr_format=3, shards={"time": 10, "lat": 8, "lon": 10})
    else:
        write_cube(ds, cube, CHUNKS, zarr_format=3 if kind == "positioned" else 2)
    if kind == "sidecar":
        side = tmp_path / "side.zarr"
        accumulus.accumulate(str(cube), VAR, into=str(side))
        return ds, cube, side, {"accumulations": str(side)}
    at = {"time": 1} if kind == "positioned" else None
    accumulus.accumulate(str(cube), VAR, at=at)
    return ds, cube, cube, {}


def raw_objects(cube: Path) -> list[Path]:
    return sorted(
        p
        for p in (cube / VAR).rglob("*")
        if p.is_file() and not p.name.startswith(".") and p.name != "zarr.json"
    )


@pytest.mark.parametrize(
    ("kind", "damage"),
    [
        ("zep5", "deleted"),
        ("zep5", "emptied"),
        ("zep5", "directory"),
        ("sharded", "deleted"),
        ("sidecar", "deleted"),
        ("positioned", "deleted"),
    ],
)
def test_a_raw_chunk_lost_since_the_build(tmp_path, capsys, monkeypatch, kind, damage):
    _, cube, groups, options = built(tmp_path, kind)
    (report,) = accumulus.verify(str(groups))
    assert report.ok, report.problems
    lost = raw_objects(cube)[1]
    key = str(lost.relative_to(cube))
    lost.unlink()
    if damage == "emptied":
        lost.write_bytes(b"")
    elif damage == "directory":
        lost.mkdir()
    # verify names it (one problem line, exit status 1).
    (report,) = accumulus.verify(str(groups))
    assert len(report.problems) == 1 and key in report.problems[0], report.problems
    assert "missing or empty" in report.problems[0]
    code, out, err = run(capsys, monkeypatch, "verify", str(groups))
    assert code == 1 and key in out + err
    # A rebuild refuses to bake the loss in: one line, exit 2, nothing written.
    source = [str(cube), VAR] + (["--into", str(groups)] if kind == "sidecar" else [])
    at = ["--at", "time=1"] if kind == "positioned" else []
    before = files(groups)
    message = refused(capsys, monkeypatch, "accumulate", *source, *at, "--rebuild")
    assert key in message and "--allow-missing-chunks" in message
    assert files(groups) == before
    # Told to, it sums the lost chunk as missing values, and records that it was missing.
    if damage == "directory":
        lost.rmdir()
    elif damage == "emptied":
        lost.unlink()  # an empty object does not decode: gone, it reads as missing values
    code, _, err = run(
        capsys, monkeypatch, "accumulate", *source, *at, "--rebuild", "--allow-missing-chunks"
    )
    assert code == 0, err
    (report,) = accumulus.verify(str(groups))
    assert report.ok, report.problems
    assert accumulus.accumulate(str(cube), VAR, rebuild=True, **_into(kind, groups, at))
    got = accumulus.average(str(cube), VAR, ["lat", "lon"], {"time": TIME}, **options)
    raw = accumulus.average(
        str(cube), VAR, ["lat", "lon"], {"time": TIME}, use_accumulation=False, **options
    )
    np.testing.assert_allclose(got.values, raw.values, rtol=1e-9)


def _into(kind: str, groups: Path, at: list[str]) -> dict:
    options: dict = {"into": str(groups)} if kind == "sidecar" else {}
    if at:
        options["at"] = {"time": 1}
    return options


def test_an_edited_stride_is_an_error_naming_it(tmp_path, capsys, monkeypatch):
    """The issue's probe: an edited ``_ACCUMULATION_STRIDE`` gave answers off by 3.75 K."""
    ds = synthetic_dataset({"time": 20, "lat": 8, "lon": 10}, seed=7)
    cube = tmp_path / "cube.zarr"
    write_cube(ds, cube, CHUNKS)
    accumulus.accumulate(str(cube), VAR, strides={"time": 2})
    zmetadata = json.loads((cube / ".zmetadata").read_text())
    for attrs_file in (cube / spec.group_name(VAR)).glob("acc*_time/.zattrs"):
        attrs = json.loads(attrs_file.read_text())
        assert attrs["_ACCUMULATION_STRIDE"] == [2, 0, 0]
        # Every array of the accumulation alike, and fewer entries than it allows: fits.
        attrs["_ACCUMULATION_STRIDE"] = [1, 0, 0]
        attrs_file.write_text(json.dumps(attrs))
        zmetadata["metadata"][str(attrs_file.relative_to(cube))] = attrs
    (cube / ".zmetadata").write_text(json.dumps(zmetadata))

    args = [str(cube), VAR, "--over", "lat,lon", "--range", "time=2001-01-02/2001-01-18"]
    message = refused(capsys, monkeypatch, "average", *args, "--plan", "accumulation")
    assert "_time: _ACCUMULATION_STRIDE is [1, 0, 0]" in message
    assert "built with [2, 0, 0]" in message and "--rebuild" in message
    (report,) = accumulus.verify(str(cube))
    assert any("_ACCUMULATION_STRIDE" in p for p in report.problems), report.problems
    # The service answers from the raw data, and says why.
    client = TestClient(create_app([str(cube)]))
    response = client.get(
        f"/api/datasets/cube/{VAR}/average?over=lat,lon&time=2001-01-02/2001-01-18"
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert "_ACCUMULATION_STRIDE" in body["note"] and "raw data" in body["note"]
    assert body["plan"]["accumulation_chunks_read"] == 0
    expected = xarray_reference(ds[VAR].isel(time=slice(1, 18)), ["lat", "lon"], "area", "mean")
    np.testing.assert_allclose(body["values"], expected.values, rtol=1e-9)
    # accumulate without --rebuild says so; with it, the group is right again.
    assert "--rebuild" in refused(capsys, monkeypatch, "accumulate", str(cube), VAR)
    accumulus.accumulate(str(cube), VAR, strides={"time": 2}, rebuild=True)
    got = accumulus.average(str(cube), VAR, ["lat", "lon"], {"time": TIME})
    np.testing.assert_allclose(got.values, expected.values, rtol=1e-9)


def test_a_raw_array_rechunked_since_the_build(tmp_path, capsys, monkeypatch):
    ds = synthetic_dataset({"time": 20, "lat": 8, "lon": 10}, seed=7)
    cube = tmp_path / "cube.zarr"
    write_cube(ds, cube, CHUNKS)
    accumulus.accumulate(str(cube), VAR)
    group = cube / spec.group_name(VAR)
    shutil.move(group, tmp_path / "kept")
    write_cube(ds, cube, {"time": 4, "lat": 4, "lon": 5})  # written again, other chunks
    shutil.move(tmp_path / "kept", group)
    zmetadata = json.loads((cube / ".zmetadata").read_text())
    for path in group.rglob(".z*"):
        key = str(path.relative_to(cube))
        zmetadata["metadata"][key] = json.loads(path.read_text())
    (cube / ".zmetadata").write_text(json.dumps(zmetadata))
    message = refused(
        capsys, monkeypatch, "average", str(cube), VAR, "--over", "time", "--plan", "accumulation"
    )
    assert "has other chunk edges along time since its accumulations were built" in message


def test_appends_keep_the_record_current(tmp_path):
    ds = synthetic_dataset({"time": 20, "lat": 8, "lon": 10}, seed=7)
    cube = str(tmp_path / "cube.zarr")
    accumulus.append(cube, ds.isel(time=slice(0, 7)), chunks=CHUNKS)
    accumulus.accumulate(cube, VAR)
    accumulus.append(cube, ds.isel(time=slice(7, 13)))
    accumulus.append(cube, ds.isel(time=slice(13, 20)))
    (report,) = accumulus.verify(cube)
    assert report.ok, report.problems
    record = json.loads((Path(cube) / spec.group_name(VAR) / ".zattrs").read_text())
    raw = record["accumulus"]["built_from"]["raw"]
    assert raw["objects"] == 4 * 2 * 2 and raw["missing_count"] == 0
