"""Granule kinds behind one interface: the same values written as a NetCDF4 file, a NetCDF-3
file, a Zarr directory, a Zarr store object and an in-memory Dataset are each found to be
their kind, and read, declared, identified and described (compression) through it, compared
with what xarray reads from the same bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from numcodecs import Zlib

import accumulus
from accumulus.errors import AccumulusError
from accumulus.ingest.granules import KINDS, kind_of, open_granule, resolve_group
from accumulus.ingest.granules.base import OpenOptions
from accumulus.ingest.granules.dataset import DatasetKind
from accumulus.ingest.granules.netcdf3 import NetCDF3Kind
from accumulus.ingest.granules.netcdf4 import NetCDF4Kind
from accumulus.ingest.granules.zarr_store import ZarrKind


def sample(seed: int = 0) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    values = rng.integers(-500, 500, (6, 4, 5)).astype("i2")
    precip = xr.Variable(("time", "lat", "lon"), values, {"scale_factor": 0.01})
    time = xr.Variable("time", np.arange(6, dtype="i4") * 3, {"units": "hours since 2000-01-01"})
    lat = xr.Variable("lat", np.linspace(-45, 45, 4))
    lon = xr.Variable("lon", np.linspace(0, 288, 5))
    return xr.Dataset({"precip": precip}, coords={"time": time, "lat": lat, "lon": lon})


def write(kind: str, folder: Path, dataset: xr.Dataset) -> object:
    """``dataset`` (encoded values as given) as a granule of ``kind``."""
    encoding = {"precip": {"zlib": True, "complevel": 4, "chunksizes": (2, 4, 5)}}
    if kind == "netcdf4":
        path = folder / "granule.nc"
        dataset.to_netcdf(path, engine="netcdf4", encoding=encoding)
        return path
    if kind == "netcdf3":
        path = folder / "granule3.nc"
        dataset.to_netcdf(path, format="NETCDF3_64BIT")
        return path
    zarr_encoding = {"precip": {"compressors": [Zlib(level=4)], "chunks": (2, 4, 5)}}
    if kind == "zarr directory":
        path = folder / "granule.zarr"
        dataset.to_zarr(path, zarr_format=2, encoding=zarr_encoding, consolidated=True)
        return str(path)
    if kind == "zarr store":
        store = zarr.storage.MemoryStore()
        dataset.to_zarr(store, zarr_format=2, encoding=zarr_encoding, consolidated=True)
        return store
    dataset = dataset.copy()
    dataset.precip.encoding["compressors"] = [Zlib(level=4)]
    return dataset


KIND_OF = {
    "netcdf4": NetCDF4Kind,
    "netcdf3": NetCDF3Kind,
    "zarr directory": ZarrKind,
    "zarr store": ZarrKind,
    "dataset": DatasetKind,
}
ZLIB = [{"id": "zlib", "level": 4}]
# What each kind says the cube should keep: netCDF4's shuffle-less zlib as a codec, NetCDF-3
# nothing (no compression), Zarr its stored codecs, a Dataset its encoding.
COMPRESSION = {
    "netcdf4": ZLIB,
    "netcdf3": None,
    "zarr directory": ZLIB,
    "zarr store": ZLIB,
    "dataset": ZLIB,
}


@pytest.mark.parametrize("kind", list(KIND_OF))
def test_each_kind_reads_what_xarray_reads(tmp_path: Path, kind: str) -> None:
    dataset = sample()
    item = write(kind, tmp_path, dataset)
    assert type(kind_of(item)) is KIND_OF[kind]
    granule = open_granule(item)
    try:
        expected = dataset if kind == "dataset" else _xarray_encoded(item)
        assert set(granule.dataset.variables) == {"precip", "time", "lat", "lon"}
        for name in ("precip", "time"):
            np.testing.assert_array_equal(granule.dataset[name].values, expected[name].values)
        assert granule.dataset.precip.attrs["scale_factor"] == 0.01  # encoded, not decoded
        assert granule.size > 0 and granule.checksum.startswith("sha256:")
        chains = granule.compression(zarr_format=2)
        assert _compressors(chains["precip"]) == COMPRESSION[kind]
    finally:
        granule.close()


def _xarray_encoded(item: object) -> xr.Dataset:
    if isinstance(item, Path):
        return xr.open_dataset(item, decode_cf=False)
    return xr.open_zarr(item, decode_cf=False)


def _compressors(chain: list[dict] | None) -> list[dict] | None:
    """The chain without byte-order and shuffle stages netCDF4 or zarr may add."""
    if chain is None:
        return None
    return [{"id": c["id"], "level": c["level"]} for c in chain if c["id"] == "zlib"]


@pytest.mark.parametrize("kind", ["netcdf4", "netcdf3", "zarr directory", "dataset"])
def test_the_identity_follows_the_values(tmp_path: Path, kind: str) -> None:
    """The same values give the same fingerprint (the journal skips the granule); one value
    changed gives another."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    changed = sample()
    changed.precip.values[3, 2, 1] += 1
    fingerprints = []
    for folder, dataset in (("a", sample()), ("b", sample()), ("c", changed)):
        granule = open_granule(write(kind, tmp_path / folder, dataset))
        fingerprints.append(granule.checksum)
        granule.close()
    assert fingerprints[0] == fingerprints[1] != fingerprints[2]


def test_declared_sizes_come_from_each_kinds_metadata(tmp_path: Path) -> None:
    """What a file declares, before it is read: netCDF4's chunks, NetCDF-3's none."""
    netcdf4 = NetCDF4Kind().open(write("netcdf4", tmp_path, sample()), OpenOptions())
    netcdf3 = NetCDF3Kind().open(write("netcdf3", tmp_path, sample()), OpenOptions())
    store = ZarrKind().open(write("zarr directory", tmp_path, sample()), OpenOptions())
    try:
        declared = {
            name: {v.name: (v.dims, v.shape, v.itemsize, v.chunks) for v in file.declared("")}
            for name, file in (("netcdf4", netcdf4), ("netcdf3", netcdf3), ("zarr", store))
        }
    finally:
        netcdf4.close()
        netcdf3.close()
        store.close()
    assert declared["netcdf4"]["precip"] == (("time", "lat", "lon"), (6, 4, 5), 2, (2, 4, 5))
    assert declared["netcdf3"]["precip"] == (("time", "lat", "lon"), (6, 4, 5), 2, None)
    assert declared["zarr"]["precip"] == (("time", "lat", "lon"), (6, 4, 5), 2, (2, 4, 5))


def test_a_file_of_no_kind_is_named_in_one_line(tmp_path: Path) -> None:
    garbage = tmp_path / "notes.nc"
    garbage.write_text("not a granule")
    assert type(kind_of(garbage)) is NetCDF4Kind  # netCDF4 says what it is not
    with pytest.raises(AccumulusError, match=r"notes.nc: cannot read it as NetCDF4/HDF5"):
        open_granule(garbage)
    with pytest.raises(AccumulusError, match=r"granule .*missing.nc: no such file or Zarr store"):
        open_granule(tmp_path / "missing.nc")


def test_a_dataset_has_no_groups_of_its_own(tmp_path: Path) -> None:
    """A Dataset is read whole; the group asked for says where the cube keeps it."""
    assert resolve_group(sample(), "time", None) == ""
    assert resolve_group(sample(), "time", "/Grid/") == "Grid"
    with pytest.raises(AccumulusError, match=r"no group 'Grid'; its groups are /"):
        resolve_group(write("netcdf4", tmp_path, sample()), "time", "Grid")


def test_kinds_are_guessed_in_order() -> None:
    """A path may be several kinds: each kind says which Python types it takes, and the
    registry asks them in order."""
    assert [type(k) for k in KINDS] == [DatasetKind, ZarrKind, NetCDF3Kind, NetCDF4Kind]
    assert type(kind_of("s3://bucket/granule.zarr")) is ZarrKind  # a URL: a store


def test_a_truncated_netcdf3_granule_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    """netcdf-c reads a NetCDF-3 file cut short as zeros past its end; append refuses it by
    the size its header declares, as convert does, and makes no cube."""
    whole = write("netcdf3", tmp_path, sample())
    cut = tmp_path / "cut.nc"
    cut.write_bytes(whole.read_bytes()[:-40])
    assert (xr.open_dataset(cut).lon.values[-1], sample().lon.values[-1]) == (0, 288)
    with pytest.raises(AccumulusError, match=r"granule .*cut.nc: truncated NetCDF-3 64-bit"):
        accumulus.append(str(tmp_path / "cube.zarr"), [cut])
    assert not (tmp_path / "cube.zarr").exists()
    result = accumulus.append(str(tmp_path / "cube.zarr"), [whole])
    assert result.extent == (0, 6)
