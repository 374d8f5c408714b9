"""What a granule declares, checked before anything of it is read.

A granule's header may declare any sizes: a 13 KB file can declare a coordinate of 10^9
values, which xarray reads whole into memory the moment the file is opened (7.45 GiB each).
Before a granule is opened with xarray its declared shapes, types and chunks are read from
its metadata (netCDF4, h5py or zarr, none of which reads values to tell them) and refused
in one line when appending it would hold more than ``READ_LIMIT`` bytes at once for one
variable:

- a dimension coordinate, which xarray reads whole on opening (to index it);
- a variable without the append dimension, read whole (static values are compared with the
  cube's), and all of them together;
- one step of a variable along the append dimension (``conform`` reads blocks of steps);
- one stored chunk, which its codec decodes whole whatever part of it is read.

The limit is far above real granules (the largest ones known, global 0.01° grids such as
MUR SST, hold 1.3 GB per step as stored) and far below what a hostile header can declare.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from accumulus.errors import AccumulusError

READ_LIMIT = 2 * 2**30


@dataclass(frozen=True)
class DeclaredVariable:
    """A variable as its granule's metadata declares it."""

    name: str
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    itemsize: int
    chunks: tuple[int, ...] | None  # stored chunk shape (None: contiguous)

    def nbytes(self, shape: Iterable[int] | None = None) -> int:
        return math.prod(self.shape if shape is None else shape) * self.itemsize


def check_declared(where: str, variables: Iterable[DeclaredVariable], dim: str | None) -> None:
    """Refuse a granule whose declared sizes would make appending along ``dim`` (None:
    unknown yet) hold more than ``READ_LIMIT`` bytes at once for one variable."""
    static = 0
    for var in variables:
        if var.dims == (var.name,):
            _check(where, var, var.nbytes(), f"coordinate {var.name!r}", "read whole to index it")
        if dim is not None and dim in var.dims:
            step = [n for d, n in zip(var.dims, var.shape, strict=True) if d != dim]
            _check(where, var, var.nbytes(step), f"one {dim} step of {var.name!r}", "read at once")
        elif dim is not None:
            static += var.nbytes()
            _check(where, var, var.nbytes(), f"variable {var.name!r}", "read whole")
        check_chunk(where, var)
    if static > READ_LIMIT:
        raise AccumulusError(
            f"{where}: its variables without {dim!r} declare {_size(static)}, read whole: more "
            f"than one read may hold ({_size(READ_LIMIT)}); refused before reading them"
        )


def check_chunk(where: str, var: DeclaredVariable) -> None:
    """Refuse a variable whose stored chunks are larger than ``READ_LIMIT`` bytes: any read
    of one decodes it whole (``convert`` copies chunk by chunk, ``append`` block by block)."""
    if var.chunks is not None:
        _check(where, var, var.nbytes(var.chunks), f"a chunk of {var.name!r}", "decoded whole")


def _check(where: str, var: DeclaredVariable, nbytes: int, what: str, how: str) -> None:
    if nbytes > READ_LIMIT:
        shape = " x ".join(f"{n:,}" for n in var.shape)
        raise AccumulusError(
            f"{where}: {what} declares {_size(nbytes)} ({var.name} is {shape}), {how}: more "
            f"than one read may hold ({_size(READ_LIMIT)}); refused before reading it"
        )


def itemsize(dtype: object) -> int:
    """Bytes per value of a declared type (variable-length strings: one pointer)."""
    try:
        return max(np.dtype(dtype).itemsize, 1)  # type: ignore[call-overload]
    except TypeError:
        return 8


def _size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if nbytes < 1024 or unit == "EiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.2f} {unit}"
        nbytes /= 1024  # type: ignore[assignment]
    return f"{nbytes} B"
