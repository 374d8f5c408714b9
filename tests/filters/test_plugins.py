"""Plugins through the ``accumulus.filters`` entry-point group, with a plugin package built
here: a dist-info with entry_points.txt on a temporary sys.path entry, no pip install.

The package provides what the seed's scenario describes: a codec-only library paired with
an HDF5 filter it does not ship. Its codec side for h5py's LZF (32000), a small pure-Python
LZF codec (enough to decode h5py's chunks and to write chunks h5py decodes), replaces the
built-in one (imagecodecs'), as a plugin's side does; the package also has an HDF5-only side
for an id HDF5 does not know, and an entry point that fails to load."""

from __future__ import annotations

import sys
import textwrap

import h5py
import numcodecs
import numpy as np
import pytest
import zarr

from accumulus.filters import codec_to_hdf5, default_registry, hdf5_to_codec, refresh_registry
from accumulus.ingest.convert import convert

from .samples import CHUNKS, sample

PLUGIN_MODULE = '''
"""A tiny accumulus filter plugin: an LZF codec side, and an HDF5 side for filter 47000."""

import numcodecs
from numcodecs.abc import Codec
from numcodecs.compat import ensure_bytes, ndarray_copy

from accumulus.filters import CodecSide, HDF5Side


def lzf_decompress(data):
    out = bytearray()
    i = 0
    while i < len(data):
        control = data[i]
        i += 1
        if control < 32:  # a literal run of control + 1 bytes
            out += data[i : i + control + 1]
            i += control + 1
            continue
        length = control >> 5
        if length == 7:
            length += data[i]
            i += 1
        start = len(out) - ((control & 0x1F) << 8) - data[i] - 1
        i += 1
        for k in range(length + 2):  # a back reference, possibly overlapping itself
            out.append(out[start + k])
    return bytes(out)


def lzf_literals(data):
    """Valid LZF made of literal runs only: no compression, but any LZF decoder reads it."""
    out = bytearray()
    for start in range(0, len(data), 32):
        run = data[start : start + 32]
        out.append(len(run) - 1)
        out += run
    return bytes(out)


class LZF(Codec):
    codec_id = "lzf"

    def encode(self, buf):
        return lzf_literals(ensure_bytes(buf))

    def decode(self, buf, out=None):
        return ndarray_copy(lzf_decompress(ensure_bytes(buf)), out)


numcodecs.register_codec(LZF)


class LZFCodecSide(CodecSide):
    hdf5_id = 32000
    codec_id = "lzf"
    same_bytes = True

    def to_codec(self, params):
        self.check_params(params, [0, 3])
        return {"id": "lzf"}

    def to_hdf5(self, config):
        self.check_config(config, {})
        return ()


class Filter47000(HDF5Side):
    hdf5_id = 47000
    name = "example"

    def load(self):
        pass  # a real plugin would import the package that registers its HDF5 filter
'''

ENTRY_POINTS = """
[accumulus.filters]
lzf = acc_lzf_plugin:LZFCodecSide
example = acc_lzf_plugin:Filter47000
broken = acc_missing_module:Nothing
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    root = tmp_path / "site"
    dist_info = root / "acc_lzf_plugin-1.0.dist-info"
    dist_info.mkdir(parents=True)
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: acc-lzf-plugin\nVersion: 1.0\n"
    )
    (dist_info / "entry_points.txt").write_text(textwrap.dedent(ENTRY_POINTS))
    (root / "acc_lzf_plugin.py").write_text(PLUGIN_MODULE)
    monkeypatch.syspath_prepend(str(root))
    registry = refresh_registry()
    yield registry
    # Leave the process as it was: no plugin module, no lzf codec, registry rediscovered.
    sys.modules.pop("acc_lzf_plugin", None)
    numcodecs.registry.codec_registry.pop("lzf", None)
    default_registry.cache_clear()


def test_without_the_plugin_lzf_uses_the_built_in_codec_side():
    row = default_registry().pair(32000)
    assert row.usable and row.codec_provider == "accumulus" and row.hdf5_provider == "h5py"


def test_plugin_side_replaces_the_built_in_one(plugin):
    row = plugin.pair(32000)
    assert row.usable and row.codec_provider == "acc-lzf-plugin" and row.hdf5_provider == "h5py"
    assert hdf5_to_codec(32000, (4, 261, 2400)) == {"id": "lzf"}
    assert codec_to_hdf5({"id": "lzf"}) == (32000, ())


def test_hdf5_only_side_without_codec_is_not_usable(plugin):
    row = plugin.pair(47000)
    assert row.hdf5_provider == "acc-lzf-plugin" and row.codec_provider is None
    assert row.hdf5_problem == "HDF5 filter 47000 is not registered with HDF5 here"
    assert not row.usable and "no codec mapping" in row.reason


def test_broken_plugin_is_reported_and_others_still_load(plugin):
    assert len(plugin.problems) == 1
    assert "plugin 'broken' (acc_missing_module:Nothing)" in plugin.problems[0]
    assert "acc_missing_module" in plugin.problems[0]


def test_plugin_codec_reads_and_writes_real_hdf5_chunks(plugin, tmp_path):
    data = sample(CHUNKS, "i4")
    with h5py.File(tmp_path / "lzf.h5", "w") as file:
        dataset = file.create_dataset("v", data=data, chunks=CHUNKS, compression="lzf")
        mask, raw = dataset.id.read_direct_chunk((0, 0))
        assert mask == 0 and len(raw) < data.nbytes  # h5py really compressed it
        codec = numcodecs.get_codec(hdf5_to_codec(32000, ()))
        np.testing.assert_array_equal(np.frombuffer(codec.decode(raw), "i4").reshape(CHUNKS), data)
        # And the other way: HDF5's LZF filter decodes the plugin's bytes.
        out = file.create_dataset("w", shape=CHUNKS, dtype="i4", chunks=CHUNKS, compression="lzf")
        out.id.write_direct_chunk((0, 0), codec.encode(data * 2))
        np.testing.assert_array_equal(out[...], data * 2)


def test_convert_uses_the_plugin_codec(plugin, tmp_path):
    with h5py.File(tmp_path / "lzf.h5", "w") as file:
        file.create_dataset("v", data=sample((24, 10), "i4"), chunks=CHUNKS, compression="lzf")
    convert(tmp_path / "lzf.h5", tmp_path / "cube.zarr")
    array = zarr.open_array(tmp_path / "cube.zarr" / "v", mode="r")
    assert array.metadata.compressor.get_config() == {"id": "lzf"}
    np.testing.assert_array_equal(array[:], sample((24, 10), "i4"))
