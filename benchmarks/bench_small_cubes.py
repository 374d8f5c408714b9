"""Small cubes against their own files (issue 34 item 9): a warm accumulus query on a cube
appended in 4 granules, against xarray reading the original file.

Cases:

- ``six-hourly``: ECMWF MACC ``SMALL_total_column_co2.nc`` (31 steps of 161 x 320 packed
  int16, netCDF-3), by default the vendored subset (every other row and column); ``--co2``
  names the whole file (fetch SciTools/iris-test-data, ``test_data/NetCDF/global/xyt/``).
- ``yearly``: 51 years of 1-degree float32 maps written by ``xarray.Dataset.to_netcdf``.

Each file is cut into 4 granules and appended in one call with each layout: the default
(regular chunks of a month of steps within 10-100 MiB, Zarr v2), ``--chunking grow`` (chunks
that grow with the cube), the layout appends chose before (``--chunks time=N``: a year of
steps for the CO2 file, one step for yearly data) and candidate regular rules, measured but
not chosen by appends (a month without the 10 MiB floor; a chunk of what the first append
holds). Questions: a box series (cos-weighted mean over a latitude/longitude box at every
step) and a time-averaged map, first with no accumulations (every answer reads raw chunks),
then after ``accumulate`` (run in a process of its own, as the command line runs it).
Reported per layout, question and state: the median warm time (an ``accumulus.open`` handle
asked again), raw and accumulation chunks read, bytes read from the store, raw bytes decoded
(the declared size of every raw chunk read, or of the Blosc blocks read of a chunk past the
cube's end: ``partial_decode``) and held (the steps those chunks hold), against xarray with
the file held open (``open_dataset`` once, each question selects, weights and reduces),
timed in turns with accumulus so that load on a shared machine moves both alike, and the
ratios of wall and of CPU time; where a chunk past the cube's end was decoded in part, the
same question again with whole chunks decoded (``whole_chunks_*``, the before of that); where
a packed integer variable was read raw, the same question with its values decoded to float64
before summing (``float_sums_*``, the before of ``sums.reduce_packed``).
Every answer is checked against xarray's (rtol 1e-9).

    python benchmarks/bench_small_cubes.py [--repeats 15] [--co2 PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import product
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr
import zarr

import accumulus
from accumulus import partial_decode
from accumulus.accumulation.query import execute
from accumulus.grid import array_bounds, declared_chunk_sizes
from accumulus.ingest.cadence import steps_per_month
from accumulus.scope import accumulus_scope
from common import MIN_SECONDS, report

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from producers.test_small_cubes import granules  # noqa: E402 (after the path)

CO2 = HERE.parent / "tests" / "data" / "real" / "SMALL_total_column_co2_subset.nc"


def yearly_file(path: Path) -> Path:
    rng = np.random.default_rng(51)
    values = (rng.normal(288.0, 5.0, size=(51, 180, 360))).astype("f4")
    xr.Dataset(
        {"tas": (("time", "lat", "lon"), values, {"units": "K"})},
        coords={
            "time": pd.date_range("1950-07-01", periods=51, freq="YS-JUL"),
            "lat": ("lat", np.arange(-89.5, 90.0, 1.0), {"units": "degrees_north"}),
            "lon": ("lon", np.arange(0.5, 360.0, 1.0), {"units": "degrees_east"}),
        },
    ).to_netcdf(path, encoding={"time": {"units": "days since 1950-01-01"}})
    return path


def decoded_bytes(cube: Path, variable: str, result) -> tuple[int, int]:
    """The bytes the reader decodes for every raw chunk the query read (the chunks under the
    plan's raw reads, those from no accumulation array): a chunk's declared size, or, for a
    Blosc chunk past the cube's end read only as far as the cube holds, the bytes of the
    blocks decoded (``partial_decode``); and the bytes of the steps those chunks hold."""
    with accumulus_scope():
        array = zarr.open_array(cube / variable, mode="r")
        declared = [declared_chunk_sizes(array, axis) for axis in range(array.ndim)]
        bounds = array_bounds(array)[0]
        chunks = {
            i
            for read in result.plan.reads
            if not read.source
            for i in bounds.chunks_overlapping(*read.box["time"])
        }
        decoded = 0
        for i in chunks:
            for rest in product(*(range(len(sizes)) for sizes in declared[1:])):
                coords = (i, *rest)
                shape = tuple(declared[axis][c] for axis, c in enumerate(coords))
                stored = cube / variable / array.metadata.encode_chunk_key(coords)
                data = stored.read_bytes() if stored.exists() else None
                decoded += partial_decode.decoded_bytes(array, coords, shape, data)
        step = int(np.prod(array.shape[1:])) * array.dtype.itemsize
        held = sum(bounds.edges[i + 1] - bounds.edges[i] for i in chunks)
        return decoded, held * step


def whole_decoded(cube: Path, variable: str, result) -> int:
    """``decoded_bytes`` as the reader decoded before ``partial_decode``: whole chunks."""
    partial_decode.ENABLED = False
    try:
        return decoded_bytes(cube, variable, result)[0]
    finally:
        partial_decode.ENABLED = True


# Features a question is timed again without, in the same run (the before of each), by the
# prefix of their figures: the flag that switches each off.
SWITCHES = {
    # every chunk decoded whole (as before ``partial_decode``)
    "whole_chunks": (partial_decode, "ENABLED"),
    # packed integers decoded to float64 before summing (as before ``sums.reduce_packed``)
    "float_sums": (execute, "SUM_PACKED"),
}


def timed_without(prefix, handle, variable, over, ranges, theirs, repeats) -> dict:
    """The same question with the feature ``SWITCHES[prefix]`` switched off, timed in turns
    with xarray again: the before of that change, in the same run."""
    module, flag = SWITCHES[prefix]
    setattr(module, flag, False)
    try:
        ours, xarray, _ = interleaved_medians(
            lambda: handle.query(variable, over, ranges), theirs, repeats
        )
    finally:
        setattr(module, flag, True)
    return {
        f"{prefix}_accumulus_warm_ms": round(ours["wall"] * 1e3, 2),
        f"{prefix}_xarray_ms": round(xarray["wall"] * 1e3, 2),
        f"{prefix}_accumulus_over_xarray": round(ours["wall"] / xarray["wall"], 2),
        f"{prefix}_accumulus_over_xarray_cpu": round(ours["cpu"] / xarray["cpu"], 2),
    }


def build_elsewhere(cube: Path, variable: str) -> None:
    """``accumulate`` in a process of its own, as the command line runs it: a build fixes
    glibc's mmap threshold for the whole process it runs in (``accumulation/build/stream.py``),
    which made every later query here fault fresh pages (a CO2 map 1.8x the CPU time)."""
    build = f"import accumulus; accumulus.accumulate({str(cube)!r}, {variable!r})"
    subprocess.run([sys.executable, "-c", build], check=True)


def interleaved_medians(
    ours: Callable[[], object], theirs: Callable[[], object], repeats: int
) -> tuple[dict[str, float], dict[str, float], object]:
    """Median wall and CPU seconds (every thread of the process) of ``ours`` and ``theirs``
    run in turns (ours first in one round, theirs in the next), at least ``repeats`` times
    each and ``MIN_SECONDS`` together: on a machine shared with other work, load then moves
    both alike, where timing one after the other swung the ratio up to 2x; CPU time moves
    less with load than wall time. The last result of ``ours`` is returned."""
    walls: tuple[list[float], list[float]] = ([], [])
    cpus: tuple[list[float], list[float]] = ([], [])
    actions = (ours, theirs)
    result = None
    rounds = 0
    while min(map(len, walls)) < repeats or min(map(sum, walls)) < MIN_SECONDS:
        for which in (0, 1) if rounds % 2 == 0 else (1, 0):
            started, cpu = time.perf_counter(), time.process_time()
            answer = actions[which]()
            walls[which].append(time.perf_counter() - started)
            cpus[which].append(time.process_time() - cpu)
            if which == 0:
                result = answer
        rounds += 1
    medians = [
        {"wall": statistics.median(w), "cpu": statistics.median(c)}
        for w, c in zip(walls, cpus, strict=True)
    ]
    return medians[0], medians[1], result


def xarray_answers(source: Path, variable: str, box: dict[str, tuple[float, float]]):
    dataset = xr.open_dataset(source)
    lat, lon = box

    def series() -> np.ndarray:
        data = dataset[variable]
        (south, north), (west, east) = box[lat], box[lon]
        inside = data.where(
            (data[lat] >= south) & (data[lat] <= north) & (data[lon] >= west) & (data[lon] <= east),
            drop=True,
        ).astype("f8")
        weights = np.cos(np.deg2rad(inside[lat].astype("f8")))
        return inside.weighted(weights).mean([lat, lon]).values

    def time_map() -> np.ndarray:
        return dataset[variable].astype("f8").mean("time").values

    return dataset, {"box series": series, "time map": time_map}


def case(name, source, variable, box, before, candidates, work, repeats) -> dict:
    parts = granules(source, work, 4)
    dataset, theirs = xarray_answers(source, variable, box)
    questions = {
        "box series": ([*box], box),
        "time map": (["time"], None),
    }
    layouts: dict[str, dict] = {
        "default (regular chunks, Zarr v2)": {},
        "--chunking grow": {"chunking": "grow"},
        f"before: --chunks time={before}": {"chunks": {"time": before}},
        **{
            f"candidate: --chunks time={steps} ({why})": {"chunks": {"time": steps}}
            for why, steps in candidates.items()
        },
    }
    out: dict = {"file": str(source), "steps": dataset.sizes["time"], "layouts": {}}
    for number, (label, options) in enumerate(layouts.items()):
        cube = work / f"{name}-{number}.zarr"
        accumulus.append(str(cube), [str(p) for p in parts], **options)
        with accumulus_scope():
            stored = zarr.open_array(cube / variable, mode="r")
            sizes = declared_chunk_sizes(stored, 0)
            packed = stored.dtype.kind in "iu"  # summed as integers (``sums.reduce_packed``)
        rows = {}
        for state in ("raw", "accumulated"):
            if state == "accumulated":
                build_elsewhere(cube, variable)
            handle = accumulus.open(str(cube))
            for question, (over, ranges) in questions.items():
                handle.query(variable, over, ranges)  # warm-up: the snapshot is read once
                ours, xarray, result = interleaved_medians(
                    lambda h=handle, o=over, r=ranges: h.query(variable, o, r),
                    theirs[question],
                    repeats,
                )
                want = theirs[question]()
                np.testing.assert_allclose(
                    np.asarray(result.data.values, "f8"), np.asarray(want, "f8"), rtol=1e-9
                )
                decoded, held = decoded_bytes(cube, variable, result)
                rows[f"{question}, {state}"] = {
                    "accumulus_warm_ms": round(ours["wall"] * 1e3, 2),
                    "xarray_ms": round(xarray["wall"] * 1e3, 2),
                    "accumulus_over_xarray": round(ours["wall"] / xarray["wall"], 2),
                    "accumulus_cpu_ms": round(ours["cpu"] * 1e3, 2),
                    "xarray_cpu_ms": round(xarray["cpu"] * 1e3, 2),
                    "accumulus_over_xarray_cpu": round(ours["cpu"] / xarray["cpu"], 2),
                    "raw_chunks_read": result.stats.raw_chunks_read,
                    "accumulation_chunks_read": result.stats.accumulation_chunks_read,
                    "bytes_read": result.stats.bytes_read,
                    "raw_bytes_decoded": decoded,
                    "raw_bytes_held": held,
                }
                if result.stats.raw_chunks_read and packed:
                    rows[f"{question}, {state}"].update(
                        timed_without(
                            "float_sums", handle, variable, over, ranges, theirs[question], repeats
                        )
                    )
                whole = whole_decoded(cube, variable, result)
                if whole != decoded:
                    rows[f"{question}, {state}"].update(
                        timed_without(
                            "whole_chunks",
                            handle,
                            variable,
                            over,
                            ranges,
                            theirs[question],
                            repeats,
                        ),
                        whole_chunks_raw_bytes_decoded=whole,
                    )
        out["layouts"][label] = {"time_chunks": ",".join(map(str, sizes)), "questions": rows}
    dataset.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--co2", type=Path, default=CO2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        co2 = work / args.co2.name
        co2.write_bytes(args.co2.read_bytes())
        with xr.open_dataset(co2) as opened:
            step = opened["tcco2"].isel(time=0).size * 2
            held = opened.sizes["time"]
        before = min(100 * 2**20 // step, 1461)  # the rule before: 100 MiB, at most a year
        yearly = yearly_file(work / "yearly_by_xarray.nc")
        # Other regular chunk rules, measured (not chosen by appends): a calendar month of
        # steps without the 10 MiB floor, and a chunk of what the first append holds.
        co2_candidates = {
            "a month, no 10 MiB floor": steps_per_month(6 * 3600.0),
            "what the first append holds": held,
        }
        yearly_candidates = {"what the first append holds": 51}
        box_co2 = {"latitude": (20.0, 60.0), "longitude": (0.0, 90.0)}
        box_yearly = {"lat": (20.0, 60.0), "lon": (0.0, 90.0)}
        report(
            {
                "benchmark": "small cubes vs their files (issue 34 item 9)",
                "load_average": os.getloadavg()[0],
                "repeats": args.repeats,
                "cases": {
                    "six-hourly": case(
                        "co2", co2, "tcco2", box_co2, before, co2_candidates, work, args.repeats
                    ),
                    "yearly": case(
                        "yearly",
                        yearly,
                        "tas",
                        box_yearly,
                        1,
                        yearly_candidates,
                        work,
                        args.repeats,
                    ),
                },
            }
        )


if __name__ == "__main__":
    main()
