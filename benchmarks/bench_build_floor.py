"""Where the default build's time goes, part by part, against one full read of the raw data:
the floor of a build that must read every raw value once and encode and store what the
default layout holds.

On ``bench_defaults``' cube (24 monthly granules appended, 730 x 180 x 360 float32), each
in a fresh process, alternating, ``--repeats`` times:

- ``read``: one full read (xarray + Dask ``sum()``), a build's floor (``bench_accumulate``);
- ``build``: ``accumulate CUBE VAR`` with no options, into a sidecar (the default layout),
  with its tail: the wall and CPU seconds after its last raw chunk was read (what only its
  writes took: the series' last chunk rows are summed, encoded and stored then);
- ``raw``: every raw chunk read and decoded as the build reads it (``read_region``, one
  chunk a block, two at a time as the build reads them);
- ``sums``: the sums the default layout stores, taken from the raw chunks (read untimed)
  as the build takes them: the time sums per segment of every 2 days (``chunk_sums``; the
  layout's segments also end at month ends) and the series' cumulative sums along longitude
  in chunk order (``raw_series.write_part``, its encoding and storing left out), thread CPU;
- ``encode``: every chunk of that sidecar's arrays encoded as the build encodes it
  (``encoded_chunks.encode_chunk``: Blosc and the Fletcher-32 checksum), each decoded first,
  untimed;
- ``store``: every stored object of that sidecar written into an empty directory as the
  build writes a new group's chunks (``stores.local.write_file``: in place, the group not
  yet published), its bytes read first, untimed.

The CPU seconds of ``raw``, ``sums``, ``encode`` and ``store`` are what a build of these
bytes from these raw chunks pays, done this way (with this format); the rest of the build's
CPU is its Python between them, its threads and the memory it holds. On two cores a build
cannot take less wall time than half its CPU; ``floor_over_read`` is half the four parts'
CPU against the full read's wall time.

Each child process loads the same modules before its clock starts (Dask's first compute
imports ``distributed``, 0.12-0.18 s; ``accumulate`` its own modules, 0.07-0.1 s): the
figures are of the work, not of imports one kind pays and the other does not
(docs/benchmarks.md, "session build53").

The sidecars and the copies ``store`` writes go under ``--scratch`` (default: beside the
cube). On this machine's ext4 (no journal) creating a file costs several times more for
minutes after many files were deleted nearby (the inode allocator passes over the
recently deleted ones: docs/benchmarks.md, "session build49"); ``--scratch /dev/shm/DIR``
takes the file system out of the figures.

With ``--baseline-src`` (another checkout's ``src``), its default build too, beside this
code's, the two in turn first, with both groups' stored bytes; ``--kinds read,build`` leaves
the parts out.

    python benchmarks/bench_build_floor.py [--dir DIR] [--repeats 3] [--scratch DIR]
        [--kinds read,build,...] [--baseline-src OLD/src]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from bench_defaults import build_cube
from common import DEFAULT_DIR, TIMED_CHILD_PRELUDE, report, without_leftover
from realistic import VARIABLE

CHILD = (
    TIMED_CHILD_PRELUDE
    + r"""
import threading
from concurrent.futures import ThreadPoolExecutor

what, path, variable, sidecar, scratch = sys.argv[1:6]
zarr.config.set({"array.rectilinear_chunks": True})
timed = 0.0  # thread CPU seconds of the timed calls (encode, store)
if what == "encode":
    from accumulus.accumulation.build.encoded_chunks import encode_chunk
    from accumulus.stores.arrays import array_at
    root = zarr.open_group(sidecar, mode="r")
    arrays = [a for _, a in root.members(max_depth=None) if isinstance(a, zarr.Array)]
    arrays = [a for a in arrays if a.ndim == 3]
    wall, cpu = usage()
    for array in arrays:
        metadata = array.metadata
        dtype = metadata.dtype.to_native_dtype()
        for index in np.ndindex(*(-(-n // c) for n, c in zip(array.shape, array.chunks))):
            region = tuple(slice(i * c, min((i + 1) * c, n))
                           for i, c, n in zip(index, array.chunks, array.shape))
            values = np.asarray(array[region])
            started = time.thread_time()
            encode_chunk(metadata, dtype, values)
            timed += time.thread_time() - started
elif what == "sums":
    from accumulus.accumulation.build import raw_series
    from accumulus.accumulation.build.chunk_sums import chunk_sums
    from accumulus.accumulation.model.spec import COUNT, SUM
    from accumulus.grid import array_bounds
    raw_series.encode_chunk = lambda metadata, dtype, values: b""  # left out: ``encode``
    raw_series.put_objects = lambda store, items: None  # and ``store``
    array = zarr.open_group(path, mode="r")[variable]
    edges = array_bounds(array)[0].edges
    group = zarr.open_group(sidecar, mode="r")
    arrays = [a for _, a in group.members(max_depth=None) if isinstance(a, zarr.Array)]
    [sums] = [a for a in arrays if a.name.endswith("acc_uw_lat_lon_at_1_1")]
    [counts] = [a for a in arrays if a.name.endswith("acc_n_lat_lon_at_1_1")]
    wall, cpu = usage()
    row, blocks = 0, []
    for lo, hi in zip(edges[:-1], edges[1:]):
        block = np.asarray(array[lo:hi])
        started = time.thread_time()
        chunk_sums(block, 1.0, [SUM, COUNT], [(0,)], [list(range(0, hi - lo, 2)), [0], [0]])
        blocks.append(block)
        if hi == min((row + 1) * sums.chunks[0], sums.shape[0]):
            for part in raw_series.parts(sums, counts):
                raw_series.write_part(part, row, blocks, 32 * 2**20)
            row, blocks = row + 1, []
        timed += time.thread_time() - started
elif what == "store":
    from accumulus.stores.local import write_file
    files = sorted(p for p in Path(sidecar).rglob("*") if p.is_file())
    wall, cpu = usage()
    for file in files:
        data = file.read_bytes()
        target = os.path.join(scratch, str(file.relative_to(sidecar)))
        started = time.thread_time()
        write_file(target, data)
        timed += time.thread_time() - started
else:
    wall, cpu = usage()
    if what == "read":
        float(xr.open_zarr(path)[variable].sum().compute())
    elif what == "build":
        import accumulus.raw_cube
        reads_done = [0.0, 0.0]  # wall and CPU after the last raw chunk read so far
        read_region = accumulus.raw_cube.read_region
        def read_and_mark(*args, **kwargs):
            region = read_region(*args, **kwargs)
            reads_done[:] = usage()
            return region
        accumulus.raw_cube.read_region = read_and_mark
        accumulus.accumulate(path, variable, into=sidecar)
    elif what == "raw":
        from accumulus.chunk_reader import read_region
        from accumulus.grid import array_bounds
        array = zarr.open_group(path, mode="r")[variable]
        bounds = array_bounds(array)
        blocks = [[slice(lo, hi) if axis == 0 else slice(0, n)
                   for axis, n in enumerate(array.shape)]
                  for lo, hi in zip(bounds[0].edges[:-1], bounds[0].edges[1:])]
        with ThreadPoolExecutor(2) as pool:
            for _ in pool.map(lambda region: read_region(array, region).shape, blocks):
                pass
end_wall, end_cpu = usage()
tail = {}
if what == "build":
    tail = {"tail_seconds": end_wall - reads_done[0], "tail_cpu_seconds": end_cpu - reads_done[1]}
print(json.dumps({"seconds": end_wall - wall, "cpu_seconds": end_cpu - cpu,
                  "timed_cpu_seconds": timed, **tail}))
"""
)

KINDS = ("read", "build", "raw", "sums", "encode", "store")


def run(kind: str, cube: Path, sidecar: Path, scratch: Path, src: Path | None = None) -> dict:
    """One ``kind`` in a fresh process, with this checkout's code or with ``src`` (another
    checkout's ``src``, first on the path)."""
    os.sync()  # the dirty pages of the step before written back, untimed
    args = [kind, str(cube), VARIABLE, str(sidecar), str(scratch)]
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src.resolve()), env.get("PYTHONPATH", "")])
    command = [sys.executable, "-c", CHILD, *args]
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    if out.returncode:
        raise SystemExit(f"{kind} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR / "defaults")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scratch", type=Path, help="where the builds write (default: --dir)")
    parser.add_argument("--kinds", default=",".join(KINDS), help="which of them (read and build)")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="another checkout's src: its default build too, beside this one's, in turn first",
    )
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    cube_trash = args.dir / "deleted-at-the-end"  # a damaged cube made before, if any
    cube, _ = build_cube(args.dir, 730, False, cube_trash)
    trash = (args.scratch or args.dir) / "deleted-at-the-end"
    trash.mkdir(parents=True, exist_ok=True)
    kinds = args.kinds.split(",")
    if not {"read", "build"} <= set(kinds) <= set(KINDS):
        raise SystemExit(f"--kinds: read, build and any of {', '.join(KINDS[2:])}")
    runs: dict[str, list[dict]] = {kind: [] for kind in kinds}
    baseline: list[dict] = []
    run("read", cube, trash / "unused", trash)  # warm: the cube in the page cache
    for repeat in range(args.repeats):
        sidecar = without_leftover(trash / f"sidecar-{repeat}.zarr")
        for kind in kinds:
            scratch = trash / f"{kind}-{repeat}"
            if kind == "build" and args.baseline_src and repeat % 2:
                baseline.append(_baseline_build(cube, trash, repeat, args.baseline_src))
            runs[kind].append(run(kind, cube, sidecar, scratch))
            if kind == "build" and args.baseline_src and not repeat % 2:
                baseline.append(_baseline_build(cube, trash, repeat, args.baseline_src))
    figures = {
        kind: {
            "seconds": round(statistics.median(r["seconds"] for r in done), 3),
            "cpu_seconds": round(statistics.median(r["cpu_seconds"] for r in done), 3),
            "cpu_seconds_each": [round(r["cpu_seconds"], 2) for r in done],
        }
        for kind, done in runs.items()
    }
    for key in ("tail_seconds", "tail_cpu_seconds"):
        figures["build"][key] = round(statistics.median(r[key] for r in runs["build"]), 3)
        figures["build"][f"{key}_each"] = [round(r[key], 2) for r in runs["build"]]
    figures["build"]["seconds_each"] = [round(r["seconds"], 2) for r in runs["build"]]
    if baseline:
        figures["baseline_build"] = {
            key: round(statistics.median(r[key] for r in baseline), 3)
            for key in ("seconds", "cpu_seconds", "tail_seconds", "tail_cpu_seconds")
        }
        for key in ("seconds", "cpu_seconds", "tail_cpu_seconds"):
            figures["baseline_build"][f"{key}_each"] = [round(r[key], 2) for r in baseline]
        # Each build against the baseline's made beside it: the load moves between pairs
        # (the wall more than the CPU).
        for key, name in (
            ("seconds", "over_baseline_each"),
            ("cpu_seconds", "cpu_over_baseline_each"),
        ):
            figures["build"][name] = [
                round(new[key] / old[key], 3)
                for new, old in zip(runs["build"], baseline, strict=True)
            ]
    figures["build"]["stored_bytes"] = _stored_bytes(trash / "sidecar-0.zarr")
    if baseline:
        figures["baseline_build"]["stored_bytes"] = _stored_bytes(trash / "baseline-0.zarr")
    parted = [kind for kind in ("raw", "sums", "encode", "store") if kind in runs]
    for kind in parted[1:] if "raw" in parted else parted:  # only the timed calls, not reads
        done = runs[kind]
        figures[kind]["cpu_seconds"] = round(
            statistics.median(r["timed_cpu_seconds"] for r in done), 3
        )
        figures[kind]["seconds"] = None
    parts = sum(figures[kind]["cpu_seconds"] for kind in parted)
    read = figures["read"]["seconds"]
    if baseline:
        figures["baseline_build"]["over_read"] = round(
            figures["baseline_build"]["seconds"] / read, 2
        )
    report(
        {
            "benchmark": "the default build part by part, against one full read",
            "cube": str(cube),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            **figures,
            "build_over_read": round(figures["build"]["seconds"] / read, 2),
            **(
                {
                    "parts_cpu_seconds": round(parts, 3),
                    "rest_cpu_seconds": round(figures["build"]["cpu_seconds"] - parts, 3),
                    "floor_over_read": round(parts / 2 / read, 2),
                }
                if len(parted) == 4
                else {}
            ),
        }
    )
    for deleted in {trash, cube_trash}:
        shutil.rmtree(deleted, ignore_errors=True)


def _stored_bytes(sidecar: Path) -> int:
    return sum(p.stat().st_size for p in sidecar.rglob("*") if p.is_file())


def _baseline_build(cube: Path, trash: Path, repeat: int, src: Path) -> dict:
    """The default build by ``src``'s code."""
    sidecar = without_leftover(trash / f"baseline-{repeat}.zarr")
    return run("build", cube, sidecar, trash / f"baseline-{repeat}", src)


if __name__ == "__main__":
    main()
