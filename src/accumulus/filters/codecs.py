"""numcodecs codecs whose chunk bytes are those of an HDF5 filter, built on imagecodecs.

NCZarr's filter design (seed 004) runs the HDF5 filter itself on Zarr chunks, so a Zarr codec
for an HDF5 filter must read and write exactly the bytes that filter does. imagecodecs wraps
the libraries (libaec, liblzf, bitshuffle, zfp); what it does not do is HDF5's framing, which
is the little done here:

- ``szip``: HDF5's szip filter is libaec's szlib interface with a 4-byte little-endian
  uncompressed size in front (imagecodecs' ``header=True``). Its codec JSON is netcdf-c's
  (``mask``, ``pixels-per-block``) plus the two parameters HDF5 and netcdf-c derive from the
  array (``bits-per-pixel``, ``pixels-per-scanline``), which a numcodecs codec cannot see.
- ``lzf``: h5py's LZF filter writes a bare LZF stream; decoding grows the output buffer until
  it fits, as that filter does.
- ``bitshuffle``: the bitshuffle HDF5 filter, with its 12-byte header (big-endian total size
  and block size) and, when compressed, each block as a big-endian length then LZ4 or Zstd.
- ``imagecodecs_zfp``: imagecodecs' own zfp codec, except that it keeps a fractional rate or
  tolerance (imagecodecs' numcodecs class rounds ``level`` to an integer).

The codecs are registered with numcodecs through the ``numcodecs.codecs`` entry points in
``pyproject.toml``, so zarr-python and xarray find them without importing accumulus.
"""

from __future__ import annotations

import struct

import imagecodecs
import imagecodecs.numcodecs
import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_bytes, ndarray_copy

from accumulus.filters.base import FilterError

# szlib option bits (libaec's szlib.h, HDF5's H5Zpublic.h).
SZIP_ALLOW_K13 = 1
SZIP_CHIP = 2
SZIP_EC = 4
SZIP_LSB = 8
SZIP_MSB = 16
SZIP_NN = 32
SZIP_RAW = 128
SZIP_MAX_PIXELS_PER_SCANLINE = 4096
SZIP_MAX_BLOCKS_PER_SCANLINE = 128


def szip_local_parameters(
    pixels_per_block: int, itemsize: int, shape: tuple[int, ...], chunks: tuple[int, ...]
) -> tuple[int, int]:
    """(bits per pixel, pixels per scanline) as netcdf-c computes them for an NCZarr array
    (``NCZ_szip_modify_parameters``). Unlike HDF5, which starts from the chunk's last
    dimension, netcdf-c starts from the array's: the chunks of netcdf-c's own stores decode
    only with this rule (checked on stores netcdf-c 4.10 wrote)."""
    bits = itemsize * 8
    if bits > 24:
        bits = 32 if bits <= 32 else 64
    if not shape:
        raise FilterError("codec 'szip' needs an array with at least one dimension")
    scanline = shape[-1]
    points = int(np.prod(chunks))
    if scanline < pixels_per_block:
        if points < pixels_per_block:
            raise FilterError(
                f"codec 'szip': pixels-per-block {pixels_per_block} is more than the "
                f"{points} values of a chunk"
            )
        scanline = min(pixels_per_block * SZIP_MAX_BLOCKS_PER_SCANLINE, points)
    elif scanline <= SZIP_MAX_PIXELS_PER_SCANLINE:
        scanline = min(pixels_per_block * SZIP_MAX_BLOCKS_PER_SCANLINE, scanline)
    else:
        scanline = pixels_per_block * SZIP_MAX_BLOCKS_PER_SCANLINE
    return bits, scanline


def szip_options(mask: int) -> int:
    """The szlib options HDF5 applies for a user's mask (``H5Pset_szip`` then set_local):
    no chip mode, K13 allowed, raw (no szip header), and the byte order (little-endian
    unless the mask asks for MSB)."""
    options = (mask & ~SZIP_CHIP) | SZIP_ALLOW_K13 | SZIP_RAW
    if not options & SZIP_MSB:
        options |= SZIP_LSB
    return options


class Szip(Codec):
    """HDF5's szip filter (id 4) as netcdf-c names it in codec JSON."""

    codec_id = "szip"

    def __init__(
        self,
        mask: int = SZIP_NN,
        pixels_per_block: int = 32,
        bits_per_pixel: int = 0,
        pixels_per_scanline: int = 0,
    ) -> None:
        self.mask = int(mask)
        self.pixels_per_block = int(pixels_per_block)
        self.bits_per_pixel = int(bits_per_pixel)
        self.pixels_per_scanline = int(pixels_per_scanline)

    @classmethod
    def from_config(cls, config: dict) -> Szip:
        return cls(**{key.replace("-", "_"): value for key, value in config.items()})

    def get_config(self) -> dict:
        config = {"id": self.codec_id, "mask": self.mask, "pixels-per-block": self.pixels_per_block}
        if self.bits_per_pixel:
            config["bits-per-pixel"] = self.bits_per_pixel
        if self.pixels_per_scanline:
            config["pixels-per-scanline"] = self.pixels_per_scanline
        return config

    def _parameters(self) -> dict:
        if not (self.bits_per_pixel and self.pixels_per_scanline):
            raise FilterError(
                "codec 'szip' without bits-per-pixel and pixels-per-scanline: netcdf-c leaves "
                "them to the array; open the store with accumulus, which fills them in"
            )
        return {
            "options_mask": szip_options(self.mask),
            "pixels_per_block": self.pixels_per_block,
            "bits_per_pixel": self.bits_per_pixel,
            "pixels_per_scanline": self.pixels_per_scanline,
            "header": True,
        }

    def encode(self, buf):
        return imagecodecs.szip_encode(ensure_bytes(buf), **self._parameters())

    def decode(self, buf, out=None):
        decoded = imagecodecs.szip_decode(ensure_bytes(buf), **self._parameters())
        return ndarray_copy(decoded, out) if out is not None else decoded


class LZF(Codec):
    """h5py's LZF filter (id 32000): a bare LZF stream, no header."""

    codec_id = "lzf"

    def encode(self, buf):
        return imagecodecs.lzf_encode(ensure_bytes(buf))

    def decode(self, buf, out=None):
        data = ensure_bytes(buf)
        if out is not None:
            return ndarray_copy(imagecodecs.lzf_decode(data, out=len(ensure_bytes(out))), out)
        # The stream does not say how long the output is: grow the buffer until it fits
        # (LZF expands at most ~90x, so a few doublings suffice).
        size = 4 * len(data) + 64
        while True:
            try:
                return imagecodecs.lzf_decode(data, out=size)
            except imagecodecs.LzfError:
                if size > 128 * len(data) + 64:
                    raise
                size *= 2


# bitshuffle's compressor codes (bshuf_h5filter.h) and block rules (bitshuffle_core.c).
BITSHUFFLE_COMPRESSORS = {"none": 0, "lz4": 2, "zstd": 3}
_BITSHUFFLE_TARGET_BLOCK_BYTES = 8192
_BITSHUFFLE_MIN_BLOCK = 128
_BITSHUFFLE_BLOCK_MULTIPLE = 8


def bitshuffle_block_size(elementsize: int, blocksize: int = 0) -> int:
    """Elements per block: the given size, or bitshuffle's default for 0."""
    if blocksize:
        return blocksize
    size = _BITSHUFFLE_TARGET_BLOCK_BYTES // elementsize
    size = size // _BITSHUFFLE_BLOCK_MULTIPLE * _BITSHUFFLE_BLOCK_MULTIPLE
    return max(size, _BITSHUFFLE_MIN_BLOCK)


class Bitshuffle(Codec):
    """The bitshuffle HDF5 filter (id 32008): bit transposition within blocks, then
    optionally LZ4 or Zstd per block, framed as bshuf_h5filter frames it."""

    codec_id = "bitshuffle"

    def __init__(
        self, blocksize: int = 0, cname: str = "none", clevel: int | None = None, elementsize=0
    ) -> None:
        if cname not in BITSHUFFLE_COMPRESSORS:
            raise FilterError(
                f"codec 'bitshuffle': unknown cname {cname!r}; "
                f"expected one of {sorted(BITSHUFFLE_COMPRESSORS)}"
            )
        self.blocksize = int(blocksize)
        self.cname = cname
        self.clevel = clevel
        self.elementsize = int(elementsize)

    def get_config(self) -> dict:
        config = {"id": self.codec_id, "blocksize": self.blocksize, "cname": self.cname}
        if self.clevel is not None:
            config["clevel"] = self.clevel
        if self.elementsize:
            config["elementsize"] = self.elementsize
        return config

    def _itemsize(self) -> int:
        if not self.elementsize:
            raise FilterError(
                "codec 'bitshuffle' without elementsize: the array's item size must be given"
            )
        return self.elementsize

    def encode(self, buf):
        data = ensure_bytes(buf)
        itemsize = self._itemsize()
        block = bitshuffle_block_size(itemsize, self.blocksize)
        if self.cname == "none":
            return _shuffle_bits(data, itemsize, block)
        parts = [struct.pack(">QI", len(data), block * itemsize)]
        end = _whole_blocks_end(len(data) // itemsize, block) * itemsize
        for start in range(0, end, block * itemsize):
            piece = data[start : min(start + block * itemsize, end)]
            packed = self._compress(_shuffle_bits(piece, itemsize, len(piece) // itemsize))
            parts.append(struct.pack(">I", len(packed)) + packed)
        parts.append(data[end:])  # the last count % 8 elements are stored as they are
        return b"".join(parts)

    def decode(self, buf, out=None):
        data = ensure_bytes(buf)
        itemsize = self._itemsize()
        if self.cname == "none":
            block = bitshuffle_block_size(itemsize, self.blocksize)
            decoded = _unshuffle_bits(data, itemsize, block)
        else:
            total, block_bytes = struct.unpack_from(">QI", data)
            block = block_bytes // itemsize
            end = _whole_blocks_end(total // itemsize, block) * itemsize
            pieces, position = [], 12
            for start in range(0, end, block_bytes):
                size = min(block_bytes, end - start)
                (length,) = struct.unpack_from(">I", data, position)
                packed = data[position + 4 : position + 4 + length]
                shuffled = self._decompress(packed, size)
                pieces.append(_unshuffle_bits(shuffled, itemsize, size // itemsize))
                position += 4 + length
            pieces.append(data[position : position + total - end])
            decoded = b"".join(pieces)
        return ndarray_copy(decoded, out) if out is not None else decoded

    def _compress(self, data: bytes) -> bytes:
        if self.cname == "lz4":
            return bytes(imagecodecs.lz4_encode(data))
        return bytes(imagecodecs.zstd_encode(data, level=self.clevel))

    def _decompress(self, data: bytes, size: int) -> bytes:
        if self.cname == "lz4":
            return bytes(imagecodecs.lz4_decode(data, out=size))
        return bytes(imagecodecs.zstd_decode(data, out=size))


def _whole_blocks_end(count: int, block: int) -> int:
    """Elements covered by whole blocks plus a last partial block cut to a multiple of 8:
    bitshuffle leaves the remaining ``count % 8`` elements untouched."""
    return count // block * block + (count % block) // 8 * 8


def _shuffle_bits(data: bytes, itemsize: int, block: int) -> bytes:
    return bytes(imagecodecs.bitshuffle_encode(data, itemsize=itemsize, blocksize=block))


def _unshuffle_bits(data: bytes, itemsize: int, block: int) -> bytes:
    return bytes(imagecodecs.bitshuffle_decode(data, itemsize=itemsize, blocksize=block))


class ImagecodecsZfp(imagecodecs.numcodecs.Zfp):
    """imagecodecs' zfp codec keeping a fractional ``level`` (a rate or tolerance); chunks
    carry zfp's full header, so any ``imagecodecs_zfp`` reader decodes them."""

    def __init__(self, *, level: float | None = None, **options) -> None:
        super().__init__(**options)
        self.level = level  # type: ignore[assignment]  # imagecodecs declares an int level
