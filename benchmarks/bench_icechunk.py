"""Daily appends into icechunk repositories against the same appends into a plain Zarr
directory and against VirtualiZarr's ``to_icechunk(append_dim=)``; queries of each; what
expiring old snapshots gives back.

The same NetCDF4 granules (one day of 3-hourly steps each, packed int16, zlib+shuffle) are
appended one call per day to:

- ``plain``: a Zarr v3 directory (``accumulus.append``, ``zarr_format=3``, as a repository
  holds), with its accumulations;
- ``icechunk``: ``icechunk://`` on a local directory, the same appends, one commit each;
- ``virtual``: ``accumulus.append_virtual`` into another repository: the granules' chunks as
  virtual references, the accumulations as real chunks (every ``chunk`` steps along time,
  as in the plain store: the granules' chunks are one step each), one commit each;
- ``virtual_references_only``: the same without accumulations (what VirtualiZarr writes);
- ``virtualizarr`` (when installed, extra ``bench``): VirtualiZarr's ``open_virtual_dataset``
  + ``vds.vz.to_icechunk(store, append_dim="time")`` + ``commit`` into a third repository:
  references only, no accumulations (what a user of VirtualiZarr runs every day).

Accumulations (``time`` and ``lat,lon``) are built after the first day and updated by every
later append. For each: wall time of an append, median over the first and over the last
``window`` days (does it grow with the archive's length: 10 vs ``days`` commits?), bytes and
objects written per append (files created or changed in the store's directory: the PUTs an
object store would take; icechunk's reads happen inside its Rust core and are not counted),
and the final size.

Then an average (a box, over time) is asked of the plain store, of the repository's head, of
the repository at the commit after day ``window`` (time travel) and of the virtual
repository's head, each through one open ``Datacube`` (median of repeats): the ratio to the
plain store is the cost of reading through icechunk. Every answer is checked equal to the
plain store's (rtol 1e-9).

Last, the daily loop's housekeeping: snapshots older than the last ``keep`` days expired and
their objects garbage-collected (``Repository.expire_snapshots`` + ``garbage_collect``), the
repository's size before and after, the time it took, and the head still answering the
same. Prints one JSON document.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xarray as xr

import accumulus
from bench_append import make_granules
from common import median_seconds, report

VAR = "precip"
BOX = {"lat": (-30, 30), "lon": (60, 180)}


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def files(path: Path) -> dict[Path, tuple[int, int]]:
    """Every file under ``path``: its size and modification time."""
    if not path.exists():
        return {}
    found = {}
    for p in path.rglob("*"):
        if p.is_file():
            stat = p.stat()
            found[p] = (stat.st_size, stat.st_mtime_ns)
    return found


def written(
    root: Path, before: dict[Path, tuple[int, int]], after: dict[Path, tuple[int, int]]
) -> tuple[int, int, dict[str, int]]:
    """Objects created or changed between two listings, their bytes, and their bytes by
    the top folder or file under ``root`` they are in (of a repository: ``chunks``,
    ``manifests``, ``snapshots``, ``transactions``, its ``repo`` object and the copies of it
    icechunk keeps in ``overwritten``)."""
    changed = [p for p, state in after.items() if before.get(p) != state]
    kinds: dict[str, int] = {}
    for p in changed:
        kind = p.relative_to(root).parts[0]
        kinds[kind] = kinds.get(kind, 0) + after[p][0]
    return len(changed), sum(after[p][0] for p in changed), kinds


def daily(root: Path, granules: list[Path], append: Callable[[int, Path], str | None]) -> dict:
    """One ``append(day, granule)`` per granule: the seconds each took, the objects and
    bytes it wrote under ``root``, the snapshot it made."""
    seconds, objects, grown, snapshots, kinds = [], [], [], [], []
    for day, granule in enumerate(granules):
        before = files(root)
        started = time.perf_counter()
        snapshots.append(append(day, granule))
        seconds.append(time.perf_counter() - started)
        count, nbytes, by_kind = written(root, before, files(root))
        objects.append(count)
        grown.append(nbytes)
        kinds.append(by_kind)
    return {
        "seconds": seconds,
        "objects": objects,
        "written": grown,
        "snapshots": snapshots,
        "kinds": kinds,
    }


def accumulus_appends(url: str, chunk: int) -> Callable[[int, Path], str | None]:
    def append(day: int, granule: Path) -> str | None:
        result = accumulus.append(url, str(granule), chunks={"time": chunk}, zarr_format=3)
        if day == 0:
            accumulus.accumulate(url, VAR, ["time", "lat,lon"])
        return result.snapshot

    return append


def virtual_appends(url: str, stride: int | None) -> Callable[[int, Path], str | None]:
    """``append_virtual`` per day; with ``stride``, accumulations every ``stride`` of the
    granules' chunks along time (one step each: the plain store's entries fall as often)."""

    def append(day: int, granule: Path) -> str | None:
        accumulus.append_virtual(url, [granule])
        if day == 0 and stride is not None:
            accumulus.accumulate(url, VAR, ["time", "lat,lon"], strides={"time": stride})
        return None

    return append


def virtualizarr_appends(path: Path, granules: list[Path]) -> Callable[[int, Path], str | None]:
    """VirtualiZarr's daily loop into a repository configured for the granules' folder."""
    from icechunk.credentials import LocalFileSystemAccess
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import LocalStore
    from virtualizarr import open_virtual_dataset
    from virtualizarr.parsers import HDFParser

    import icechunk

    folder = granules[0].parent.resolve()
    prefix = f"file://{folder}/"
    config = icechunk.RepositoryConfig.default()
    config.set_virtual_chunk_container(
        icechunk.VirtualChunkContainer(prefix, icechunk.local_filesystem_store(str(folder)))
    )
    repo = icechunk.Repository.create(
        icechunk.local_filesystem_storage(str(path)),
        config,
        authorize_virtual_chunk_access=icechunk.containers_credentials(
            {prefix: LocalFileSystemAccess}
        ),
    )
    registry = ObjectStoreRegistry({"file://": LocalStore()})
    parser = HDFParser()
    inline = ["time", "lat", "lon", "time_bnds"]

    def append(day: int, granule: Path) -> str | None:
        url = f"file://{granule.resolve()}"
        vds = open_virtual_dataset(url, registry=registry, parser=parser, loadable_variables=inline)
        session = repo.writable_session("main")
        vds.vz.to_icechunk(session.store, append_dim=None if day == 0 else "time")
        return session.commit(f"append {granule.name}")

    return append


def alternated(
    questions: dict[str, Callable[[], xr.DataArray]], rounds: int, repeats: int
) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Each question's median seconds over ``rounds`` rounds, the questions taking turns
    (on a shared machine the load drifts: each round sees every question under the same
    load), each round the median of ``repeats`` runs; and each question's answer."""
    times: dict[str, list[float]] = {name: [] for name in questions}
    answers = {}
    for _ in range(rounds):
        for name, ask in questions.items():
            median, answer = median_seconds(ask, repeats)
            times[name].append(median)
            answers[name] = answer.values
    return {name: statistics.median(t) for name, t in times.items()}, answers


def summary(run: dict, window: int) -> dict:
    first, last = (slice(1, window + 1), slice(-window, None))

    def median(key: str, part: slice) -> float:
        return statistics.median(run[key][part])

    def by_kind(part: slice) -> dict[str, float]:
        days = run["kinds"][part]
        names = sorted({kind for day in days for kind in day})
        return {kind: statistics.median(day.get(kind, 0) for day in days) for kind in names}

    return {
        "append_seconds_first_days": median("seconds", first),
        "append_seconds_last_days": median("seconds", last),
        "growth_last_over_first": median("seconds", last) / median("seconds", first),
        "objects_written_per_append_first_days": median("objects", first),
        "objects_written_per_append_last_days": median("objects", last),
        "bytes_written_per_append_first_days": median("written", first),
        "bytes_written_per_append_last_days": median("written", last),
        "bytes_written_by_kind_first_days": by_kind(first),
        "bytes_written_by_kind_last_days": by_kind(last),
    }


def housekeeping(path: Path, snapshots: list[str | None], keep: int) -> dict:
    """Snapshots older than the commit ``keep`` days before the last expired, their
    objects garbage-collected: the repository's size before and after."""
    import icechunk

    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(path)))
    cut = snapshots[-keep]
    assert cut is not None
    older_than = repo.lookup_snapshot(cut).written_at
    before = directory_bytes(path)
    started = time.perf_counter()
    expired = repo.expire_snapshots(older_than=older_than)
    collected = repo.garbage_collect(delete_object_older_than=older_than)
    seconds = time.perf_counter() - started
    return {
        "kept_days": keep,
        "snapshots_expired": len(expired),
        "chunks_deleted": collected.chunks_deleted,
        "bytes_before": before,
        "bytes_after": directory_bytes(path),
        "seconds": seconds,
    }


def growth(args: argparse.Namespace) -> None:
    """Only the repositories' daily appends (``--growth-only``, the stores ``--growth-stores``
    names), for a long run: 10 vs ``days`` commits."""
    with tempfile.TemporaryDirectory(prefix="bench-icechunk-") as tmp:
        work = Path(tmp)
        granules = make_granules(work / "in", args.days, 8, *args.grid)
        paths = {
            "plain": work / "plain.zarr",
            "icechunk": work / "repo",
            "virtual": work / "in" / "virtual-repo",
            "virtual_references_only": work / "in" / "references-repo",
            "virtualizarr": work / "virtualizarr-repo",
        }
        stores = {}
        for name in args.growth_stores.split(","):
            path = paths[name]
            if name == "plain":
                append = accumulus_appends(str(path), args.chunk)
            elif name == "icechunk":
                append = accumulus_appends(f"icechunk://{path}", args.chunk)
            elif name in ("virtual", "virtual_references_only"):
                stride = args.chunk if name == "virtual" else None
                append = virtual_appends(f"icechunk://{path}", stride)
            else:
                append = virtualizarr_appends(path, granules)
            run = daily(path, granules, append)
            stores[name] = {**summary(run, args.window), "bytes": directory_bytes(path)}
            print(json.dumps({name: stores[name]}), file=sys.stderr)  # kept if a later one fails
        report(
            {
                "benchmark": "icechunk --growth-only",
                "days": args.days,
                "grid": list(args.grid),
                "granule_bytes": sum(p.stat().st_size for p in granules) // args.days,
                "stores": stores,
                "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            }
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--window", type=int, default=10, help="days at each end compared")
    parser.add_argument("--grid", type=int, nargs=2, default=(180, 360), metavar=("NY", "NX"))
    parser.add_argument("--chunk", type=int, default=8 * 30, help="time steps per chunk")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=5, help="turns the questions take")
    parser.add_argument("--keep", type=int, default=7, help="days of snapshots kept by expiry")
    parser.add_argument("--no-virtual", action="store_true", help="copying appends only")
    parser.add_argument(
        "--growth-only",
        action="store_true",
        help="appends only, into the stores --growth-stores names (no queries, no expiry): how "
        "appends grow over many commits",
    )
    parser.add_argument(
        "--growth-stores",
        default="icechunk,virtual_references_only,virtualizarr",
        help="with --growth-only: which, comma-separated (also: plain, virtual)",
    )
    args = parser.parse_args()
    if args.growth_only:
        growth(args)
        return

    with tempfile.TemporaryDirectory(prefix="bench-icechunk-") as tmp:
        work = Path(tmp)
        granules = make_granules(work / "in", args.days, 8, *args.grid)
        granule_bytes = sum(p.stat().st_size for p in granules)
        plain_path, repo_path = work / "plain.zarr", work / "repo"
        repo_url = f"icechunk://{repo_path}"
        runs = {
            "plain": daily(plain_path, granules, accumulus_appends(str(plain_path), args.chunk)),
            "icechunk": daily(repo_path, granules, accumulus_appends(repo_url, args.chunk)),
        }
        paths = {"plain": plain_path, "icechunk": repo_path}
        virtual_url = None
        baseline_error = None
        if not args.no_virtual:
            paths["virtual"] = virtual_path = work / "in" / "virtual-repo"  # beside its granules
            virtual_url = f"icechunk://{virtual_path}"
            runs["virtual"] = daily(
                virtual_path, granules, virtual_appends(virtual_url, args.chunk)
            )
            paths["virtual_references_only"] = bare = work / "in" / "references-repo"
            runs["virtual_references_only"] = daily(
                bare, granules, virtual_appends(f"icechunk://{bare}", None)
            )
            try:
                paths["virtualizarr"] = vz_path = work / "virtualizarr-repo"
                runs["virtualizarr"] = daily(
                    vz_path, granules, virtualizarr_appends(vz_path, granules)
                )
            except ImportError as exc:  # the extra ``bench`` not installed
                baseline_error = f"VirtualiZarr not measured: {exc}"

        old = runs["icechunk"]["snapshots"][args.window]
        ask = {"ranges": BOX}
        plain_cube = accumulus.open(str(plain_path))
        head_cube = accumulus.open(repo_url)
        old_cube = accumulus.open(repo_url, ref=old)
        # The plain store asked for the same steps the old commit holds.
        steps = (args.window + 1) * 8
        times = xr.open_zarr(plain_path)["time"].values
        first, last = (str(np.datetime_as_string(times[i])) for i in (0, steps - 1))
        same = {"ranges": {**BOX, "time": (first, last)}}
        questions = {
            "plain": lambda: plain_cube.average(VAR, "time", **ask),
            "head": lambda: head_cube.average(VAR, "time", **ask),
            "old": lambda: old_cube.average(VAR, "time", **ask),
            "plain_old": lambda: plain_cube.average(VAR, "time", **same),
        }
        if virtual_url is not None:
            virtual_cube = accumulus.open(virtual_url)
            questions["virtual"] = lambda: virtual_cube.average(VAR, "time", **ask)
        seconds, answers = alternated(questions, args.rounds, args.repeats)
        want = answers["plain"]
        for name in ("head", "virtual"):
            if name in answers:
                np.testing.assert_allclose(answers[name], want, rtol=1e-9, equal_nan=True)
        np.testing.assert_allclose(answers["old"], answers["plain_old"], rtol=1e-9, equal_nan=True)
        plain_s, head_s, old_s = seconds["plain"], seconds["head"], seconds["old"]
        plain_old_s = seconds["plain_old"]
        query = {
            "plain_seconds": plain_s,
            "icechunk_head_seconds": head_s,
            "icechunk_head_seconds_over_plain": head_s / plain_s,
            "old_snapshot_steps": steps,
            "plain_same_steps_seconds": plain_old_s,
            "icechunk_old_snapshot_seconds": old_s,
            "icechunk_old_over_plain_same_steps": old_s / plain_old_s,
        }
        if "virtual" in seconds:
            query["virtual_head_seconds"] = seconds["virtual"]
            query["virtual_head_seconds_over_plain"] = seconds["virtual"] / plain_s

        stores = {
            name: {**summary(run, args.window), "bytes": directory_bytes(paths[name])}
            for name, run in runs.items()
        }
        for name in ("virtual", "virtual_references_only", "virtualizarr"):
            if name in stores:  # the granules they reference are not their bytes
                stores[name]["bytes_over_granule_bytes"] = stores[name]["bytes"] / granule_bytes
        kept = housekeeping(repo_path, runs["icechunk"]["snapshots"], args.keep)
        kept_answer = accumulus.open(repo_url).average(VAR, "time", **ask)
        np.testing.assert_allclose(kept_answer.values, want, rtol=1e-9, equal_nan=True)
        kept["plain_bytes"] = stores["plain"]["bytes"]

        report(
            {
                "benchmark": "icechunk",
                "days": args.days,
                "grid": list(args.grid),
                "granule_bytes": granule_bytes // args.days,
                "stores": stores,
                "append_ratio_icechunk_over_plain": statistics.median(
                    runs["icechunk"]["seconds"][1:]
                )
                / statistics.median(runs["plain"]["seconds"][1:]),
                "baseline": baseline_error or "virtualizarr measured",
                "query": query,
                "expire_and_collect": kept,
                "when": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            }
        )


if __name__ == "__main__":
    main()
