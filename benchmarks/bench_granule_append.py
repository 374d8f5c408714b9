"""Appending one more granule to an IMERG-like cube, on a small and on a large grid.

Granules in the IMERG V07 half-hourly layout (``tests/granules/layouts.py``: ``/Grid`` and
``/Grid/Intermediate``, ten variables, uncompressed): the 10 x 10 cut of the gpm_api test
granules (small), and a global grid (large, 0.25 degree by default). A cube is created from
the first ``--granules`` of them with the default chunk choice, then granules are appended
one per call, as a daily loop does. For each such append, measured on the store (a
``CountingStore``) and on the process (a fresh process per append, its peak resident memory
beside that of a process that only opened the same modules):

- bytes written and write requests, and the growth of the store on disk;
- peak memory: the process's resident memory sampled every 5 ms during the append, above
  what it held just before (modules loaded, store opened);
- wall time (median over the appends).

Besides the default chunks, the large grid is also appended with the per-granule rule
(``--chunking per-granule``: each granule its own chunk, Zarr v3), the user's rule that
trades the rewrite of the partial chunk for more, smaller chunks.

The baseline is what a user would otherwise run: ``xarray.Dataset.to_zarr(append_dim=
"time")`` of the granule's ``Grid`` group into a store made the same way, with xarray's
chunks (one granule a chunk). The floor of an append is the encoded size of the granule's
values (what it must write at the least): the baseline's bytes come close to it.

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

from common import report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from granules.layouts import ImergGrid, imerg_series

START = dt.datetime(2000, 6, 1)


class _PeakMemory:
    """The resident memory of this process sampled every 5 ms in a thread (Linux)."""

    def __init__(self) -> None:
        self.start = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> _PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss())


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def _append_in_child(store: str, granule: str, how: str, queue) -> None:
    """One append in this (fresh) process: counts, seconds and peak memory."""
    warnings.simplefilter("ignore")
    import xarray as xr

    import accumulus
    from accumulus.stores.counting import CountingStore
    from accumulus.stores.opening import open_store

    counting = CountingStore(open_store(store, "r+"))
    started = time.perf_counter()
    with _PeakMemory() as memory:
        if how.startswith("accumulus"):
            accumulus.append(counting, granule)
        else:
            with xr.open_dataset(granule, group="Grid") as ds:
                ds = ds.drop_encoding()
                ds.to_zarr(counting, mode="a", append_dim="time", consolidated=True)
    seconds = time.perf_counter() - started
    counts = counting.counts
    queue.put(
        {
            "seconds": seconds,
            "bytes_written": counts.write_bytes,
            "write_requests": counts.write_requests,
            "peak_memory_mib": (memory.peak - memory.start) / 2**20,
        }
    )


def one_append(store: Path, granule: Path, how: str) -> dict:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    before = store_bytes(store)
    child = context.Process(target=_append_in_child, args=(str(store), str(granule), how, queue))
    child.start()
    result = queue.get(timeout=3600)
    child.join()
    result["store_growth_bytes"] = store_bytes(store) - before
    return result


def store_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def create(store: Path, granules: list[Path], how: str) -> dict:
    import xarray as xr

    import accumulus

    started = time.perf_counter()
    if how.startswith("accumulus"):
        rule = "per-granule" if how == "accumulus_per_granule" else None
        result = accumulus.append(str(store), granules, chunking=rule)
        chunks = result.chunking.reason.split(" (")[0]
    else:
        for k, granule in enumerate(granules):
            with xr.open_dataset(granule, group="Grid") as ds:
                ds = ds.drop_encoding()
                if k == 0:
                    ds.to_zarr(store, mode="w", zarr_format=2, consolidated=True)
                else:
                    ds.to_zarr(store, mode="a", append_dim="time", consolidated=True)
        chunks = "one granule a chunk (xarray's default)"
    return {
        "granules": len(granules),
        "seconds": time.perf_counter() - started,
        "store_bytes": store_bytes(store),
        "chunks": chunks,
    }


def case(
    folder: Path, grid: ImergGrid, count: int, appends: int, label: str, ways: tuple[str, ...]
) -> dict:
    granules = imerg_series(folder / "granules", START, count + appends, grid=grid)
    granule_bytes = statistics.median(g.stat().st_size for g in granules)
    out: dict = {
        "grid": f"{len(grid.lon)} x {len(grid.lat)} ({label})",
        "granule_file_bytes": granule_bytes,
    }
    for how in ways:
        store = folder / f"{how}.zarr"
        created = create(store, granules[:count], how)
        runs = [one_append(store, g, how) for g in granules[count:]]
        out[how] = {
            "created": created,
            "per_granule": {key: statistics.median(run[key] for run in runs) for key in runs[0]},
            "store_bytes_after": store_bytes(store),
        }
        shutil.rmtree(store)
    ours, theirs = out["accumulus"]["per_granule"], out["xarray_append_dim"]["per_granule"]
    out["ratios_accumulus_over_xarray"] = {
        key: ours[key] / theirs[key] if theirs[key] else None
        for key in ("bytes_written", "peak_memory_mib", "seconds")
    }
    # The least an append can write: its values, encoded (xarray writes just those).
    out["floor_bytes_written"] = theirs["bytes_written"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--granules", type=int, default=48, help="granules in the cube first")
    parser.add_argument("--appends", type=int, default=3, help="appends of one granule")
    parser.add_argument("--large", default="1440x720", help="the large grid, NLONxNLAT")
    parser.add_argument("--large-granules", type=int, default=4)
    args = parser.parse_args()
    nlon, nlat = map(int, args.large.split("x"))
    folder = Path(tempfile.mkdtemp(prefix="bench-granules-"))
    ways = ("accumulus", "xarray_append_dim")
    try:
        document = {
            "benchmark": "one more granule appended to an IMERG-like cube",
            "small": case(folder / "small", ImergGrid.regular(), args.granules, args.appends,
                          "the 10 x 10 cut", ways),
            "large": case(folder / "large", ImergGrid.regular(nlon, nlat),
                          args.large_granules, args.appends, "global",
                          (*ways, "accumulus_per_granule")),
        }  # fmt: skip
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report(document)


if __name__ == "__main__":
    main()
