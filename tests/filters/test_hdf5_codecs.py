"""szip, LZF, bitshuffle and zfp through imagecodecs, checked against the bytes HDF5 filters
(h5py, hdf5plugin) and netcdf-c really write: chunks decode both ways, netcdf-c's own szip
stores read as netcdf-c reads them, and ``convert`` keeps each compression."""

from __future__ import annotations

import h5py
import hdf5plugin
import imagecodecs.numcodecs
import netCDF4
import numcodecs
import numpy as np
import pytest
import zarr

from accumulus.errors import AccumulusError
from accumulus.filters import FilterError, dataset_pipeline, hdf5_to_codec
from accumulus.filters.codecs import Bitshuffle, Szip, szip_local_parameters
from accumulus.ingest.convert import convert
from accumulus.stores.opening import open_store

from .samples import sample


def _noisy(shape, dtype) -> np.ndarray:
    """Compressible but irregular values, so every block of a codec is exercised."""
    rng = np.random.default_rng(7)
    values = (np.arange(np.prod(shape)) % 23) * 3 + rng.integers(0, 4, int(np.prod(shape)))
    return values.reshape(shape).astype(dtype)


def _chunk_pairs(dataset: h5py.Dataset):
    """(raw chunk bytes as HDF5 stored them, the chunk's values) for every chunk."""
    for info in (dataset.id.get_chunk_info(i) for i in range(dataset.id.get_num_chunks())):
        mask, raw = dataset.id.read_direct_chunk(info.chunk_offset)
        assert mask == 0  # the filter really ran on this chunk
        region = tuple(
            slice(start, start + size)
            for start, size in zip(info.chunk_offset, dataset.chunks, strict=True)
        )
        block = np.zeros(dataset.chunks, dataset.dtype)  # edge chunks are stored whole
        values = dataset[region]
        block[tuple(slice(0, n) for n in values.shape)] = values
        yield bytes(raw), block


# szip ----------------------------------------------------------------------------------------

SZIP_CASES = [  # (dtype, (coding, pixels per block), shape, chunks)
    ("f4", ("nn", 8), (24, 10), (12, 5)),
    ("i2", ("ec", 4), (24, 10), (12, 10)),
    ("f8", ("nn", 32), (20, 10), (7, 10)),
    (">i4", ("nn", 16), (24, 10), (12, 10)),
    ("u1", ("ec", 2), (9, 33), (4, 33)),
]


@pytest.mark.parametrize(("dtype", "options", "shape", "chunks"), SZIP_CASES)
def test_szip_chunks_are_hdf5s_bytes(tmp_path, dtype, options, shape, chunks):
    """With HDF5's stored parameters, the codec decodes every chunk HDF5 wrote and encodes
    the very same bytes (HDF5's 4-byte size header, then libaec's stream)."""
    with h5py.File(tmp_path / "szip.h5", "w") as file:
        dataset = file.create_dataset(
            "v", data=_noisy(shape, dtype), chunks=chunks, compression="szip",
            compression_opts=options,
        )  # fmt: skip
        (stage,) = dataset_pipeline(dataset)
        mask, block, bits, scanline = stage.params
        codec = Szip(mask, block, bits, scanline)
        for raw, values in _chunk_pairs(dataset):
            decoded = np.frombuffer(codec.decode(raw), dataset.dtype).reshape(chunks)
            np.testing.assert_array_equal(decoded, values)
            assert codec.encode(values) == raw


def test_szip_json_is_netcdf_cs_and_local_parameters_follow_its_rule():
    # HDF5's stored mask carries K13, raw and byte-order bits; the JSON keeps the coding.
    assert hdf5_to_codec(4, (169, 8, 32, 60)) == {"id": "szip", "mask": 32, "pixels-per-block": 8}
    assert hdf5_to_codec(4, (141, 4, 16, 10)) == {"id": "szip", "mask": 4, "pixels-per-block": 4}
    # netcdf-c starts from the array's last dimension, HDF5 from the chunk's.
    assert szip_local_parameters(8, 4, (24, 10), (12, 5)) == (32, 10)
    assert szip_local_parameters(32, 8, (20, 10), (7, 10)) == (64, 70)
    assert szip_local_parameters(8, 2, (3, 5000), (3, 100)) == (16, 1024)
    with pytest.raises(FilterError, match="pixels-per-block 32 is more than the 12 values"):
        szip_local_parameters(32, 4, (3, 4), (3, 4))
    with pytest.raises(FilterError, match="bits-per-pixel and pixels-per-scanline"):
        numcodecs.get_codec({"id": "szip", "mask": 32, "pixels-per-block": 8}).decode(b"")


def _write_netcdf_szip(url: str) -> dict[str, np.ndarray]:
    """Variables netcdf-c compresses with szip, each a different case of its rules."""
    values = {}
    with netCDF4.Dataset(url, "w") as ds:
        ds.createDimension("y", 24)
        ds.createDimension("x", 10)
        ds.createDimension("wide", 40)
        cases = {  # name: (dtype, dims, chunks, coding, pixels per block)
            "nn8": ("f4", ("y", "x"), (12, 5), "nn", 8),  # scanline from x, not the chunk
            "ec4": ("i2", ("y", "x"), (7, 10), "ec", 4),  # chunks that do not divide y
            "nn32": ("f8", ("y", "x"), (12, 5), "nn", 32),  # x shorter than a block
            "i4_wide": ("i4", ("y", "wide"), (5, 16), "nn", 16),
        }
        for name, (dtype, dims, chunks, coding, block) in cases.items():
            var = ds.createVariable(
                name, dtype, dims, chunksizes=chunks, compression="szip", szip_coding=coding,
                szip_pixels_per_block=block,
            )  # fmt: skip
            shape = tuple(len(ds.dimensions[d]) for d in dims)
            values[name] = _noisy(shape, dtype)
            var[:] = values[name]
    return values


def test_netcdf_c_szip_store_reads_as_netcdf_c_reads_it(tmp_path):
    path = tmp_path / "szip.zarr"
    written = _write_netcdf_szip(f"file://{path}#mode=nczarr,file")
    group = zarr.open_group(open_store(path), mode="r")
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file") as ds:
        for name, values in written.items():
            read_by_netcdf = ds[name][:].data
            np.testing.assert_array_equal(read_by_netcdf, values)
            np.testing.assert_array_equal(group[name][:], read_by_netcdf)
    # What netcdf-c wrote is netcdf-c's JSON, without the local parameters.
    assert zarr.open_array(path / "nn8", mode="r").metadata.compressor.get_config() == {
        "id": "szip", "mask": 32, "pixels-per-block": 8,
    }  # fmt: skip


def test_convert_keeps_szip_and_netcdf_c_reads_the_result(tmp_path):
    source = tmp_path / "szip.nc"
    written = _write_netcdf_szip(str(source))
    dest = tmp_path / "cube.zarr"
    convert(source, dest)
    nn8 = zarr.open_array(dest / "nn8", mode="r")
    assert nn8.metadata.compressor.get_config() == {
        "id": "szip", "mask": 32, "pixels-per-block": 8, "bits-per-pixel": 32,
        "pixels-per-scanline": 10,
    }  # fmt: skip
    with netCDF4.Dataset(f"file://{dest}#mode=zarr,file") as ds:
        for name, values in written.items():
            np.testing.assert_array_equal(zarr.open_array(dest / name, mode="r")[:], values)
            np.testing.assert_array_equal(ds[name][:].data, values)


# LZF -----------------------------------------------------------------------------------------


def test_lzf_chunks_decode_both_ways(tmp_path):
    codec = numcodecs.get_codec({"id": "lzf"})
    with h5py.File(tmp_path / "lzf.h5", "w") as file:
        dataset = file.create_dataset(
            "v", data=_noisy((40, 30), "f8"), chunks=(20, 30), compression="lzf"
        )
        for raw, values in _chunk_pairs(dataset):
            assert len(raw) < values.nbytes  # h5py really compressed it
            np.testing.assert_array_equal(np.frombuffer(codec.decode(raw), "f8"), values.ravel())
        # A very compressible chunk needs the output buffer grown several times.
        zeros = np.zeros((20, 30))
        out = file.create_dataset(
            "w", shape=(20, 30), dtype="f8", chunks=(20, 30), compression="lzf"
        )
        out.id.write_direct_chunk((0, 0), codec.encode(zeros + 1.5))
        np.testing.assert_array_equal(out[...], zeros + 1.5)
        assert np.frombuffer(codec.decode(codec.encode(zeros)), "f8").size == zeros.size


# bitshuffle ----------------------------------------------------------------------------------

BITSHUFFLE_CASES = [  # (dtype, hdf5plugin options, shape): counts that are not multiples of 8
    ("f4", {"cname": "lz4"}, (1001, 9)),
    ("i2", {"cname": "lz4", "nelems": 256}, (301, 7)),
    ("f8", {"cname": "zstd", "clevel": 5}, (130, 9)),
    ("u1", {"cname": "none"}, (99, 5)),
    ("i4", {"cname": "none", "nelems": 64}, (77, 3)),
]


@pytest.mark.parametrize(("dtype", "options", "shape"), BITSHUFFLE_CASES)
def test_bitshuffle_chunks_are_hdf5s_bytes(tmp_path, dtype, options, shape):
    with h5py.File(tmp_path / "bits.h5", "w") as file:
        dataset = file.create_dataset(
            "v", data=_noisy(shape, dtype), chunks=shape, **hdf5plugin.Bitshuffle(**options)
        )
        (stage,) = dataset_pipeline(dataset)
        config = {
            **hdf5_to_codec(stage.hdf5_id, stage.params),
            "elementsize": dataset.dtype.itemsize,
        }
        codec = numcodecs.get_codec(config)
        (raw, values), *_ = _chunk_pairs(dataset)
        np.testing.assert_array_equal(np.frombuffer(codec.decode(raw), dtype), values.ravel())
        assert codec.encode(values) == raw


def test_bitshuffle_needs_its_element_size():
    with pytest.raises(FilterError, match="without elementsize"):
        Bitshuffle(cname="lz4").encode(np.arange(10.0))
    with pytest.raises(FilterError, match="unknown cname 'snappy'"):
        Bitshuffle(cname="snappy")


# convert keeps each compression --------------------------------------------------------------


def test_convert_keeps_lzf_bitshuffle_and_szip_from_hdf5(tmp_path):
    source = tmp_path / "granule.h5"
    data = _noisy((24, 10), "f4")
    with h5py.File(source, "w") as file:
        file.create_dataset("lzf", data=data, chunks=(12, 5), compression="lzf")
        file.create_dataset(
            "bits", data=data, chunks=(12, 5), **hdf5plugin.Bitshuffle(cname="zstd", clevel=3)
        )
        file.create_dataset(
            "shuffled", data=data, chunks=(12, 5), shuffle=True, compression="szip",
            compression_opts=("ec", 4),
        )  # fmt: skip
    dest = tmp_path / "cube.zarr"
    plan = convert(source, dest)
    codecs = {array.path: array.codecs for array in plan.arrays}
    assert codecs == {
        "lzf": [{"id": "lzf"}],
        "bits": [
            {"id": "bitshuffle", "blocksize": 0, "cname": "zstd", "clevel": 3, "elementsize": 4}
        ],
        "shuffled": [
            {"id": "shuffle", "elementsize": 4},
            {"id": "szip", "mask": 4, "pixels-per-block": 4, "bits-per-pixel": 32,
             "pixels-per-scanline": 10},
        ],
    }  # fmt: skip
    for name in codecs:
        np.testing.assert_array_equal(zarr.open_array(dest / name, mode="r")[:], data)


# zfp -----------------------------------------------------------------------------------------


def test_zfp_keeps_a_fractional_tolerance_and_any_imagecodecs_reader_decodes(tmp_path):
    data = np.linspace(0, 1, 600, dtype="f4").reshape(30, 20) ** 2
    with h5py.File(tmp_path / "plain.h5", "w") as file:
        file.create_dataset("v", data=data, chunks=(10, 20))
    dest = tmp_path / "cube.zarr"
    zfp = hdf5_to_codec(32013, hdf5plugin.Zfp(accuracy=0.001).filter_options)
    convert(tmp_path / "plain.h5", dest, codecs={"v": zfp})
    array = zarr.open_array(dest / "v", mode="r")
    assert array.metadata.compressor.get_config()["level"] == 0.001
    assert np.abs(array[:] - data).max() <= 0.001
    assert not np.array_equal(array[:], data)  # lossy: the tolerance really applied
    # imagecodecs' own zfp codec (what other readers register) decodes the chunks.
    raw = (dest / "v" / "0.0").read_bytes()
    decoded = imagecodecs.numcodecs.Zfp().decode(raw)
    np.testing.assert_array_equal(decoded, array[:10])


def test_zfp_chunk_bytes_differ_from_h5z_zfp_as_declared(tmp_path):
    with h5py.File(tmp_path / "zfp.h5", "w") as file:
        dataset = file.create_dataset(
            "v", data=sample((16, 8), "f4"), chunks=(16, 8), **hdf5plugin.Zfp(reversible=True)
        )
        (raw, _), *_ = _chunk_pairs(dataset)
    codec = numcodecs.get_codec({"id": "imagecodecs_zfp", "mode": "REVERSIBLE"})
    with pytest.raises(imagecodecs.ZfpError):  # H5Z-ZFP keeps the header out of the chunk
        codec.decode(raw)


def test_zarr_v3_refuses_these_codecs_in_one_line(tmp_path):
    source = tmp_path / "lzf.h5"
    with h5py.File(source, "w") as file:
        file.create_dataset("v", data=sample(), chunks=(12, 5), compression="lzf")
    with pytest.raises(AccumulusError, match=r"variable 'v': codec 'lzf' has no Zarr v3 codec"):
        convert(source, tmp_path / "cube.zarr", zarr_format=3)
    assert not (tmp_path / "cube.zarr").exists()
