"""NetCDF4/HDF5 → Zarr conversion with real files, read back by xarray and zarr."""

from __future__ import annotations

import json
import subprocess
import sys

import h5py
import hdf5plugin
import numpy as np
import pytest
import xarray as xr
import zarr

from accumulus.errors import AccumulusError
from accumulus.ingest.convert import convert, parse_codec_options
from accumulus.ingest.convert import source as convert_source

from .samples import sample, write_granule


@pytest.fixture(scope="module")
def granule(tmp_path_factory):
    path = tmp_path_factory.mktemp("granule") / "granule.nc4"
    write_granule(path)
    return path


def _zarray(store, name):
    return json.loads((store / name / ".zarray").read_text())


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_granule_converts_and_xarray_reads_it_identically(granule, tmp_path, zarr_format):
    dest = tmp_path / "cube.zarr"
    plan = convert(granule, dest, zarr_format=zarr_format)
    assert {a.path for a in plan.arrays} == {
        "time",
        "lat",
        "lon",
        "precip",
        "temp",
        "station_name",
        "crs",
        "ancillary/pressure",
        "ancillary/mask",
    }
    for group in (None, "ancillary"):
        expected = xr.open_dataset(granule, group=group).load()
        actual = xr.open_zarr(dest, group=group).load()
        xr.testing.assert_identical(actual, expected)
    # CF time decoded from the copied attributes; the fill value masks.
    cube = xr.open_zarr(dest)
    assert str(cube.time.values[0])[:10] == "2000-01-01"
    assert cube.time.encoding["calendar"] == "noleap"
    assert np.isnan(cube.precip.values[1, 2, 3])
    assert np.count_nonzero(np.isnan(cube.precip.values)) == 1


def test_v2_metadata_follows_xarray_conventions_and_keeps_filters(granule, tmp_path):
    dest = tmp_path / "cube.zarr"
    convert(granule, dest)
    precip = _zarray(dest, "precip")
    assert precip["chunks"] == [2, 3, 4]
    assert precip["fill_value"] == -9999.0
    assert precip["filters"] == [{"id": "shuffle", "elementsize": 4}]
    assert precip["compressor"] == {"id": "zlib", "level": 4}
    assert _zarray(dest, "temp")["compressor"] == {"id": "zstd", "level": 3}
    assert _zarray(dest, "temp")["fill_value"] is None  # no _FillValue: nothing is masked
    assert _zarray(dest, "ancillary/pressure")["compressor"] == {"id": "bz2", "level": 9}
    mask = _zarray(dest, "ancillary/mask")
    assert mask["compressor"] == {
        "id": "blosc",
        "cname": "zstd",
        "clevel": 2,
        "shuffle": 1,
        "blocksize": 0,
    }
    attrs = json.loads((dest / "precip" / ".zattrs").read_text())
    assert attrs == {
        "_ARRAY_DIMENSIONS": ["time", "lat", "lon"],
        "_FillValue": -9999.0,  # for netcdf-c, which reads it from here
        "units": "mm/day",
        "long_name": "precipitation",
        # netcdf-c's NCZarr metadata (accumulus.stores.nczarr_metadata); xarray hides it
        "_nczarr_array": {"dimension_references": ["/time", "/lat", "/lon"], "storage": "chunked"},
    }
    station = json.loads((dest / "station_name" / ".zattrs").read_text())
    assert _zarray(dest, "station_name")["dtype"] == "|S9"  # fixed width, as netcdf-c reads
    assert station["_Encoding"] == "utf-8"
    root = json.loads((dest / ".zattrs").read_text())
    assert root.pop("_nczarr_superblock") == {"version": "2.0.0"}
    assert root.pop("_nczarr_group")["groups"] == ["ancillary"]
    assert root == {"title": "test granule", "history": [1.5, 2.5], "version": 3}
    assert (dest / ".zmetadata").is_file()


def test_v3_metadata_places_codecs_and_names_dimensions(granule, tmp_path):
    dest = tmp_path / "cube.zarr"
    convert(granule, dest, zarr_format=3)
    precip = json.loads((dest / "precip" / "zarr.json").read_text())
    assert precip["dimension_names"] == ["time", "lat", "lon"]
    assert precip["fill_value"] == -9999.0
    assert [c["name"] for c in precip["codecs"]] == ["bytes", "numcodecs.shuffle", "numcodecs.zlib"]
    assert precip["codecs"][2]["configuration"] == {"level": 4}


def test_plain_hdf5_with_scales_phony_dimensions_and_plugin_filters(tmp_path):
    source = tmp_path / "granule.h5"
    with h5py.File(source, "w") as file:
        file.attrs["mission"] = b"GPM"  # fixed-length bytes, as many NASA files have
        file.attrs["orbit"] = np.array([42], dtype="i4")
        x = file.create_dataset("x", data=np.arange(10.0))
        x.make_scale("x")
        grid = file.create_group("Grid")
        rain = grid.create_dataset("rain", data=sample((10, 7)), chunks=(5, 7), **hdf5plugin.LZ4())
        rain.dims[0].attach_scale(x)
        rain.attrs["units"] = "mm/hr"
        grid.create_dataset(
            "flag", data=np.ones((10, 7), "i1"), chunks=(10, 7), **hdf5plugin.Zstd()
        )
    dest = tmp_path / "cube.zarr"
    convert(source, dest, zarr_format=3)
    group = zarr.open_group(dest, mode="r")
    assert group.attrs.asdict() == {"mission": "GPM", "orbit": 42}
    rain = group["Grid/rain"]
    # One phony name per size within a group (as netcdf-c names them), in name order.
    assert group["Grid/flag"].metadata.dimension_names == ("phony_dim_0", "phony_dim_1")
    assert rain.metadata.dimension_names == ("x", "phony_dim_1")
    assert [c.to_dict()["name"] for c in rain.metadata.codecs] == ["bytes", "numcodecs.lz4"]
    np.testing.assert_array_equal(rain[:], sample((10, 7)))
    assert rain.chunks == (5, 7)


def test_codec_overrides_and_default(granule, tmp_path):
    dest = tmp_path / "cube.zarr"
    convert(
        granule,
        dest,
        codecs={"precip": [{"id": "shuffle"}, {"id": "zstd", "level": 9}]},
        default_codec={"id": "zlib", "level": 1},
    )
    assert _zarray(dest, "precip")["filters"] == [{"id": "shuffle", "elementsize": 4}]
    assert _zarray(dest, "precip")["compressor"] == {"id": "zstd", "level": 9}
    assert _zarray(dest, "ancillary/pressure")["compressor"] == {"id": "zlib", "level": 1}
    xr.testing.assert_identical(xr.open_zarr(dest).load(), xr.open_dataset(granule).load())


def test_parse_codec_options():
    per_variable, default = parse_codec_options(
        ['precip={"id":"zstd","level":5}', '{"id":"zlib"}', '/grp/v=[{"id":"shuffle"}]']
    )
    assert per_variable == {"precip": {"id": "zstd", "level": 5}, "grp/v": [{"id": "shuffle"}]}
    assert default == {"id": "zlib"}
    for bad, message in [
        (["precip={id:zstd}"], r"--codec precip: invalid JSON"),
        (["precip="], r"expected VAR='<json>'"),
        (["precip=5"], r"expected a JSON object or list"),
        (['{"id":"zlib"}', '{"id":"zstd"}'], r"more than one default"),
    ]:
        with pytest.raises(AccumulusError, match=message):
            parse_codec_options(bad)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"codecs": {"precip": {"level": 5}}}, r"--codec precip: codec JSON .* no string 'id'"),
        ({"codecs": {"precip": {"id": "zstd", "lvl": 5}}}, r"codec 'zstd': invalid parameters"),
        ({"codecs": {"precip": {"id": "nosuch"}}}, r"no numcodecs codec named 'nosuch'"),
        ({"codecs": {"rain": {"id": "zstd"}}}, r"--codec names no variable \['rain'\]"),
        ({"zarr_format": 4}, r"--zarr-format must be 2 or 3"),
        (
            {
                "codecs": {"precip": [{"id": "zstd"}, {"id": "delta", "dtype": "<f4"}]},
                "zarr_format": 3,
            },
            r"variable 'precip': codec 'delta' is array→array but follows",
        ),
        (
            {"codecs": {"station_name": {"id": "zstd"}}},
            r"variable 'station_name': variable-length strings take no HDF5 filters",
        ),
    ],
)
def test_bad_codec_input_writes_nothing(granule, tmp_path, kwargs, message):
    dest = tmp_path / "cube.zarr"
    with pytest.raises(AccumulusError, match=message):
        convert(granule, dest, **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_unknown_filter_names_variable_filter_and_provider(tmp_path):
    source = tmp_path / "granule.h5"
    with h5py.File(source, "w") as file:
        file.create_dataset("ok", data=sample(), chunks=(12, 5), compression="gzip")
        file.create_dataset("bits", data=sample(), chunks=(12, 5), **hdf5plugin.Blosc2())
    dest = tmp_path / "out" / "cube.zarr"
    with pytest.raises(AccumulusError) as info:
        convert(source, dest)
    message = str(info.value)
    assert "variable 'bits'" in message and "HDF5 filter 32026 (blosc2" in message
    assert "from hdf5plugin" in message and "--codec bits=" in message
    assert not dest.exists()
    # The remedy the message names works.
    convert(source, dest, codecs={"bits": {"id": "zstd", "level": 1}})
    np.testing.assert_array_equal(zarr.open_array(dest / "bits", mode="r")[:], sample())


def test_corrupt_chunk_names_variable_and_filters_and_leaves_nothing(tmp_path):
    source = tmp_path / "granule.h5"
    with h5py.File(source, "w") as file:
        dataset = file.create_dataset("v", data=sample(), chunks=(12, 5), **hdf5plugin.Zstd())
        dataset.id.write_direct_chunk((12, 5), b"\x28\xb5\x2f\xfd" + bytes(40))
    dest = tmp_path / "out" / "cube.zarr"
    with pytest.raises(AccumulusError, match=r"variable 'v'.*\[0:24, 5:10\].*zstd \(32015\)"):
        convert(source, dest)
    assert list((tmp_path / "out").iterdir()) == []  # no cube, no staging directory


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: None, r"no such file"),
        (lambda p: p.write_text("not hdf5"), r"not a NetCDF file"),
    ],
)
def test_bad_source(tmp_path, make, message):
    source = tmp_path / "granule.nc"
    make(source)
    with pytest.raises(AccumulusError, match=message):
        convert(source, tmp_path / "cube.zarr")


def test_existing_destination_is_refused(granule, tmp_path):
    (tmp_path / "cube.zarr").mkdir()
    (tmp_path / "cube.zarr" / "keep.txt").write_text("mine")
    with pytest.raises(AccumulusError, match="destination exists"):
        convert(granule, tmp_path / "cube.zarr")
    assert (tmp_path / "cube.zarr" / "keep.txt").read_text() == "mine"


def test_blocks_are_chunk_aligned_and_cover_the_array_once(monkeypatch):
    monkeypatch.setattr(convert_source, "BLOCK_BYTES", 4 * 3 * 5 * 2)  # two chunks of f4
    shape, chunks = (10, 7, 9), (3, 5, 4)
    seen = np.zeros(shape, int)
    for region in convert_source.blocks(shape, chunks, 4):
        assert region[0].start % 3 == 0 and region[1].start % 5 == 0 and region[2].start % 4 == 0
        assert (region[0].stop - region[0].start) <= 6  # widened to two chunks at most
        seen[region] += 1
    assert (seen == 1).all()


def test_streaming_writes_through_many_small_blocks(granule, tmp_path, monkeypatch):
    monkeypatch.setattr(convert_source, "BLOCK_BYTES", 1)  # one chunk at a time
    dest = tmp_path / "cube.zarr"
    convert(granule, dest)
    xr.testing.assert_identical(xr.open_zarr(dest).load(), xr.open_dataset(granule).load())


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "accumulus", *args], capture_output=True, text=True, check=False
    )


def test_cli_convert_and_its_one_line_error(tmp_path):
    source = tmp_path / "granule.h5"
    with h5py.File(source, "w") as file:
        file.create_dataset("bits", data=sample(), chunks=(12, 5), **hdf5plugin.Blosc2())
    failed = _cli("convert", str(source), str(tmp_path / "a.zarr"))
    assert failed.returncode == 2
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "32026" in lines[0]
    assert not (tmp_path / "a.zarr").exists()
    done = _cli(
        "convert",
        str(source),
        str(tmp_path / "b.zarr"),
        "--zarr-format",
        "3",
        "--codec",
        'bits={"id":"zstd","level":5}',
    )
    assert done.returncode == 0, done.stderr
    assert "bits [24, 10] float32: zstd" in done.stdout
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "b.zarr/bits")[:], sample())


def test_cli_filters_json():
    result = _cli("filters", "--json")
    assert result.returncode == 0, result.stderr
    rows = {row["hdf5_id"]: row for row in json.loads(result.stdout)["filters"]}
    assert rows[32015]["usable"] is True and rows[32015]["codec_id"] == "zstd"
    assert rows[4]["usable"] is True and rows[4]["codec_id"] == "szip"
    assert rows[32026]["usable"] is False and rows[32026]["reason"]
