"""What checking a reference set's targets costs (``reference_targets``): per chunk read,
against fsspec's own resolution of the same reference (the baseline: what a read costs
before any byte of the target is fetched), and per reference when a JSON set is opened.

The sets are ``bench_virtual``'s: monthly NetCDF4 granules of a daily 1-degree grid (one
HDF5 chunk of about 8 MB per month), referenced as JSON and as Parquet from a work
directory, the granules' directory allowed. A chunk read resolves the reference's target
(links followed, its location checked, once per file named) and bounds its size; the floor
is fsspec's ``ReferenceFileSystem._cat_common`` on the same key. Also reported: one month's
area-averaged series through each set (a warm handle), which reads one such chunk.

    python benchmarks/bench_reference_checks.py [--granules 24] [--calls 20000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

import fsspec
from fsspec.implementations.reference import ReferenceFileSystem
from zarr.storage import WrapperStore

import accumulus
from accumulus.ingest.virtual import append_virtual
from accumulus.stores.opening import open_store
from accumulus.stores.reference_sets import open_reference_store
from bench_virtual import granules
from common import DEFAULT_DIR, median_seconds, report


def per_call(action, calls: int) -> float:
    """Microseconds per call, the median of five runs of ``calls`` calls."""

    def run() -> None:
        for _ in range(calls):
            action()

    seconds, _ = median_seconds(run, 5)
    return round(seconds / calls * 1e6, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--granules", type=int, default=24)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--data", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args()
    files = granules(args.data, args.granules)
    allowed = [str(files[0].parent)]
    work = Path(tempfile.mkdtemp(prefix="bench-reference-checks-"))
    question = ("lat", "lon"), {"time": ("2001-01-01", "2001-01-31")}
    sets = {}
    try:
        for suffix, key in ((".json", "precip/c/0/0/0"), (".parq", "precip/0.0.0")):
            path = work / f"virt{suffix}"
            append_virtual(path, files)
            store = open_store(str(path), allow_references=allowed)
            while isinstance(store, WrapperStore):
                store = store._store
            fs = store.fs
            fs._checked(key)  # the target resolved once, as every later read finds it
            handle = accumulus.open(str(path), allow_references=allowed)
            handle.average("precip", *question)  # warm-up: snapshot, kernels
            series, _ = median_seconds(lambda h=handle: h.average("precip", *question), 5)
            checked = per_call(lambda fs=fs, key=key: fs._checked(key), args.calls)
            floor = per_call(
                lambda fs=fs, key=key: ReferenceFileSystem._cat_common(fs, key), args.calls
            )
            sets[suffix.lstrip(".")] = {
                "checked_read_us": checked,
                "fsspec_resolution_us": floor,
                "check_over_fsspec_us": round(checked - floor, 2),
                "one_month_series_ms": round(series * 1000, 2),
                "check_share_of_series": round((checked - floor) / (series * 1e6), 6),
            }
        references = {f"v/{i}": [str(files[0]), 1000 * i, 1000] for i in range(100_000)}
        document = {"version": 1, "refs": {".zgroup": '{"zarr_format": 2}', **references}}
        opened, _ = median_seconds(
            lambda: open_reference_store(document, str(work / "synthetic.json"), None, allowed), 3
        )
        local = {None: fsspec.filesystem("file")}
        plain, _ = median_seconds(lambda: ReferenceFileSystem(document, fs=local), 3)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(
        {
            "benchmark": "checking reference targets",
            "granules": len(files),
            "load_average": os.getloadavg(),
            "per_chunk_read": sets,
            "open_json_100000_references": {
                "checked_seconds": round(opened, 3),
                "fsspec_seconds": round(plain, 3),
            },
        }
    )


if __name__ == "__main__":
    main()
