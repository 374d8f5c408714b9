"""Codec configurations for the stored accumulation entries, measured on a built cube's own
entries: decode and encode CPU per chunk and stored bytes, each candidate against the
configuration each array is stored with (``stored``: what the build chose,
``placement.codecs``), which must reproduce the stored bytes byte for byte.

Every positioned array of ``CUBE/<var>_accumulation_group/accumulus_positions`` (float64
sums and integer counts; map-like arrays of one entry per chunk, series-like ones long in
time) is read chunk by chunk and decoded. Each candidate is a Blosc (c-blosc 1.x, through
numcodecs, as every zarr v2 reader of these groups decodes it) followed by the Fletcher-32
checksum, as the build stores them, with the elements Blosc is handed (their size is
Blosc's ``typesize``, written in each frame's header, so a reader needs nothing else):

- ``encode_us``: thread CPU of the elements viewed as the candidate says, Blosc, Fletcher-32
  (``encoded_chunks.encode_chunk``'s work);
- ``decode_us``: thread CPU of Fletcher-32's check and Blosc into a buffer of the chunk's size
  (a whole chunk, as a map's entries are read; a series reads a block or two of each chunk,
  which costs about its share of this), and of Blosc alone (``blosc_decode_us``; a chunk read again
  passed its checksum already: ``chunk_reader``);
- ``bytes``: the stored bytes of every chunk of the array (``--bytes-every`` k: of every
  k-th chunk), against the stored files'; ``group_bytes_vs_raw``: the whole group with
  every array stored so, against the raw array's stored bytes.

Blosc runs single-threaded (``numcodecs.blosc.use_threads = False``: how it runs on the
threads a query reads on). Timing: ``--sample`` chunks of each array, every candidate in
turn (in a shuffled order each round), ``--repeats`` rounds, the median of each chunk's
repeats, then the mean over the sample. Each candidate's decoded bytes are compared with the
chunk's: every one must be bit-identical.

    python benchmarks/bench_entry_codecs.py CUBE [--variable tas] [--sample 16]
        [--repeats 7] [--bytes-every 1] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numcodecs.blosc
import numpy as np
import zarr
from numcodecs import Blosc, Fletcher32
from zarr.core.metadata import ArrayV2Metadata

from accumulus.accumulation.build import placement

SHUFFLES = {"none": Blosc.NOSHUFFLE, "byte": Blosc.SHUFFLE, "bit": Blosc.BITSHUFFLE}


@dataclass(frozen=True)
class Candidate:
    """A Blosc configuration: compressor, level, shuffle, block bytes (0: c-blosc chooses)
    and the elements it is handed (``typesize`` bytes; 0: the array's own, except a series
    array's 32-byte elements where the build hands those: ``placement.blosc_elements``).
    No compressor: the array's own configuration (``STORED``)."""

    cname: str = ""
    clevel: int = 0
    shuffle: str = ""
    blocksize: int = -1  # -1: as the build chooses for this array
    typesize: int = 0

    def name(self) -> str:
        if not self.cname:
            return "stored"
        block = "build" if self.blocksize < 0 else str(self.blocksize // 1024) + "K"
        size = "" if not self.typesize else f"/t{self.typesize}"
        return f"{self.cname}{self.clevel}/{self.shuffle}/{block}{size}"


STORED = Candidate()
CANDIDATES = [
    STORED,  # must reproduce the stored bytes
    Candidate("lz4", 1, "bit"),
    Candidate("lz4", 1, "byte"),
    Candidate("lz4", 1, "none"),
    Candidate("zstd", 1, "bit"),
    Candidate("zstd", 1, "byte"),
    Candidate("lz4hc", 1, "bit"),
    Candidate("lz4hc", 5, "bit"),
    Candidate("lz4hc", 1, "byte"),
    Candidate("lz4hc", 3, "byte"),
    Candidate("lz4hc", 5, "byte"),
    Candidate("lz4", 9, "byte"),
    Candidate("blosclz", 5, "bit"),
    Candidate("blosclz", 5, "byte"),
    Candidate("lz4", 5, "bit"),
    Candidate("lz4", 9, "bit"),
    Candidate("lz4", 1, "bit", 8 * 1024),
    Candidate("lz4", 1, "bit", 32 * 1024),
    Candidate("lz4", 1, "bit", 64 * 1024),
    Candidate("lz4", 1, "bit", 256 * 1024),
    Candidate("lz4", 1, "bit", 0),
    Candidate("lz4", 1, "bit", -1, 8),
    Candidate("lz4", 1, "bit", -1, 32),
    Candidate("lz4", 1, "byte", 8 * 1024),
    Candidate("lz4", 1, "byte", 64 * 1024),
    Candidate("lz4", 1, "byte", -1, 8),
    Candidate("lz4hc", 1, "byte", -1, 8),
]


@dataclass
class Entries:
    """One array's chunks as stored and as decoded (C order)."""

    name: str
    dtype: np.dtype
    series: bool
    blosc: Blosc  # as stored
    stored: list[bytes]
    values: list[np.ndarray]


def codec(candidate: Candidate, entries: Entries) -> Blosc:
    if candidate == STORED:
        return entries.blosc
    blocksize = entries.blosc.blocksize if candidate.blocksize < 0 else candidate.blocksize
    return Blosc(candidate.cname, candidate.clevel, SHUFFLES[candidate.shuffle], blocksize)


def elements(candidate: Candidate, blosc: Blosc, chunk: np.ndarray) -> np.ndarray:
    """What Blosc is handed: the build's elements, or elements of ``candidate.typesize``."""
    if not candidate.typesize:
        return placement.blosc_elements(blosc, chunk)
    return chunk.reshape(-1).view(np.dtype(f"V{candidate.typesize}"))


def encode(candidate: Candidate, blosc: Blosc, chunk: np.ndarray) -> bytes:
    return bytes(Fletcher32().encode(blosc.encode(elements(candidate, blosc, chunk))))


def decode(blosc: Blosc, stored: bytes, out: np.ndarray, check: bool) -> None:
    body = Fletcher32().decode(stored) if check else memoryview(stored)[:-4]
    blosc.decode(body, out=out)


def read_entries(cube: Path, variable: str, every: int) -> list[Entries]:
    """Every positioned array's chunks (every ``every``-th of them, in key order)."""
    group = cube / f"{variable}_accumulation_group" / "accumulus_positions"
    found = []
    for path in sorted(p for p in group.iterdir() if (p / ".zarray").exists()):
        array = zarr.open_array(path, mode="r")
        metadata = array.metadata
        if not isinstance(metadata, ArrayV2Metadata) or not metadata.filters:
            continue
        blosc = metadata.filters[0]
        dtype = metadata.dtype.to_native_dtype()
        keys = sorted(p.name for p in path.iterdir() if not p.name.startswith("."))[::every]
        stored, values = [], []
        for key in keys:
            data = (path / key).read_bytes()
            stored.append(data)
            raw = np.empty(int(np.prod(metadata.chunks)) * dtype.itemsize, dtype="u1")
            decode(blosc, data, raw, check=True)
            values.append(raw.view(dtype).reshape(metadata.chunks))
        series = metadata.chunks[0] > 1
        found.append(Entries(path.name, dtype, series, blosc, stored, values))
    return found


def cpu_us(work: Callable[[], object]) -> float:
    start = time.thread_time_ns()
    work()
    return (time.thread_time_ns() - start) / 1e3


def measure(entries: Entries, candidates: list[Candidate], sample: int, repeats: int) -> dict:
    picked = random.Random(0).sample(range(len(entries.values)), min(sample, len(entries.values)))
    codecs = {c: codec(c, entries) for c in candidates}
    reference = candidates[0]
    totals = {c: 0 for c in candidates}
    encoded: dict[Candidate, dict[int, bytes]] = {c: {} for c in candidates}
    for i, values in enumerate(entries.values):
        for c in candidates:
            data = encode(c, codecs[c], values)
            totals[c] += len(data)
            if i in picked:
                encoded[c][i] = data
            if c == STORED and data != entries.stored[i]:
                raise SystemExit(f"{entries.name}: its own configuration gives other bytes")
    nbytes = entries.values[0].nbytes
    out = np.empty(nbytes, dtype="u1")
    times: dict[tuple[Candidate, int, str], list[float]] = {}
    order = list(candidates)
    for _ in range(repeats):
        random.shuffle(order)
        for i in picked:
            chunk = entries.values[i]
            for c in order:
                blosc, stored = codecs[c], encoded[c][i]
                times.setdefault((c, i, "encode"), []).append(
                    cpu_us(lambda b=blosc, c=c, v=chunk: encode(c, b, v))
                )
                times.setdefault((c, i, "decode"), []).append(
                    cpu_us(lambda b=blosc, s=stored: decode(b, s, out, True))
                )
                times.setdefault((c, i, "blosc"), []).append(
                    cpu_us(lambda b=blosc, s=stored: decode(b, s, out, False))
                )
                if not np.array_equal(out, chunk.reshape(-1).view("u1")):
                    raise SystemExit(f"{entries.name}: {c.name()} does not decode to its values")

    def mean_us(c: Candidate, what: str) -> float:
        return round(statistics.fmean(statistics.median(times[(c, i, what)]) for i in picked), 1)

    stored_bytes = sum(len(s) for s in entries.stored)
    rows = {}
    for c in candidates:
        total = totals[c]
        rows[c.name()] = {
            "encode_us": mean_us(c, "encode"),
            "decode_us": mean_us(c, "decode"),
            "blosc_decode_us": mean_us(c, "blosc"),
            "bytes": total,
            "bytes_vs_stored": round(total / stored_bytes, 4),
            "bytes_vs_values": round(total / (nbytes * len(entries.values)), 4),
        }
    for c in candidates:
        row = rows[c.name()]
        row["decode_vs_stored"] = round(row["decode_us"] / rows[reference.name()]["decode_us"], 3)
        row["encode_vs_stored"] = round(row["encode_us"] / rows[reference.name()]["encode_us"], 3)
    return {
        "array": entries.name,
        "dtype": str(entries.dtype),
        "chunk_shape": list(entries.values[0].shape),
        "chunks": len(entries.values),
        "series": entries.series,
        "sampled": len(picked),
        "candidates": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cube", type=Path)
    parser.add_argument("--variable", default="tas")
    parser.add_argument("--sample", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--bytes-every", type=int, default=1)
    parser.add_argument("--only", default="", help="candidate names, comma-separated")
    args = parser.parse_args()
    numcodecs.blosc.use_threads = False
    wanted = set(filter(None, args.only.split(",")))
    candidates = [CANDIDATES[0]] + [c for c in CANDIDATES[1:] if not wanted or c.name() in wanted]
    arrays = []
    for entries in read_entries(args.cube, args.variable, args.bytes_every):
        arrays.append(measure(entries, candidates, args.sample, args.repeats))
        del entries
    raw = sum(f.stat().st_size for f in (args.cube / args.variable).iterdir())
    totals = {
        c.name(): sum(a["candidates"][c.name()]["bytes"] for a in arrays) * args.bytes_every
        for c in candidates
    }
    print(
        json.dumps(
            {
                "cube": str(args.cube),
                "numcodecs": numcodecs.__version__,
                "blosc": numcodecs.blosc.VERSION_STRING,
                "raw_array_bytes": raw,
                "group_bytes_vs_raw": {n: round(t / raw, 3) for n, t in totals.items()},
                "arrays": arrays,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
