"""The filters accumulus knows without plugins.

HDF5 sides: HDF5's own filters, h5py's LZF and every filter hdf5plugin ships. Codec sides:
the mappings of the issue's list, with codec ids and JSON keys as numcodecs names them and,
where netcdf-c writes something else, as netcdf-c writes it (see each class).
"""

from __future__ import annotations

import functools
import importlib
import struct
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from accumulus.filters.base import ArrayLayout, CodecConfig, CodecSide, FilterError, HDF5Side
from accumulus.filters.codecs import (
    BITSHUFFLE_COMPRESSORS,
    SZIP_ALLOW_K13,
    SZIP_LSB,
    SZIP_MSB,
    SZIP_RAW,
    szip_local_parameters,
)


@functools.cache
def load_hdf5plugin() -> None:
    """Register hdf5plugin's filters with h5py's HDF5, replacing any HDF5 found first on
    HDF5_PLUGIN_PATH. Importing netCDF4 points that variable at netCDF4's own filter plugins,
    built against netCDF4's private copy of HDF5; through h5py some of them fail (blosc's
    set_local callback does), and hdf5plugin's import alone does not replace them."""
    import hdf5plugin

    hdf5plugin.register(force=True)


class LibraryFilter(HDF5Side):
    """An HDF5 filter provided by importing a Python package (h5py itself, hdf5plugin...)."""

    def __init__(self, hdf5_id: int, name: str, provider: str, module: str) -> None:
        self.hdf5_id = hdf5_id
        self.name = name
        self.provider = provider
        self.module = module

    def load(self) -> None:
        if self.module == "hdf5plugin":
            load_hdf5plugin()
        else:
            importlib.import_module(self.module)


def builtin_hdf5_sides() -> list[HDF5Side]:
    sides: list[HDF5Side] = [
        LibraryFilter(1, "deflate", "HDF5", "h5py"),
        LibraryFilter(2, "shuffle", "HDF5", "h5py"),
        LibraryFilter(3, "fletcher32", "HDF5", "h5py"),
        LibraryFilter(4, "szip", "HDF5", "h5py"),
        LibraryFilter(5, "nbit", "HDF5", "h5py"),
        LibraryFilter(6, "scaleoffset", "HDF5", "h5py"),
        LibraryFilter(32000, "lzf", "h5py", "h5py"),
    ]
    try:
        import hdf5plugin
    except ImportError:  # hdf5plugin is a dependency; without it its filters are just absent
        return sides
    for name, hdf5_id in sorted(hdf5plugin.FILTERS.items(), key=lambda item: item[1]):
        name = {"bshuf": "bitshuffle"}.get(name, name)  # the filter's own name
        sides.append(LibraryFilter(hdf5_id, name, "hdf5plugin", "hdf5plugin"))
    return sides


# --------------------------------------------------------------------------------------------
# Codec sides


class Deflate(CodecSide):
    """HDF5 deflate (1) is a zlib stream: numcodecs ``zlib``. netcdf-c writes the same JSON."""

    hdf5_id = 1
    codec_id = "zlib"
    example_params = (1,)

    def to_codec(self, params: Sequence[int]) -> CodecConfig:
        (level,) = self.check_params(params, [1])
        return {"id": "zlib", "level": self.check_int("level", level, 0, 9)}

    def to_hdf5(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        values = self.check_config(config, {"level": 1})
        return (self.check_int("level", values["level"], 0, 9),)


class Shuffle(CodecSide):
    """HDF5 byte shuffle (2). Its element size is a "local" parameter HDF5 fills in from the
    datatype; netcdf-c writes ``"elementsize": 0`` for "not given". numcodecs' Shuffle reads
    0 as "do not shuffle", so stores we write carry the real item size (``for_array``), and
    ``accumulus.stores.nczarr_compat`` repairs the 0 when reading netcdf-c's stores."""

    hdf5_id = 2
    codec_id = "shuffle"

    def to_codec(self, params: Sequence[int]) -> CodecConfig:
        values = self.check_params(params, [0, 1])
        return {"id": "shuffle", "elementsize": values[0] if values else 0}

    def to_hdf5(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        values = self.check_config(config, {"elementsize": 0})
        size = self.check_int("elementsize", values["elementsize"], 0, 2**31)
        return (size,) if size else ()

    def for_array(self, config: CodecConfig, layout: ArrayLayout) -> CodecConfig:
        return _with_elementsize(config, layout)

    def availability(self) -> str | None:
        # Probe with a real element size: elementsize 0 builds fine but would not shuffle.
        import numcodecs

        try:
            numcodecs.get_codec({"id": "shuffle", "elementsize": 4})
        except Exception as exc:  # numcodecs' (ImportError, ValueError): a reason, not a crash
            return f"no 'shuffle' codec in numcodecs here ({exc})"
        return None


def _with_elementsize(config: CodecConfig, layout: ArrayLayout) -> CodecConfig:
    """``elementsize`` 0 or absent means "the variable's item size" (as netcdf-c writes it)."""
    if config.get("elementsize", 0) == 0:
        return {**config, "elementsize": np.dtype(layout.dtype).itemsize}
    return config


class Fletcher32(CodecSide):
    """HDF5 Fletcher-32 checksum (3): numcodecs ``fletcher32`` appends the same 4 bytes."""

    hdf5_id = 3
    codec_id = "fletcher32"

    def to_codec(self, params: Sequence[int]) -> CodecConfig:
        self.check_params(params, [0])
        return {"id": "fletcher32"}

    def to_hdf5(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        self.check_config(config, {})
        return ()


class Szip(CodecSide):
    """HDF5 szip (4), codec ``accumulus.filters.codecs.Szip`` (libaec through imagecodecs).
    The JSON is netcdf-c's: ``mask`` (the coding, 4 entropy or 32 nearest neighbour) and
    ``pixels-per-block``. The bits per pixel and pixels per scanline that HDF5 and netcdf-c
    derive from the array are resolved by ``for_array`` with netcdf-c's rule, so netcdf-c
    reads the chunks we write. A file's stored vector carries HDF5's own scanline (from the
    chunk's last dimension, not the array's); it is not kept, since converted data is
    re-encoded for netcdf-c's rule."""

    hdf5_id = 4
    codec_id = "szip"
    codec_hint = "imagecodecs provides it (accumulus registers it)"
    example_params = (32, 32)
    local_keys = ("bits-per-pixel", "pixels-per-scanline")

    def to_codec(self, params: Sequence[int]) -> CodecConfig:
        # User form: (mask, pixels per block); stored form adds bits per pixel and pixels
        # per scanline, and HDF5 sets the K13, raw and byte-order bits of the mask.
        values = self.check_params(params, [2, 4])
        coding = values[0] & ~(SZIP_ALLOW_K13 | SZIP_RAW | SZIP_LSB | SZIP_MSB)
        return {"id": "szip", "mask": coding, "pixels-per-block": values[1]}

    def to_hdf5(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        defaults = {"mask": 32, "pixels-per-block": 32, **dict.fromkeys(self.local_keys, 0)}
        values = self.check_config(config, defaults)
        pixels = self.check_int("pixels-per-block", values["pixels-per-block"], 2, 32)
        if pixels % 2:
            raise FilterError(f"codec 'szip': pixels-per-block must be even, got {pixels}")
        return (self.check_int("mask", values["mask"], 0, 2**32 - 1), pixels)

    def for_array(self, config: CodecConfig, layout: ArrayLayout) -> CodecConfig:
        if all(config.get(key) for key in self.local_keys) or layout.shape is None:
            return config
        dtype = np.dtype(layout.dtype)
        bits, scanline = szip_local_parameters(
            int(config.get("pixels-per-block", 32)),
            dtype.itemsize,
            tuple(layout.shape),
            tuple(layout.chunks or layout.shape),
        )
        resolved = {**config, "bits-per-pixel": bits, "pixels-per-scanline": scanline}
        if dtype.byteorder == ">" and dtype.itemsize > 1:
            resolved["mask"] = int(config.get("mask", 32)) | SZIP_MSB
        return resolved


class Bzip2(CodecSide):
    """bzip2 (307) is a plain bzip2 stream: numcodecs ``bz2``. netcdf-c writes the same."""

    hdf5_id = 307
    codec_id = "bz2"
    example_params = (9,)

    def to_codec(self, params: Sequence[int]) -> CodecConfig:
        (level,) = self.check_params(params, [1])
        return {"id": "bz2", "level": self.check_int("level", level, 1, 9)}

    def to_hdf5(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        values = self.check_config(config, {"level": 1})
        return (self.check_int("level", values["level"], 1, 9),)


class LZF(CodecSide):
    """h5py's LZF (32000), codec ``accumulus.filters.codecs.LZF`` (liblzf through
    imagecodecs): a bare LZF stream, as the HDF5 filter writes it."""

    hdf5_id = 32000
    codec_id = "lzf"
    codec_hint = "imagecodecs provides it (accumulus registers it)"

    def to_codec(self, params: Sequence[int]) -> CodecConfig:
        # Stored form: (filter version, LZF version, chunk bytes), all derived locally.
        self.check_params(params, [0, 3])
        return {"id": "lzf"}

    def to_hdf5(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        self.check_config(config, {})
        return ()


# Blosc compressor codes, as blosc.h numbers them.
BLOSC_CNAMES = {"blosclz": 0, "lz4": 1, "lz4hc": 2, "snappy": 3, "zlib": 4, "zstd": 5}


class Blosc(CodecSide):
    """Blosc (32001), parameters as hdf5-blosc and netcdf-c lay them out:
    ``[0] filter revision, [1] blosc format, [2] type size, [3] chunk bytes, [4] clevel,
    [5] shuffle, [6] compressor code``. [0..3] are "local": set_local fills them in.

    netcdf-c reads the user-form [3] as numcodecs' ``blocksize`` (its JSON has all four
    numcodecs keys, cname/clevel/shuffle/blocksize), so ``to_hdf5`` puts blocksize there and
    ``to_codec`` reads it back. In the stored form (any of [0..2] set) [3] is the chunk size
    in bytes, not a block size: hdf5-blosc always lets blosc choose, which is blocksize 0.
    """

    hdf5_id = 32001
    codec_id = "blosc"
    example_params = (0, 0, 0, 0, 5, 1, 1)

    def to_codec(self, params: Sequence[int]) -> CodecConfig:
        values = self.check_params(params, [4, 5, 6, 7])
        # hdf5-blosc's defaults for parameters a short vector leaves out.
        values = values + (5, 1, 0)[len(values) - 4 :]
        stored = any(values[:3])
        code_to_name = {code: name for name, code in BLOSC_CNAMES.items()}
        if values[6] not in code_to_name:
            raise FilterError(
                f"HDF5 filter 32001 (blosc): unknown compressor code {values[6]}; "
                f"expected one of {sorted(code_to_name)}"
            )
        return {
            "id": "blosc",
            "cname": code_to_name[values[6]],
            "clevel": self.check_int("clevel", values[4], 0, 9),
            "shuffle": self.check_int("shuffle", values[5], 0, 2),
            "blocksize": 0 if stored else values[3],
        }

    def to_hdf5(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        # Defaults are numcodecs' Blosc defaults, so the JSON means what numcodecs reads.
        values = self.check_config(
            config, {"cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}
        )
        if values["cname"] not in BLOSC_CNAMES:
            raise FilterError(
                f"codec 'blosc': unknown cname {values['cname']!r}; "
                f"expected one of {sorted(BLOSC_CNAMES)}"
            )
        if values["shuffle"] == -1:
            raise FilterError(
                "codec 'blosc': shuffle -1 (AUTOSHUFFLE) has no HDF5 equivalent; use 0, 1 or 2"
            )
        return (
            0,
            0,
            0,
            self.check_int("blocksize", values["blocksize"], 0, 2**32 - 1),
            self.check_int("clevel", values["clevel"], 0, 9),
            self.check_int("shuffle", values["shuffle"], 0, 2),
            BLOSC_CNAMES[values["cname"]],
        )


class LZ4(CodecSide):
    """LZ4 (32004). The HDF5 filter frames chunks its own way (total size, block size, then
    blocks with big-endian lengths) and numcodecs' LZ4 does not, so chunk bytes differ: the
    data converts, but netcdf-c cannot read numcodecs' lz4 chunks. The HDF5 block size has
    no codec counterpart and is dropped; numcodecs' acceleration has no HDF5 counterpart."""

    hdf5_id = 32004
    codec_id = "lz4"
    same_bytes = False

    def to_codec(self, params: Sequence[int]) -> CodecConfig:
        self.check_params(params, [0, 1])
        return {"id": "lz4", "acceleration": 1}

    def to_hdf5(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        values = self.check_config(config, {"acceleration": 1})
        if values["acceleration"] != 1:
            raise FilterError(
                f"codec 'lz4': acceleration {values['acceleration']} has no HDF5 lz4 "
                "parameter; only 1 maps"
            )
        return (0,)


class Bitshuffle(CodecSide):
    """Bitshuffle (32008), user form ``(block size, compressor[, zstd level])``; the stored
    form prepends (major, minor, element size). Codec ``accumulus.filters.codecs.Bitshuffle``
    writes the HDF5 filter's framing; its ``elementsize`` (the item size, which the filter
    takes from the datatype) is resolved by ``for_array``."""

    hdf5_id = 32008
    codec_id = "bitshuffle"
    codec_hint = "imagecodecs provides it (accumulus registers it)"
    example_params = (0, 2)

    def to_codec(self, params: Sequence[int]) -> CodecConfig:
        values = self.check_params(params, [0, 1, 2, 3, 4, 5, 6])
        user = values[3:] if len(values) >= 4 else values
        blocksize, compression, level = (*user, 0, 0, 0)[:3]
        names = {code: name for name, code in BITSHUFFLE_COMPRESSORS.items()}
        if compression not in names:
            raise FilterError(
                f"HDF5 filter 32008 (bitshuffle): unknown compressor {compression}; "
                f"expected one of {sorted(names)}"
            )
        config: CodecConfig = {"id": "bitshuffle", "blocksize": blocksize}
        config["cname"] = names[compression]
        if names[compression] == "zstd":
            config["clevel"] = level
        return config

    def to_hdf5(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        values = self.check_config(
            config, {"blocksize": 0, "cname": "none", "clevel": None, "elementsize": 0}
        )
        if values["cname"] not in BITSHUFFLE_COMPRESSORS:
            raise FilterError(
                f"codec 'bitshuffle': unknown cname {values['cname']!r}; "
                f"expected one of {sorted(BITSHUFFLE_COMPRESSORS)}"
            )
        head = (
            self.check_int("blocksize", values["blocksize"], 0, 2**32 - 1),
            BITSHUFFLE_COMPRESSORS[values["cname"]],
        )
        if values["cname"] == "zstd":
            return (*head, self.check_int("clevel", values["clevel"] or 0, 0, 22))
        if values["clevel"] is not None:
            raise FilterError("codec 'bitshuffle': clevel applies only to cname 'zstd'")
        return head

    def for_array(self, config: CodecConfig, layout: ArrayLayout) -> CodecConfig:
        return _with_elementsize(config, layout)


# H5Z-ZFP's generic parameter modes, and the zfp modes imagecodecs names them by.
_H5Z_ZFP_RATE, _H5Z_ZFP_PRECISION, _H5Z_ZFP_ACCURACY, _H5Z_ZFP_EXPERT, _H5Z_ZFP_REVERSIBLE = (
    1,
    2,
    3,
    4,
    5,
)
_ZFP_MODE_NAMES = {
    _H5Z_ZFP_RATE: "FIXED_RATE",
    _H5Z_ZFP_PRECISION: "FIXED_PRECISION",
    _H5Z_ZFP_ACCURACY: "FIXED_ACCURACY",
    _H5Z_ZFP_REVERSIBLE: "REVERSIBLE",
}
_ZFP_MODE_ALIASES = {
    "RATE": "FIXED_RATE",
    "PRECISION": "FIXED_PRECISION",
    "ACCURACY": "FIXED_ACCURACY",
}


def _double_to_words(value: float) -> tuple[int, int]:
    return struct.unpack("<2I", struct.pack("<d", value))


def _words_to_double(low: int, high: int) -> float:
    return struct.unpack("<d", struct.pack("<2I", low, high))[0]


class Zfp(CodecSide):
    """ZFP (32013) in H5Z-ZFP's generic form ``(mode, 0, ...)`` ↔ imagecodecs' zfp codec
    ``{"id": "imagecodecs_zfp", "mode": "FIXED_ACCURACY", "level": 0.001}``.

    H5Z-ZFP keeps zfp's stream header in the filter parameters and writes bare streams;
    imagecodecs writes the header into every chunk, so chunk bytes differ. For the same
    reason a file's stored vector (the header) cannot be mapped back; that is an error
    naming the remedy (give --codec). Expert mode has no codec counterpart here."""

    hdf5_id = 32013
    codec_id = "imagecodecs_zfp"
    codec_hint = "imagecodecs provides it (accumulus registers it)"
    same_bytes = False
    example_params = (_H5Z_ZFP_REVERSIBLE,)
    # Keys imagecodecs' get_config() writes besides mode and level, with its defaults.
    _OTHER_KEYS: ClassVar[dict[str, Any]] = {
        "shape": None,
        "dtype": None,
        "strides": None,
        "execution": None,
        "numthreads": None,
        "chunksize": None,
        "header": True,
    }

    def to_codec(self, params: Sequence[int]) -> CodecConfig:
        values = self.check_params(params, range(1, 7))
        mode, _, low, high = (*values, 0, 0, 0, 0, 0)[:4]
        if mode in (_H5Z_ZFP_RATE, _H5Z_ZFP_ACCURACY):
            level: float | int | None = _words_to_double(low, high)
        elif mode == _H5Z_ZFP_PRECISION:
            level = low
        elif mode == _H5Z_ZFP_REVERSIBLE:
            level = None
        elif mode == _H5Z_ZFP_EXPERT:
            raise FilterError("HDF5 filter 32013 (zfp): expert mode has no imagecodecs_zfp form")
        else:
            raise FilterError(
                f"HDF5 filter 32013 (zfp): parameters {list(values)} are H5Z-ZFP's stored "
                "zfp header, which cannot be mapped; give the codec with --codec"
            )
        config: CodecConfig = {"id": self.codec_id, "mode": _ZFP_MODE_NAMES[mode]}
        if level is not None:
            config["level"] = level
        return config

    def to_hdf5(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        values = self.check_config(config, {"mode": None, "level": None, **self._OTHER_KEYS})
        if not values["header"]:
            raise FilterError("codec 'imagecodecs_zfp': header false has no H5Z-ZFP form")
        mode = _ZFP_MODE_ALIASES.get(values["mode"], values["mode"])
        level = values["level"]
        if mode == "REVERSIBLE":
            return (_H5Z_ZFP_REVERSIBLE, 0, 0, 0, 0, 0)
        if mode == "FIXED_PRECISION" and isinstance(level, int) and level > 0:
            return (_H5Z_ZFP_PRECISION, 0, level, 0, 0, 0)
        if mode in ("FIXED_RATE", "FIXED_ACCURACY") and level is not None and level > 0:
            code = _H5Z_ZFP_RATE if mode == "FIXED_RATE" else _H5Z_ZFP_ACCURACY
            return (code, 0, *_double_to_words(float(level)), 0, 0)
        raise FilterError(
            f"codec 'imagecodecs_zfp': mode {values['mode']!r} needs a positive level (a rate, "
            "an integer precision or a tolerance), or mode REVERSIBLE; "
            f"got {dict(config)}"
        )


class Zstd(CodecSide):
    """Zstandard (32015): one parameter, the level. We write ``{"id": "zstd", "level": N}``,
    as netcdf-c does; numcodecs' ``get_config()`` adds ``"checksum": false``, and both
    are read. A checksum has no HDF5 zstd parameter, so ``checksum: true`` does not map."""

    hdf5_id = 32015
    codec_id = "zstd"
    example_params = (3,)

    def to_codec(self, params: Sequence[int]) -> CodecConfig:
        (level,) = self.check_params(params, [1])
        return {"id": "zstd", "level": self.check_int("level", level, 0, 22)}

    def to_hdf5(self, config: Mapping[str, Any]) -> tuple[int, ...]:
        values = self.check_config(config, {"level": 0, "checksum": False})
        if values["checksum"]:
            raise FilterError("codec 'zstd': checksum true has no HDF5 zstd parameter")
        return (self.check_int("level", values["level"], 0, 22),)


def builtin_codec_sides() -> list[CodecSide]:
    return [
        Deflate(),
        Shuffle(),
        Fletcher32(),
        Szip(),
        Bzip2(),
        LZF(),
        Blosc(),
        LZ4(),
        Bitshuffle(),
        Zfp(),
        Zstd(),
    ]
