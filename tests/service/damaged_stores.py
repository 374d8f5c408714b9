"""Stores with something wrong in them, built for the tests: a served store must never make
the service answer 500 or show a server path, whatever it contains."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
from service_cubes import CHUNKS, dataset, write_cube


def with_text_and_dates(path: Path) -> Path:
    """A cube whose dataset also holds a string variable and a datetime variable."""
    ds = dataset("2001-01-01", 40, 12, 16)
    ds["station"] = (("lat", "lon"), np.full((12, 16), "abc"))
    ds["observed"] = (("time",), pd.date_range("1999-01-01", periods=40, freq="D"))
    return write_cube(path, ds, CHUNKS, zarr_format=2)


def raw_chunks(cube: Path, variable: str = "tas") -> list[Path]:
    return sorted(p for p in (cube / variable).iterdir() if not p.name.startswith("."))


def break_metadata(cube: Path) -> None:
    """Consolidated metadata that is not JSON (a writer died mid-write, a disk filled up)."""
    (cube / ".zmetadata").write_text('{"metadata": {".zgroup": ')


def scribble(chunk: Path, seed: int = 0, at: int = 0) -> None:
    """64 random bytes written over a chunk from byte ``at`` (at 0: over the codec's header,
    so that decoding fails; elsewhere a codec without a checksum may decode garbage)."""
    data = bytearray(chunk.read_bytes())
    data[at : at + 64] = np.random.default_rng(seed).bytes(64)
    chunk.write_bytes(bytes(data))


def fifo(chunk: Path) -> None:
    chunk.unlink()
    os.mkfifo(chunk)


def symlink_loop(chunk: Path) -> None:
    chunk.unlink()
    chunk.symlink_to(chunk)


def directory(chunk: Path) -> None:
    chunk.unlink()
    chunk.mkdir()


def damaged_cube(path: Path, damage: str) -> Path:
    """A small v2 cube with one kind of ``damage`` done to it."""
    cube = write_cube(path, dataset("2001-01-01", 40, 12, 16), CHUNKS, zarr_format=2)
    first = raw_chunks(cube)[0]
    {
        "metadata": lambda: break_metadata(cube),
        "scribble": lambda: scribble(first),
        "fifo": lambda: fifo(first),
        "symlink": lambda: symlink_loop(first),
        "directory": lambda: directory(first),
    }[damage]()
    return cube
