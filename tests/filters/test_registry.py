"""The HDF5 id + parameters ↔ codec JSON mapping, both ways, and its errors."""

from __future__ import annotations

import subprocess
import sys

import h5py
import hdf5plugin
import numcodecs
import pytest

from accumulus.filters import (
    FilterError,
    codec_to_hdf5,
    dataset_pipeline,
    default_registry,
    hdf5_to_codec,
    pairing_table,
)


def test_issue_examples():
    assert hdf5_to_codec(32015, [5]) == {"id": "zstd", "level": 5}
    assert codec_to_hdf5({"id": "zstd", "level": 5}) == (32015, (5,))


# User-form parameter vectors (what h5py/hdf5plugin pass to H5Pset_filter) and their JSON.
USER_FORMS = [
    (1, (6,), {"id": "zlib", "level": 6}),
    (2, (), {"id": "shuffle", "elementsize": 0}),
    (2, (8,), {"id": "shuffle", "elementsize": 8}),
    (3, (), {"id": "fletcher32"}),
    (4, (32, 16), {"id": "szip", "mask": 32, "pixels-per-block": 16}),
    (307, tuple(hdf5plugin.BZip2(blocksize=7).filter_options), {"id": "bz2", "level": 7}),
    (32000, (), {"id": "lzf"}),
    (
        32001,
        tuple(hdf5plugin.Blosc(cname="zstd", clevel=3, shuffle=2).filter_options),
        {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 0},
    ),
    (
        32001,
        (0, 0, 0, 65536, 9, 0, 4),
        {"id": "blosc", "cname": "zlib", "clevel": 9, "shuffle": 0, "blocksize": 65536},
    ),
    (32004, tuple(hdf5plugin.LZ4().filter_options), {"id": "lz4", "acceleration": 1}),
    (
        32008,
        tuple(hdf5plugin.Bitshuffle(cname="lz4").filter_options),
        {"id": "bitshuffle", "blocksize": 0, "cname": "lz4"},
    ),
    (
        32008,
        tuple(hdf5plugin.Bitshuffle(nelems=1024, cname="zstd", clevel=4).filter_options),
        {"id": "bitshuffle", "blocksize": 1024, "cname": "zstd", "clevel": 4},
    ),
    (
        32013,
        tuple(hdf5plugin.Zfp(rate=8.5).filter_options),
        {"id": "imagecodecs_zfp", "mode": "FIXED_RATE", "level": 8.5},
    ),
    (
        32013,
        tuple(hdf5plugin.Zfp(precision=10).filter_options),
        {"id": "imagecodecs_zfp", "mode": "FIXED_PRECISION", "level": 10},
    ),
    (
        32013,
        tuple(hdf5plugin.Zfp(accuracy=0.001).filter_options),
        {"id": "imagecodecs_zfp", "mode": "FIXED_ACCURACY", "level": 0.001},
    ),
    (
        32013,
        tuple(hdf5plugin.Zfp(reversible=True).filter_options),
        {"id": "imagecodecs_zfp", "mode": "REVERSIBLE"},
    ),
    (32015, tuple(hdf5plugin.Zstd(clevel=9).filter_options), {"id": "zstd", "level": 9}),
]


@pytest.mark.parametrize(("hdf5_id", "params", "config"), USER_FORMS)
def test_user_form_round_trips(hdf5_id, params, config):
    assert hdf5_to_codec(hdf5_id, params) == config
    assert codec_to_hdf5(config) == (hdf5_id, params)


def test_numcodecs_get_config_is_read_too():
    # What numcodecs' own get_config() writes maps to the same HDF5 filter.
    for codec in (
        numcodecs.Zstd(level=4),
        numcodecs.Zlib(level=2),
        numcodecs.BZ2(level=3),
        numcodecs.Blosc(cname="lz4hc", clevel=7, shuffle=numcodecs.Blosc.BITSHUFFLE),
        numcodecs.Shuffle(elementsize=4),
        numcodecs.Fletcher32(),
        numcodecs.LZ4(),
    ):
        hdf5_id, params = codec_to_hdf5(codec.get_config())
        back = numcodecs.get_codec(hdf5_to_codec(hdf5_id, params))
        assert back == codec


def test_stored_forms_from_real_files(hdf5_file):
    """The parameter vectors HDF5 stores after set_local map to the same JSON."""
    expected = {
        "deflate": [{"id": "zlib", "level": 6}],
        "shuffle_deflate_fletcher32": [
            {"id": "shuffle", "elementsize": 4},
            {"id": "zlib", "level": 4},
            {"id": "fletcher32"},
        ],
        "bzip2": [{"id": "bz2", "level": 9}],
        "blosc": [{"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 0}],
        "zstd": [{"id": "zstd", "level": 5}],
        "lz4": [{"id": "lz4", "acceleration": 1}],
        "bitshuffle": [{"id": "bitshuffle", "blocksize": 0, "cname": "lz4"}],
        "lzf": [{"id": "lzf"}],
    }
    with h5py.File(hdf5_file) as file:
        for name, configs in expected.items():
            pipeline = dataset_pipeline(file[name])
            assert [hdf5_to_codec(s.hdf5_id, s.params) for s in pipeline] == configs, name


def test_zfp_stored_header_is_refused(tmp_path):
    with h5py.File(tmp_path / "zfp.h5", "w") as file:
        file.create_dataset("z", data=[[1.0, 2.0]], chunks=(1, 2), **hdf5plugin.Zfp(rate=8))
        (stage,) = dataset_pipeline(file["z"])
    with pytest.raises(FilterError, match=r"32013 \(zfp\).*stored zfp header.*--codec"):
        hdf5_to_codec(stage.hdf5_id, stage.params)


@pytest.mark.parametrize(
    ("hdf5_id", "params", "message"),
    [
        (47011, (), r"unknown HDF5 filter id 47011"),
        (32017, (), r"32017 \(sz, from hdf5plugin\) has no Zarr codec mapping"),
        (32015, (), r"32015 \(zstd\): expected 1 parameters, got 0"),
        (32015, (1, 2), r"expected 1 parameters, got 2"),
        (1, (12,), r"'zlib': level must be in \[0, 9\], got 12"),
        (32001, (0, 0, 0, 0, 5, 1, 9), r"unknown compressor code 9"),
        (32001, (1, 2), r"expected 4 or 5 or 6 or 7 parameters, got 2"),
        (2, (-1,), r"unsigned 32-bit"),
    ],
)
def test_bad_hdf5_input(hdf5_id, params, message):
    with pytest.raises(FilterError, match=message):
        hdf5_to_codec(hdf5_id, params)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"level": 5}, r"has no string 'id'"),
        ("zstd", r"must be a JSON object"),
        ({"id": "zstd", "level": 5, "speed": 1}, r"'zstd': unknown key\(s\) \['speed'\]"),
        ({"id": "fletcher32", "x": 1}, r"expected only no parameters"),
        ({"id": "zstd", "checksum": True}, r"checksum true has no HDF5"),
        ({"id": "blosc", "cname": "snappy2"}, r"unknown cname 'snappy2'"),
        ({"id": "blosc", "shuffle": -1}, r"AUTOSHUFFLE"),
        ({"id": "lzma"}, r"codec 'lzma' has no HDF5 filter mapping"),
        ({"id": "zlib", "level": "high"}, r"level must be an integer"),
        ({"id": "imagecodecs_zfp", "mode": "FIXED_ACCURACY"}, r"needs a positive"),
        ({"id": "imagecodecs_zfp", "mode": "REVERSIBLE", "header": False}, r"header false"),
        ({"id": "szip", "pixels-per-block": 7}, r"pixels-per-block must be even"),
        ({"id": "bitshuffle", "cname": "lz4", "clevel": 3}, r"clevel applies only to"),
    ],
)
def test_bad_codec_json(config, message):
    with pytest.raises(FilterError, match=message):
        codec_to_hdf5(config)


def test_pairing_table_here():
    rows = {row.hdf5_id: row for row in pairing_table()}
    usable = {hdf5_id for hdf5_id, row in rows.items() if row.usable}
    # numcodecs, imagecodecs and hdf5plugin implement these; the rest lack one side here.
    assert usable == {1, 2, 3, 4, 307, 32000, 32001, 32004, 32008, 32013, 32015}
    assert rows[32004].same_bytes is False and rows[32013].same_bytes is False
    assert rows[4].same_bytes and rows[32000].same_bytes and rows[32008].same_bytes
    assert rows[32000].hdf5_provider == "h5py" and rows[32000].codec_id == "lzf"
    assert rows[32013].codec_id == "imagecodecs_zfp"
    assert rows[32026].codec_id is None and "no codec mapping" in rows[32026].reason
    assert rows[32015].to_dict()["usable"] is True
    # Every hdf5plugin filter has an HDF5 side, and every HDF5 side here is available.
    for hdf5_id in hdf5plugin.FILTERS.values():
        assert rows[hdf5_id].hdf5_provider == "hdf5plugin"
        assert rows[hdf5_id].hdf5_problem is None


def test_registry_is_discovered_once():
    assert default_registry() is default_registry()


def test_hdf5plugin_filters_win_over_netcdf4_plugin_copies(tmp_path):
    """Importing netCDF4 first exposes its own filter plugins to h5py's HDF5 (through
    HDF5_PLUGIN_PATH); its blosc fails there. load_hdf5plugin puts hdf5plugin's back."""
    script = f"""
import netCDF4, h5py, hdf5plugin, numpy as np
def blosc_works():
    with h5py.File({str(tmp_path / "b.h5")!r}, "w") as f:
        try:
            f.create_dataset("v", data=np.arange(64.0), chunks=(32,), **hdf5plugin.Blosc())
            return True
        except ValueError:
            return False
before = blosc_works()
from accumulus.filters.builtin import load_hdf5plugin
load_hdf5plugin()
print(before, blosc_works())
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.split() == ["False", "True"]
