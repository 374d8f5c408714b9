"""Statistics from prefix sums (issue 38): var, std and trend maps and series, against
xarray + Dask scanning the same cells and against the floor, on the realistic field.

The cube is the first ``--days`` days of the realistic field (``realistic.py``: daily, 1
degree, 180 x 360 float32, 10 % missing, chunks 73 x 90 x 90 = 2.4 MB), written by xarray.
It is built four times, each time into a fresh copy of the group: the default layout
(``accumulate`` with no options), then with ``--stats var``, ``var,trend`` and
``var,trend,corr:tas_next``; the build
seconds and the bytes each statistic's sums add (their optional arrays, and the accumulations at
chunk ends and months holding them beside the default layout) are reported against the raw
array's. Then, with the sums:

- ``var_map``/``std_map``: over time for a chunk-aligned period (whole 73-day chunks), against
  ``ds.weighted(w).var("time")`` (the weights are cos latitude);
- ``var_series``: over a chunk-aligned latitude/longitude box, one value per day for a
  chunk-aligned period, against ``weighted(w).var(["lat", "lon"])``; ``var_series_band``
  the same over latitudes across a chunk edge (the sums keep rows of latitude: no raw chunk),
  ``var_series_unaligned`` over longitudes within chunks too (those chunks read raw);
- ``trend_map``: the slope per year over time, against ``polyfit(deg=1)`` in years;
- ``var_map_raw``: the var map with the sums ignored (raw chunks), against the same xarray;
- ``var_map_months``: the var map over whole months that are not whole chunks (Feb-Nov 2001:
  the sums at month boundaries);
- ``corr_map``: Pearson's r with a second variable (``tas_next``) over time, from its pair sums
  (``--stats corr:tas_next``, the last build), against ``xr.corr``;
- ``season_map``: the DJF map over the whole record (``--season DJF``), against
  ``groupby("time.season").mean("time")``; ``season_series``: JJA of each year over the box,
  against ``groupby("time.year")`` of the JJA days; ``season_var_map``: the variance of
  the DJF days (``--season DJF --stat var``);
- ``mean_map``/``mean_series``: the weighted mean of the var map's period and the var
  series' box, against ``weighted(w).mean``: the query path's share common to every
  statistic.

Each figure is the median of ``--repeats`` runs of an open datacube (``warm``), the floor
(``floor``: ``chunk_reader.read_chunks`` fetching and decoding exactly the chunks the plan
names, reducing each part of them the plan uses into sums of the answer's shape, then the
statistic finished from them: no labels, no planning, no accumulation logic; and
``plain_floor``, each chunk's part summed to one number, the floor of the rounds
before; ``fresh_floor``, ``floor`` with the chunks' requests made anew at each run, as a
question makes its own), and xarray + Dask's scan of
the same selection on a freshly opened store, with the chunks read and the largest relative
difference from xarray's answer. The machine is shared: say so beside the figures.

    python benchmarks/bench_statistics.py [--days 730] [--repeats 3] [--scan-repeats 1] [--reuse]

``--reuse`` asks the questions of a cube an earlier run wrote and built (its last build),
reporting no builds: the ten-year cube's four builds take minutes.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import xarray as xr

import accumulus
from accumulus.accumulation.model import pairs, statistics
from accumulus.accumulation.query.execute import (
    RawPart,
    _matrix_vector,
    chunk_work,
    weights_vary_along,
)
from accumulus.chunk_reader import ChunkRequest, ChunkRequests, read_chunks
from accumulus.grid import array_bounds
from common import DEFAULT_DIR, median_with_cpu, report
from realistic import CHUNKS, VARIABLE, dataset

STEP = CHUNKS[0]  # days per raw chunk along time
OTHER = "tas_next"


def write(directory: Path, days: int) -> Path:
    path = directory / f"statistics-{days}d.zarr"
    shutil.rmtree(path, ignore_errors=True)
    ds = dataset().isel(time=slice(0, days))
    # A second variable on the same grid for corr: the field a day later, plus noise.
    ds[OTHER] = ds[VARIABLE].shift(time=-1) + 0.1 * ds[VARIABLE] ** 0.5
    ds[VARIABLE].encoding = {"chunks": CHUNKS}
    ds[OTHER].encoding = {"chunks": CHUNKS}
    ds.to_zarr(path, mode="w", zarr_format=2, consolidated=True)
    return path


def floor(handle: accumulus.Datacube, result) -> dict[str, tuple[float, float]]:
    """Seconds to fetch and decode exactly the chunks ``result``'s plan reads and finish the
    statistic: no labels, no planning, no accumulation logic. Two ways of combining them:

    - ``parts``: each part of a chunk the plan uses reduced as the answer needs it (the
      entries of a series weighted and summed over its box, each season-year's into its
      own slot) and added, with its sign, at its place in sums of the answer's shape, which
      then finish the statistic: the least any program answering from those chunks does;
    - ``plain``: the part of each chunk the plan uses summed to one number, then the
      statistic finished from sums of ones (the floor of the rounds before: it leaves out
      the weights and the adding into the answer).

    - ``fresh``: ``parts`` (``plain`` for corr) with the chunks' requests made anew at each
      run, as every question makes its own (``chunk_reader.ChunkRequests``): their keys, and
      per array and part needed their byte spans and decoding spec, worked out again.
      ``parts`` and ``plain`` reuse one listing's requests, which keep those after their
      first run, so they leave out work no answer can skip (the listing of the parts,
      ``chunk_work``, is planning and is left out of all three).

    For a season, the chunks of all its runs' reads (one plan); for corr, the chunks of its
    pair sums the plan's entries lie in (and the raw chunks of both variables under its raw
    reads), whose entries a map adds as they are (both ways alike). A raw part (a read
    the sums do not answer) is summed plainly both ways: the sums of its values' squares
    and counts are left out. Wall and CPU seconds (medians) of each."""
    snapshot = handle.snapshot()
    cube = snapshot.cube
    var = cube.variable(VARIABLE)
    stat = statistics.STATISTICS[result.query.stat]
    weighted = result.weights != "none"
    work = None
    if result.query.stat == "corr":
        requests = pair_requests(cube, var, result.plan)
    else:
        terms = _read_terms(cube, var, result, stat)
        work = chunk_work(snapshot.groups, var, result.plan, terms)
        requests = [request for request, _ in work.values()]
    shape = result.data.shape
    ones = [np.ones(shape) for _ in stat.sums]

    def plain(request, chunk) -> None:
        # Each part's box where the chunk has several (only those are decoded), else the
        # part it needs.
        for region in request.regions or [request.needed or ...]:
            chunk[region].sum(dtype="f8")

    def run_plain() -> None:
        read_chunks(requests, plain, None, cube.store)
        stat.answer(ones, weighted)

    def run_plain_fresh() -> None:
        read_chunks(anew(requests), plain, None, cube.store)
        stat.answer(ones, weighted)

    found = {"plain": median_with_cpu(run_plain, 3)[:2]}
    if work is None:
        found["parts"] = found["plain"]
        found["fresh"] = median_with_cpu(run_plain_fresh, 3)[:2]
        return found
    lock = threading.Lock()
    total = np.zeros((len(terms), *shape))

    def parts(request, chunk) -> None:
        for part in work[request.key][1]:
            slab = chunk[part.local]
            if isinstance(part, RawPart):
                slab.sum(dtype="f8")
                continue
            if part.contract is not None:  # weights along one summed axis
                axis, w = part.contract
                # (In blocks BLAS takes in this thread: a larger product wakes its threads,
                # which spin for more CPU than the product takes.)
                slab = _matrix_vector(np.moveaxis(slab, axis, -1), w)
                summed = tuple(a - (a > axis) for a in part.summed if a != axis)
            elif part.weights is not None:
                slab, summed = slab * part.weights, part.summed
            else:
                summed = part.summed
            values = slab.sum(axis=summed, dtype="f8") if summed else slab
            into = total[(*part.out, ...)]
            with lock:
                (np.add if part.sign > 0 else np.subtract)(into, values, out=into)

    def run_parts() -> None:
        total.fill(0.0)
        read_chunks(requests, parts, None, cube.store)
        stat.answer(list(total[: len(stat.sums)]), weighted)

    def run_parts_fresh() -> None:
        total.fill(0.0)
        read_chunks(anew(requests), parts, None, cube.store)
        stat.answer(list(total[: len(stat.sums)]), weighted)

    found["parts"] = median_with_cpu(run_parts, 3)[:2]
    found["fresh"] = median_with_cpu(run_parts_fresh, 3)[:2]
    return found


def anew(requests: list[ChunkRequest]) -> list[ChunkRequest]:
    """The same chunks' requests as a question makes them (``ChunkRequests``): new objects,
    their keys worked out, what chunks of an array alike share worked out once."""
    made = ChunkRequests()
    return [made.request(r.array, r.coords, r.store, r.needed, r.regions, r.keep) for r in requests]


def _read_terms(cube, var, result, stat) -> tuple[str, ...]:
    """The sums the query read: without weights where they divide out of its answer (a
    mean, var or std whose weights vary only along dimensions it keeps: it reads the same
    accumulations' sums as stored, multiplying nothing), as ``answer._weights_cancel``."""
    weighted = result.weights != "none"
    if weighted and stat.scale_free:
        varying = weights_vary_along(cube, result.weights, var)
        weighted = bool(set(varying) & set(result.plan.over))
    return stat.sums_for(weighted=weighted)


def pair_requests(cube, var, plan) -> list[ChunkRequest]:
    """The chunks a correlation's plan reads: of its pair sums, those holding each entry
    read over its box; of both variables, those under each raw read."""
    described, array = pairs.read_pairs(cube.root, VARIABLE, OTHER)
    other = cube.variable(OTHER)
    bounds = array_bounds(array)
    rest = [d for d in var.dims if d != described.dim]
    requests = []
    for read in plan.reads:
        box = {d: read.box.get(d, plan.ranges[d]) for d in var.dims}
        if read.is_raw:
            along = zip(var.dims, var.bounds, strict=True)
            chunks = [b.chunks_overlapping(*box[d]) for d, b in along]
            for coords in itertools.product(*chunks):
                requests += [ChunkRequest(var.array, coords), ChunkRequest(other.array, coords)]
            continue
        entry, _ = bounds[0].chunk_of(read.entries[described.dim])
        chunks = [[entry], range(bounds[1].n_chunks)]
        chunks += [b.chunks_overlapping(*box[d]) for d, b in zip(rest, bounds[2:], strict=True)]
        requests += [ChunkRequest(array, coords) for coords in itertools.product(*chunks)]
    return requests


def xarray_answer(path: Path, name: str, box: dict) -> xr.DataArray:
    ds = xr.open_zarr(path, consolidated=True)
    data = ds[VARIABLE].isel(box).astype("f8")
    w = np.cos(np.deg2rad(ds["lat"].isel(lat=box.get("lat", slice(None)))))
    if name in ("var_map", "var_map_raw", "var_map_months"):
        return data.weighted(w).var("time").compute()
    if name == "std_map":
        return data.weighted(w).std("time").compute()
    if name == "mean_map":
        return data.weighted(w).mean("time").compute()
    if name == "mean_series":
        return data.weighted(w).mean(["lat", "lon"]).compute()
    if name in ("var_series", "var_series_band", "var_series_unaligned"):
        return data.weighted(w).var(["lat", "lon"]).compute()
    if name == "corr_map":
        return xr.corr(data, ds[OTHER].isel(box).astype("f8"), dim="time").compute()
    if name == "season_var_map":  # the variance of the DJF days of the whole record
        djf = data.where(data["time"].dt.season == "DJF", drop=True)
        return djf.weighted(w).var("time").compute()
    if name == "season_map":  # DJF over the whole record, as groupby("time.season") sees it
        return data.groupby("time.season").mean("time").sel(season="DJF", drop=True).compute()
    if name == "season_series":  # JJA of each year, pooled over the box
        jja = data.where(data["time"].dt.season == "JJA", drop=True)
        yearly = jja.groupby("time.year").map(lambda g: g.weighted(w).mean(["time", "lat", "lon"]))
        return yearly.compute()
    days = (data["time"] - data["time"][0]) / np.timedelta64(1, "D")
    fit = data.assign_coords(time=days.values / 365.25).polyfit("time", 1, skipna=True)
    return fit.polyfit_coefficients.sel(degree=1, drop=True).compute()


def questions(days: int) -> dict:
    chunks = days // STEP
    aligned = slice(STEP, STEP * max(chunks - 1, 2))  # whole chunks, not the first or last
    box = {"lat": slice(0, 90), "lon": slice(90, 270)}  # 90 x 180 cells, chunk-aligned
    band = {"lat": slice(30, 120), "lon": slice(90, 270)}  # any latitudes, whole lon chunks
    unaligned = {"lat": slice(30, 120), "lon": slice(100, 260)}  # lon within chunks
    return {
        "var_map": ("var", ["time"], {"time": aligned}, True),
        # February to November 2001: whole months, not whole chunks.
        "var_map_months": ("var", ["time"], {"time": slice(31, 334)}, True),
        "std_map": ("std", ["time"], {"time": aligned}, True),
        "var_series": ("var", ["lat", "lon"], {"time": aligned, **box}, True),
        "var_series_band": ("var", ["lat", "lon"], {"time": aligned, **band}, True),
        "var_series_unaligned": ("var", ["lat", "lon"], {"time": aligned, **unaligned}, True),
        "trend_map": ("trend", ["time"], {"time": aligned}, True),
        "var_map_raw": ("var", ["time"], {"time": aligned}, False),
        "corr_map": ("corr", ["time"], {"time": aligned}, True),
        "season_map": ("mean", ["time"], {}, True),
        "season_var_map": ("var", ["time"], {}, True),
        "season_series": ("mean", ["lat", "lon"], box, True),
        # The mean of the same map and series: what the query path keeps beyond the floor
        # whatever the statistic, beside which each statistic's own share shows.
        "mean_map": ("mean", ["time"], {"time": aligned}, True),
        "mean_series": ("mean", ["lat", "lon"], {"time": aligned, **box}, True),
    }


def labels(path: Path, box: dict) -> dict:
    ds = xr.open_zarr(path, consolidated=True)
    out = {}
    for dim, part in box.items():
        values = ds[dim].values[part]
        out[dim] = (str(values[0])[:10], str(values[-1])[:10]) if dim == "time" else (
            float(values.min()), float(values.max()))  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=730)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scan-repeats", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument(
        "--reuse", action="store_true",
        help="ask the questions of the cube a run before wrote and built under --dir (its "
        "last build: --stats var,trend,corr:tas_next), without writing or building it again",
    )  # fmt: skip
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    path = args.dir / f"statistics-{args.days}d.zarr"
    if not args.reuse:
        path = write(args.dir, args.days)

    builds: dict = {}
    for name, stats in (
        ("default", None),
        ("stats_var", ["var"]),
        ("stats_var_trend", ["var", "trend"]),
        ("stats_var_trend_corr", ["var", "trend", f"corr:{OTHER}"]),
    ):
        if args.reuse:
            break
        started = time.perf_counter()
        built = accumulus.accumulate(str(path), VARIABLE, stats=stats, rebuild=True)
        stored = sum(v or 0 for v in built.stored.values())
        raw = built.raw_stored
        builds[name] = {
            "seconds": round(time.perf_counter() - started, 2),
            "stored_bytes": stored,
            "vs_raw": round(stored / raw, 3) if raw else None,
        }
        if stats is not None:
            # What the statistics add: their optional arrays (Σ(x−c)², ...) and, beside the
            # default layout, the accumulations at chunk ends and months that hold them.
            added = stored - builds["default"]["stored_bytes"]
            builds[name]["added_bytes"] = added
            builds[name]["added_vs_raw"] = round(added / raw, 3) if raw else None
            info = accumulus.inspect(str(path))
            [group] = [g for g in info["accumulation_groups"] if g["variable"] == VARIABLE]
            builds[name]["optional_arrays"] = {
                s: {"bytes": b, "vs_raw": round(b / raw, 3) if b and raw else None}
                for s, b in group["stats"].items()
            }
            builds[name]["siblings_bytes"] = group["stats_siblings_bytes"]
            pairs = group["pairs"].get(OTHER)
            if pairs:
                paired = pairs["array"]["bytes_stored"]
                builds[name]["corr_pair_sums"] = {
                    "bytes": paired,
                    "vs_raw": round(paired / raw, 3) if raw else None,
                }
            builds[name]["accumulations"] = {
                f"{','.join(a['dims'])}@{a['at']}": a["bytes_stored"]
                for a in group["accumulations"]
            }
        builds["raw_stored_bytes"] = raw

    handle = accumulus.open(str(path))
    answers = {}
    for name, (stat, over, box, use) in questions(args.days).items():
        ranges = labels(path, box)

        options = {"stat": stat, "use_accumulation": use}
        if stat == "corr":
            options["with_"] = OTHER
        if name.startswith("season"):
            options["season"] = "JJA" if name == "season_series" else "DJF"

        def ask(over=over, ranges=ranges, options=options):
            return handle.query(VARIABLE, over, ranges, **options)

        warm, warm_cpu, result = median_with_cpu(ask, args.repeats)
        started = time.perf_counter()
        expected = None
        scans = []
        for _ in range(args.scan_repeats):
            started = time.perf_counter()
            expected = xarray_answer(path, name, box)
            scans.append(time.perf_counter() - started)
        scan = sorted(scans)[len(scans) // 2]
        got = result.data.transpose(*expected.dims).values
        want = expected.values
        both = np.isfinite(got) & np.isfinite(want) & (want != 0)
        floors = floor(handle, result)
        floor_seconds, floor_cpu = floors["parts"]
        plain_cpu = floors["plain"][1]
        answers[name] = {
            "stat": stat,
            "over": over,
            "warm_ms": round(warm * 1000, 2),
            "floor_ms": round(floor_seconds * 1000, 2),
            "vs_floor": round(warm / floor_seconds, 2),
            # CPU seconds of every thread of the process: on a shared machine wall time
            # also counts waiting for a core, which CPU time does not.
            "warm_cpu_ms": round(warm_cpu * 1000, 2),
            "floor_cpu_ms": round(floor_cpu * 1000, 2),
            "vs_floor_cpu": round(warm_cpu / floor_cpu, 2),
            # The floor of the rounds before: each chunk's part summed to one number.
            "plain_floor_cpu_ms": round(plain_cpu * 1000, 2),
            "vs_plain_floor_cpu": round(warm_cpu / plain_cpu, 2),
            # The floor with the chunks' requests made anew at each run, as a question's are.
            "fresh_floor_cpu_ms": round(floors["fresh"][1] * 1000, 2),
            "vs_fresh_floor_cpu": round(warm_cpu / floors["fresh"][1], 2),
            "xarray_ms": round(scan * 1000, 1),
            "x_faster_than_xarray": round(scan / warm, 1),
            "accumulation_chunks": result.stats.accumulation_chunks_read,
            "raw_chunks": result.stats.raw_chunks_read,
            "bytes": result.stats.bytes_read,
            "max_rel_diff": float(np.max(np.abs(got[both] - want[both]) / np.abs(want[both])))
            if both.any()
            else None,
            "nan_agree": bool(np.array_equal(np.isnan(got), np.isnan(want))),
        }
    report({"days": args.days, "chunks": list(CHUNKS), "builds": builds, "questions": answers})


if __name__ == "__main__":
    main()
