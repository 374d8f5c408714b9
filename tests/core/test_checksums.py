"""Accumulation chunks carry a checksum (crc32c in v3, fletcher32 in v2): bytes changed on
disk are an error naming the chunk (the CLI and verify), or a fallback to the raw data with a
note (the service), never a silently wrong answer. Other readers (zarr-python, xarray) read
the arrays as before."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import xarray as xr
import zarr
from fastapi.testclient import TestClient

from accumulus import api
from accumulus.cli import main
from accumulus.service import create_app
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference


@pytest.fixture(params=[2, 3], ids=["v2", "v3"])
def cube(request, tmp_path):
    ds = synthetic_dataset({"time": 24, "lat": 8, "lon": 10}, seed=4, nan_fraction=0.1)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 4, "lat": 4, "lon": 5}, zarr_format=request.param)
    api.accumulate(str(path), VAR, ["time"], weights="none")
    return path, ds, request.param


def test_accumulation_arrays_are_checksummed_and_read_by_other_readers(cube):
    path, _, zarr_format = cube
    array = zarr.open_array(str(path), path=f"{VAR}_accumulation_group/acc_n_time", mode="r")
    if zarr_format == 3:
        assert "crc32c" in [c.to_dict()["name"] for c in array.metadata.codecs]
    else:
        # Compressed by Blosc as a filter (its shuffle sees the values), then checksummed:
        # filters netcdf-c decodes too (tests/interop/test_netcdf_c.py reads the values).
        assert [f.codec_id for f in array.metadata.filters] == ["blosc", "fletcher32"]
    # xarray opens the group as a dataset and reads the counts: one entry per time chunk.
    group = xr.open_zarr(str(path), group=f"{VAR}_accumulation_group", consolidated=False)
    assert group["acc_n_time"].shape[0] == 6 and (group["acc_n_time"].values >= 0).all()


def scribble_accumulation_chunk(path, zarr_format: int) -> str:
    """Damage the first chunk of Σx so that only its checksum can tell: 64 random bytes
    over the middle of the stored bytes, which the checksum covers (v3's crc32c codec, v2's
    fletcher32 filter after Blosc). Its key."""
    array = path / f"{VAR}_accumulation_group" / "acc_time"
    key = "c/0/0/0" if zarr_format == 3 else "0.0.0"
    data = bytearray((array / key).read_bytes())
    at = len(data) // 2
    data[at : at + 64] = np.random.default_rng(1).bytes(min(64, len(data) - at))
    (array / key).write_bytes(bytes(data))
    return f"{VAR}_accumulation_group/acc_time/{key}"


def test_a_damaged_accumulation_chunk_is_named_never_summed(cube, capsys, monkeypatch):
    path, ds, zarr_format = cube
    key = scribble_accumulation_chunk(path, zarr_format)
    args = ["average", str(path), VAR, "--over", "time", "--weights", "none"]
    monkeypatch.setattr(sys, "argv", ["accumulus", *args])
    with pytest.raises(SystemExit) as stopped:
        main()
    err = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and len(err.splitlines()) == 1
    assert f"chunk {key} cannot be read" in err and "checksum" in err
    monkeypatch.setattr(sys, "argv", ["accumulus", "verify", str(path), VAR])
    with pytest.raises(SystemExit) as stopped:
        main()
    assert stopped.value.code == 1 and f"chunk {key} cannot be read" in capsys.readouterr().err
    # The service answers from the raw data instead, and says why.
    client = TestClient(create_app([str(path)]))
    body = client.get("/api/datasets/cube/precip/average?over=time&weights=none").json()
    assert f"chunk {key} cannot be read" in body["note"]
    assert body["note"].endswith("answered from the raw data")
    expected = xarray_reference(ds[VAR], ["time"], "none", "mean")
    np.testing.assert_allclose(np.array(body["values"], dtype="f8"), expected.values, rtol=1e-9)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_damaged_positioned_chunk_is_named(tmp_path, capsys, monkeypatch, zarr_format):
    """Accumulations at every day (``--at time=1``) carry a checksum too (v2: Fletcher-32,
    which netcdf-c also reads): a chunk scribbled over is named by verify, never summed."""
    ds = synthetic_dataset({"time": 24, "lat": 8, "lon": 10}, seed=5, nan_fraction=0.1)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 4, "lat": 4, "lon": 5}, zarr_format=zarr_format)
    api.accumulate(str(path), VAR, ["time"], weights="none", at={"time": 1})
    array = path / f"{VAR}_accumulation_group" / "accumulus_positions" / "acc_time_at_1"
    key = "c/5/0/0" if zarr_format == 3 else "5.0.0"
    data = bytearray((array / key).read_bytes())
    at = len(data) // 2
    data[at : at + 16] = np.random.default_rng(2).bytes(16)
    (array / key).write_bytes(bytes(data))
    monkeypatch.setattr(sys, "argv", ["accumulus", "verify", str(path), VAR])
    with pytest.raises(SystemExit) as stopped:
        main()
    err = capsys.readouterr().err
    assert stopped.value.code == 1
    positions = f"{VAR}_accumulation_group/accumulus_positions"
    assert f"chunk {positions}/acc_time_at_1/{key} cannot be read" in err
