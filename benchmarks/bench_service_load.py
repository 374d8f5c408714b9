"""The service under a data center's load (issue 39): `accumulus serve CUBE --workers 2` on
the realistic cube with the accumulations issue 39 names (``--layout issue``: time at every
day, lat+lon at every cell, `--dims time --dims lat,lon --at time=1 --at lat=1,lon=1`) or
those `accumulate` builds with no options (``--layout default``: time at month ends and every
2 days of each month, whose day-precise maps read a raw day at each end), and a client on the
same machine sending unique random requests with a fixed number in flight.

Requests (all distinct, so the answer cache cannot help): half area-averaged series over a
random box (2-60 degrees of latitude x 2-120 of longitude, some across 0 degrees, some across
the date line) and a random day-precise period; half time-averaged maps over a random
day-precise period and box. Five loads are sent to each server:

- ``1 client``: one request at a time: a request's latency without a queue (its p50 near its
  CPU; a stall on every request, such as the 40 ms that Nagle's algorithm once added, shows
  here at once);
- ``16 clients``: 16 requests in flight;
- ``64 clients``: 64 in flight;
- ``16 clients, 10 % raw``: as the first, with one request in ten answered from the raw data
  alone (``accumulation=false``: what a question no accumulation can answer costs, chunks
  decoded and summed), reported apart ("raw") from the others ("light");
- ``16 clients, cache hits``: 50 questions asked over and over, so that (after their first
  round) every answer is in the cache: what the service costs without the query (HTTP, the
  request's check, the look-up).

Every load counts the answers served from the cache (``X-Accumulus-Cache: hit``): unique
random questions never hit it. And the cores the server and client got (their CPU seconds
over the wall time): on a machine shared with other work, requests/s is bounded by that
share, so the CPU per request is the figure to compare, and 2 cores over the server's and
the client's CPU per request the most requests/s two free cores could give (``ceiling``).

The client is one asyncio process using aiohttp (a dependency already) with keep-alive
connections, one per request in flight, asking for gzip as browsers do and inflating only
the answers it checks; it runs on the same cores as the server, and its own CPU per request
is reported beside the server's (the server's processes measured by
psutil). Reported per load: requests/s, p50/p99/p999 latency, status counts, CPU per request
(server, client), each worker process's CPU seconds (how evenly the connections were
shared), and the workers' CPU per request split by thread (their event loops' threads: HTTP
and the hand-overs; the others: the check, the query, JSON), the kernel's share of each, and
their context switches and page faults per request.

The floor: the same questions answered in this process, one after another, by the service's
own functions without HTTP (`check_average_request` + `compute_answer` on one snapshot):
CPU per request, p50/p99, and that CPU by stage, each timed by itself: the request's check,
the library's query, its JSON and the gzip of large answers; the query's CPU split further by
a profile (cProfile) into planning (resolving labels, choosing the plan), reads (store gets,
zarr's machinery), decoding (codecs), summing (the plan's arithmetic) and the answer's
assembly. (A profile charges each Python call more than it costs, unlike C's: its split of
the whole floor moved work between the parts; docs/benchmarks.md, session svc55.) HTTP is
the server's CPU per request less the floor's.

The HTTP floor (``--bare-bytes N [N ...]``): in each round, a bare ASGI application served
with serve's HTTP configuration and workers (``bare_service.py``) gets the same loads and
answers each request with a fixed JSON body of N bytes: what HTTP itself (uvicorn, the
protocol, the workers taking turns, and this client) costs per request, without the service.

A sample of answers (``--check``) is compared with xarray on the raw data (rtol 1e-9).

``--sources NAME=DIR`` (repeatable) serves the same loads from other source trees (e.g.
``git archive`` of an older commit, unpacked), in the same run, so that a change is measured
against what came before on the same (shared, loaded) machine; ``--rounds N`` serves them N
times in turn (A, B, A, B...) and reports each figure's median over the rounds beside the
rounds themselves. ``--chunk-cache-mb MB [MB ...]`` serves each source with each of these
caches of decoded chunks (``serve --chunk-cache-mb``), in turn within a round; ``MB:private``
gives each worker its own (``--private-chunk-cache``), ``MB:shared`` or ``MB`` serve's default
(the workers share one, since session svc53: compare ``1536:private 3072:shared``, the same
memory in all).
Every load also reports the share of the workers' accumulation chunk reads served from that
cache (``decoded_chunks_kept_share``, from ``/api/health`` of each worker) and each worker's
peak resident memory so far (``worker_peak_rss_mib``). ``--days`` takes a shorter cube (the
first days of the same field) for quick runs.

    python benchmarks/bench_service_load.py [--days 3650] [--requests 2000] [--check 24]
        [--warm-up 200] [--sources before=/tmp/before/src --sources after=src] [--rounds 3]
        [--chunk-cache-mb 1536:private 3072:shared]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import gzip
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import aiohttp
import httpx
import numpy as np
import pandas as pd
import psutil
import xarray as xr
import zarr

import accumulus
from accumulus.accumulation.model import spec
from accumulus.accumulation.model.groups import read_group
from accumulus.accumulation.query.budget import DEFAULT_MEMORY_BYTES
from accumulus.api import open_cube
from accumulus.decoded_chunks import DECODED
from accumulus.output import result_json_bytes
from accumulus.service.answers import MEDIA_TYPES, Answer, compute_answer
from accumulus.service.app import default_chunk_cache_bytes
from accumulus.service.datasets import Dataset
from accumulus.service.parameters import AverageParameters, AverageRequest, check_average_request
from bench_service import answering, free_port, start_service
from common import DEFAULT_DIR
from realistic import CHUNKS, SHAPE, START, VARIABLE, dataset, realistic_cube

LOADS = {  # name: (requests in flight, share answered from the raw data)
    "1 client": (1, 0.0),
    "16 clients": (16, 0.0),
    "64 clients": (64, 0.0),
    "16 clients, 10 % raw": (16, 0.1),
    "16 clients, cache hits": (16, 0.0),
}
# The questions of the cache-hit load: this many, asked over and over (after one round).
HIT_QUESTIONS = 50
CORES = 2
MAX_CELLS = 2_000_000


# --------------------------------------------------------------------------------------------
# The cube


# The accumulations served (``--layout``): the options of `accumulate` that build them, and
# the rules of the accumulations they build on the realistic cube (whose dates and Blosc
# chunks take the default's dated rule along time).
LAYOUTS: dict[str, tuple[dict, dict[tuple[str, ...], dict]]] = {
    "issue": (
        {"dims": ["time", "lat,lon"], "at": {"time": 1, "lat": 1, "lon": 1}},
        {("time",): {"time": 1}, ("lat", "lon"): {"lat": 1, "lon": 1}},
    ),
    "default": (
        {},
        {("time",): {"time": spec.DEFAULT_DATED_RULE}, ("lat", "lon"): {"lat": 1, "lon": 1}},
    ),
}


def prepared_cube(directory: Path, days: int, layout: str) -> Path:
    """The realistic cube (or its first ``days``), with the accumulations ``layout`` names
    (``LAYOUTS``): built, or rebuilt when it holds others."""
    if days == SHAPE[0]:
        path = realistic_cube(directory)
    else:
        path = directory / f"realistic-{days}x180x360-73x90x90.zarr"
        if not (path / ".zmetadata").exists():
            ds = dataset().isel(time=slice(0, days))
            ds[VARIABLE].encoding = {"chunks": CHUNKS}
            ds.to_zarr(path, mode="w", zarr_format=2, consolidated=True)
    cube = open_cube(str(path))
    root = zarr.open_group(str(path), mode="r")
    built = False
    if spec.group_name(VARIABLE) in root:
        built = _built_as(read_group(cube, VARIABLE, root), layout)
    # A group of another layout (the other of ``LAYOUTS``, bench_average's chunk ends) is
    # replaced; one of this layout brought up to date.
    accumulus.accumulate(str(path), VARIABLE, reset=not built, **LAYOUTS[layout][0])
    return path


def _built_as(group: spec.AccumulationGroup, layout: str) -> bool:
    """Whether ``group`` holds the accumulations ``layout`` names, and only those."""
    found = {a.dims: a.placement.rules if a.placement else None for a in group.chosen}
    return found == LAYOUTS[layout][1]


# --------------------------------------------------------------------------------------------
# The questions


@dataclass(frozen=True)
class Question:
    url: str  # path and query
    kind: str  # "series", "map" or "raw"


def questions(
    dataset_name: str, days: int, count: int, raw_share: float, seed: int
) -> list[Question]:
    """``count`` distinct questions: series and maps alternately, ``raw_share`` of them
    answered from the raw data."""
    rng = np.random.default_rng(seed)
    first = pd.Timestamp(START)
    out = []
    for k in range(count):
        height, width = rng.uniform(2, 60), rng.uniform(2, 120)
        south = rng.uniform(-90, 90 - height)
        west = rng.uniform(-180, 180)
        east = west + width
        if east > 180:  # across the date line: west > east
            east -= 360
        length = int(rng.integers(1, days + 1))
        start = first + pd.Timedelta(days=int(rng.integers(0, days - length + 1)))
        end = start + pd.Timedelta(days=length - 1)
        series = k % 2 == 0
        url = (
            f"/api/datasets/{dataset_name}/{VARIABLE}/average?over="
            f"{'lat,lon' if series else 'time'}&time={start.date()}/{end.date()}"
            f"&lat={south:.2f}/{south + height:.2f}&lon={west:.2f}/{east:.2f}"
        )
        kind = "series" if series else "map"
        if rng.random() < raw_share:
            url, kind = url + "&accumulation=false", "raw"
        out.append(Question(url, kind))
    return out


# --------------------------------------------------------------------------------------------
# The server and the client


def server_cpu(process: subprocess.Popen) -> dict[int, float]:
    """CPU seconds of each of the server's processes (its parent and workers) so far."""
    parent = psutil.Process(process.pid)
    seconds = {}
    for p in [parent, *parent.children(recursive=True)]:
        try:
            times = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        seconds[p.pid] = times.user + times.system
    return seconds


def server_threads(
    process: subprocess.Popen,
) -> dict[tuple[int, int], tuple[float, float, int, int]]:
    """CPU seconds (user, system), context switches and page faults of each thread of the
    server's worker processes so far, by (process, thread) id: a worker's main thread runs its
    event loop (HTTP, the hand-overs), the others compute (the check, the query, JSON) or
    serve them."""
    found = {}
    for worker in psutil.Process(process.pid).children(recursive=True):
        try:
            threads = worker.threads()
        except psutil.NoSuchProcess:
            continue
        for thread in threads:
            task = Path(f"/proc/{worker.pid}/task/{thread.id}")
            try:
                status, stat = (task / "status").read_text(), (task / "stat").read_text()
            except OSError:  # ended meanwhile
                continue
            switches = sum(
                int(line.split()[1]) for line in status.splitlines() if "ctxt_switches" in line
            )
            faults = int(stat.rpartition(")")[2].split()[7])  # minflt (proc(5): field 10)
            cpu = (thread.user_time, thread.system_time)
            found[(worker.pid, thread.id)] = (*cpu, switches, faults)
    return found


def thread_split(before: dict, after: dict, requests: int) -> dict[str, float]:
    """The workers' CPU per request (ms) on their event loops' threads and on the others,
    and their threads' context switches (voluntary and not) and page faults per request: what
    the service itself costs around the computation, and how often its threads hand the cores
    over."""
    loop = rest = loop_system = rest_system = switches = faults = 0.0
    for (pid, tid), (user, system, switched, faulted) in after.items():
        user_before, system_before, switched_before, faulted_before = before.get(
            (pid, tid), (0.0, 0.0, 0, 0)
        )
        faults += faulted - faulted_before
        if tid == pid:
            loop += user + system - user_before - system_before
            loop_system += system - system_before
        else:
            rest += user + system - user_before - system_before
            rest_system += system - system_before
        switches += switched - switched_before
    return {
        "event_loop_cpu_ms_per_request": round(1000 * loop / requests, 2),
        "other_threads_cpu_ms_per_request": round(1000 * rest / requests, 2),
        # Of which in the kernel (system calls, page faults, switching threads).
        "event_loop_system_cpu_ms_per_request": round(1000 * loop_system / requests, 2),
        "other_threads_system_cpu_ms_per_request": round(1000 * rest_system / requests, 2),
        "context_switches_per_request": round(switches / requests, 1),
        # Pages touched for the first time (fresh memory, a mapping's first read): each costs
        # the kernel's time above.
        "page_faults_per_request": round(faults / requests, 1),
    }


async def _send(
    base: str,
    questions: list[Question],
    clients: int,
    keep: set[str],
    opened: Callable[[], None] = lambda: None,
) -> dict:
    """``questions`` sent by ``clients`` in flight, each client on a kept-alive connection
    opened first (a catalog request each, all at once, then ``opened()``): a data center's
    clients keep theirs, and 64 opened at once wait on the workers' turns at the socket
    (``http.TakingTurnsLoop``: up to ~0.3 s), which is not what a load measures."""
    latencies: dict[str, list[float]] = {"series": [], "map": [], "raw": []}
    statuses: dict[int, int] = {}
    hits = [0]
    sizes: list[int] = []  # as sent (gzipped where it was)
    bodies: dict[str, bytes] = {}
    queue = iter(questions)
    connector = aiohttp.TCPConnector(limit=clients, force_close=False)
    timeout = aiohttp.ClientTimeout(total=600)
    # The bodies are kept as sent, gzipped where they were: the client inflates only those it
    # checks (it runs on the server's cores; a data center's clients are elsewhere).
    async with aiohttp.ClientSession(
        base, connector=connector, timeout=timeout, auto_decompress=False
    ) as session:

        async def client() -> None:
            for question in queue:
                started = time.perf_counter()
                async with session.get(question.url) as response:
                    body = await response.read()
                    hits[0] += response.headers.get("X-Accumulus-Cache") == "hit"
                    sizes.append(response.content_length or 0)
                latencies[question.kind].append(time.perf_counter() - started)
                statuses[response.status] = statuses.get(response.status, 0) + 1
                if question.url in keep and response.status == 200:
                    gzipped = response.headers.get("Content-Encoding") == "gzip"
                    bodies[question.url] = gzip.decompress(body) if gzipped else body

        async def connect() -> None:
            async with session.get("/api/datasets") as response:
                await response.read()

        await asyncio.gather(*(connect() for _ in range(clients)))
        opened()
        await asyncio.gather(*(client() for _ in range(clients)))
    return {
        "latencies": latencies,
        "statuses": statuses,
        "bodies": bodies,
        "hits": hits[0],
        "response_bytes_mean": round(statistics.fmean(sizes)) if sizes else 0,
    }


def percentiles(seconds: list[float]) -> dict[str, float]:
    if not seconds:
        return {}
    ms = np.array(seconds) * 1000
    return {
        "count": len(ms),
        "p50_ms": round(float(np.percentile(ms, 50)), 1),
        "p99_ms": round(float(np.percentile(ms, 99)), 1),
        "p999_ms": round(float(np.percentile(ms, 99.9)), 1),
    }


def drive(
    base: str, server: subprocess.Popen, qs: list[Question], clients: int, keep: set[str]
) -> dict:
    """Send ``qs`` with ``clients`` in flight; measure, once their connections are open."""
    before: dict[str, Any] = {}

    def opened() -> None:
        before.update(
            load=os.getloadavg()[0],
            caches=worker_caches(base, server),
            threads=server_threads(server),
            cpu_server=server_cpu(server),
            cpu_client=time.process_time(),
            started=time.perf_counter(),
        )

    # The client's own full collections would walk this process's imports and questions
    # (90-160 ms each, every few seconds), stalling every request in flight: latency the
    # server did not add. Frozen out of them, as a worker's are (``service.memory``).
    gc.freeze()
    sent = asyncio.run(_send(base, qs, clients, keep, opened))
    wall = time.perf_counter() - before["started"]
    load_before, caches_before, threads_before = before["load"], before["caches"], before["threads"]
    cpu_server, cpu_client = before["cpu_server"], before["cpu_client"]
    threads = thread_split(threads_before, server_threads(server), len(qs))
    by_process = {pid: cpu - cpu_server.get(pid, 0.0) for pid, cpu in server_cpu(server).items()}
    cpu_client = time.process_time() - cpu_client
    caches = worker_caches(base, server)
    reads = {
        figure: sum(
            caches[pid][figure] - caches_before.get(pid, {}).get(figure, 0) for pid in caches
        )
        for figure in ("hits", "misses")
    }
    busy = sorted((cpu for cpu in by_process.values() if cpu > 0.05), reverse=True)
    all_latencies = [s for kind in sent["latencies"].values() for s in kind]
    light = sent["latencies"]["series"] + sent["latencies"]["map"]
    server_ms = 1000 * sum(by_process.values()) / len(qs)
    client_ms = 1000 * cpu_client / len(qs)
    result = {
        "requests": len(qs),
        "seconds": round(wall, 2),
        "requests_per_s": round(len(qs) / wall, 1),
        **{k: v for k, v in percentiles(all_latencies).items() if k != "count"},
        "statuses": {str(k): v for k, v in sorted(sent["statuses"].items())},
        "cache_hits": sent["hits"],
        "response_bytes_mean": sent["response_bytes_mean"],
        "server_cpu_ms_per_request": round(server_ms, 2),
        # How the work fell on the worker processes (their CPU seconds, most first).
        "server_cpu_s_by_worker": [round(cpu, 2) for cpu in busy],
        **threads,
        "client_cpu_ms_per_request": round(client_ms, 2),
        # The workers' reads of accumulation chunks served decoded from their caches.
        "decoded_chunks_kept_share": round(reads["hits"] / max(1, sum(reads.values())), 3),
        # Per worker; with a shared cache each reports what all of them hold (in /dev/shm).
        "decoded_chunks_held_mib": [round(c["held_bytes"] / 2**20) for c in caches.values()],
        "decoded_chunks_shared": all(c.get("shared", False) for c in caches.values()),
        "decoded_chunks_shared_errors": sum(c.get("shared_errors", 0) for c in caches.values()),
        "worker_peak_rss_mib": worker_memory_mib(server, "VmHWM"),
        # Of which, now: the worker's own memory, and the shared chunks it has mapped.
        "worker_rss_anon_mib": worker_memory_mib(server, "RssAnon"),
        "worker_rss_shmem_mib": worker_memory_mib(server, "RssShmem"),
        # The cores server and client got; and what two free cores would give at this CPU
        # per request (the client's included: it runs on the same cores).
        "cores_used": round((server_ms + client_ms) * len(qs) / 1000 / wall, 2),
        "ceiling_requests_per_s_on_2_cores": round(CORES * 1000 / (server_ms + client_ms)),
        "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "by_kind": {k: percentiles(v) for k, v in sent["latencies"].items() if v},
    }
    if sent["latencies"]["raw"]:
        result["light"] = percentiles(light)
    result["_bodies"] = sent["bodies"]
    return result


def worker_processes(server: subprocess.Popen) -> list[psutil.Process]:
    """The processes answering for ``server``: its workers (``serve --workers N``, spawned by
    multiprocessing, whose resource tracker is left out), or itself when it has none."""
    parent = psutil.Process(server.pid)
    workers = []
    for child in parent.children(recursive=True):
        try:
            if "spawn_main" in " ".join(child.cmdline()):
                workers.append(child)
        except psutil.NoSuchProcess:
            continue
    return workers or [parent]


def worker_caches(base: str, server: subprocess.Popen) -> dict[int, dict[str, int]]:
    """Each worker's ``decoded_chunks`` figures, by process id, from ``/api/health`` asked
    on new connections until every worker has answered (the workers share the port)."""
    workers = {p.pid for p in worker_processes(server)}
    found: dict[int, dict[str, int]] = {}
    for _ in range(200):
        body = httpx.get(f"{base}/api/health", timeout=60).json()
        found[body["process"]] = body["decoded_chunks"]
        if workers <= set(found):
            break
    return found


def worker_memory_mib(server: subprocess.Popen, field: str) -> list[int]:
    """Each worker process's memory ``field`` of its ``/proc/PID/status`` (``VmHWM``: its
    peak resident memory so far), MiB, largest first."""
    peaks = []
    for worker in worker_processes(server):
        try:
            status = Path(f"/proc/{worker.pid}/status").read_text()
        except OSError:
            continue
        kib = next(line.split()[1] for line in status.splitlines() if line.startswith(field))
        peaks.append(round(int(kib) / 1024))
    return sorted(peaks, reverse=True)


def start_bare(port: int, workers: int, body_bytes: int) -> subprocess.Popen:
    """The HTTP floor's server (``bare_service``): serve's HTTP configuration and workers, a
    fixed body of ``body_bytes`` for every request."""
    script = Path(__file__).with_name("bare_service.py")
    command = [sys.executable, str(script), str(port), str(workers), str(body_bytes)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return answering(process, port)


def measure_server(
    cube: Path,
    sources: str,
    options: list[str],
    workers: int,
    loads: dict[str, list[Question]],
    warm_up: list[Question],
    keep: set[str],
    bare_bytes: int | None = None,
) -> dict:
    port = free_port()
    if bare_bytes is None:
        server = start_service(cube, port, workers, sources, options)
    else:
        server = start_bare(port, workers, bare_bytes)
    base = f"http://127.0.0.1:{port}"
    try:
        drive(base, server, warm_up, 16, set())  # imports, snapshots, the page cache
        return {name: drive(base, server, qs, LOADS[name][0], keep) for name, qs in loads.items()}
    finally:
        server.terminate()
        server.wait(timeout=60)


# Figures of a load given as their median over the rounds (``medians``).
MEDIAN_FIGURES = (
    "requests_per_s",
    "p50_ms",
    "p99_ms",
    "p999_ms",
    "server_cpu_ms_per_request",
    "event_loop_cpu_ms_per_request",
    "other_threads_cpu_ms_per_request",
    "event_loop_system_cpu_ms_per_request",
    "other_threads_system_cpu_ms_per_request",
    "context_switches_per_request",
    "page_faults_per_request",
    "client_cpu_ms_per_request",
    "cores_used",
    "ceiling_requests_per_s_on_2_cores",
    "decoded_chunks_kept_share",
)


def medians(rounds: list[dict]) -> dict:
    """One server's loads over its rounds: the round itself when there is one, else each
    load's ``MEDIAN_FIGURES`` as their median over the rounds, and the rounds."""
    if len(rounds) == 1:
        return rounds[0]
    return {
        load: {
            **{k: round(statistics.median(r[load][k] for r in rounds), 2) for k in MEDIAN_FIGURES},
            "rounds": [r[load] for r in rounds],
        }
        for load in rounds[0]
    }


# --------------------------------------------------------------------------------------------
# The floor: the same questions in this process


def _answer_here(snapshot, question: Question) -> bytes:
    return compute_answer(snapshot, _checked(snapshot, question)).body


def _checked(snapshot, question: Question) -> AverageRequest:
    query = parse_qsl(urlsplit(question.url).query)
    options = {k: v for k, v in query if k in ("over", "accumulation")}
    parameters = AverageParameters(**options)
    return check_average_request(snapshot, VARIABLE, parameters, query=query, max_cells=MAX_CELLS)


# The floor's stages, each timed by the process's CPU clock around it (every thread's: a
# map's chunks are read side by side in a pool): the request's check, the library's query
# (planning, reads, decoding, summing, the answer's assembly), its JSON, and the gzip of a
# large answer (``Answer.rendered``). ``compute_answer`` does the last three.
STAGES = ("check", "query", "JSON", "gzip")


def _answer_in_stages(snapshot, question: Question) -> list[float]:
    """``_answer_here``'s work, stage by stage (``STAGES``): each stage's CPU seconds."""
    clock = time.process_time
    started = clock()
    checked = _checked(snapshot, question)
    checked_at = clock()
    result = snapshot.query(checked.query, DEFAULT_MEMORY_BYTES)
    queried_at = clock()
    body = result_json_bytes(result)
    written_at = clock()
    Answer.rendered(body, MEDIA_TYPES["json"])
    done_at = clock()
    return [
        checked_at - started,
        queried_at - checked_at,
        written_at - queried_at,
        done_at - written_at,
    ]


# Where the query's profile time goes: the first of these (module path fragments or function
# names) found on a call's stack, innermost first, names its part.
PARTS = (
    ("decoding", ("numcodecs", "zarr/codecs", "decode_chunk", "partial_decode", ":_decode")),
    ("reads", ("zarr/storage", "accumulus/stores", "get_sync", "read_chunks")),
    ("summing", ("execute.py",)),
    ("planning", ("_fastest_plan", "usable_layouts", "request.py", "plan.py", "cost.py")),
)


def profile_split(snapshot, qs: list[Question]) -> dict[str, float]:
    """The share of the query's CPU by part: each function's own time given to the part of
    the innermost of its callers (or itself) that names one (``PARTS``); the rest is the
    answer's assembly ("answer"). A profile (cProfile) charges each Python call about a
    microsecond more than it costs, so it splits only the query here, where the parts'
    calls are alike; the floor's stages are timed without it (``STAGES``)."""
    checked = [_checked(snapshot, question) for question in qs]
    profiler = cProfile.Profile()
    profiler.enable()
    for request in checked:
        snapshot.query(request.query, DEFAULT_MEMORY_BYTES)
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
    memo: dict[tuple, str | None] = {}

    def own_part(func: tuple) -> str | None:
        text = f"{func[0]}:{func[2]}"
        for part, marks in PARTS:
            if any(m in text for m in marks):
                return part
        return None

    def part_of(func: tuple, depth: int = 0) -> str | None:
        if func in memo:
            return memo[func]
        memo[func] = None  # recursion guard
        part = own_part(func)
        if part is None and depth < 40:
            # The caller that spent most time calling it decides.
            callers = stats[func][4] if func in stats else {}
            if callers:
                caller = max(callers, key=lambda c: callers[c][3] if len(callers[c]) > 3 else 0)
                part = part_of(caller, depth + 1)
        memo[func] = part
        return part

    totals: dict[str, float] = {}
    for func, (_, _, own, _, _) in stats.items():
        part = part_of(func) or "answer"
        totals[part] = totals.get(part, 0.0) + own
    whole = sum(totals.values())
    return {part: round(seconds / whole, 3) for part, seconds in sorted(totals.items())}


def floor(cube: Path, qs: list[Question], warm_up: list[Question], profiled: int) -> dict:
    handle = Dataset("floor", str(cube))
    snapshot = handle.snapshot()
    # Decoded accumulation chunks kept as a worker keeps them (``serve --chunk-cache-mb``),
    # after as many questions as a worker answers before the first load: half the warm-up.
    DECODED.set_limit(default_chunk_cache_bytes([handle]))
    for question in warm_up[: len(warm_up) // 2]:  # and imports, the page cache
        _answer_here(snapshot, question)
    hits, misses = DECODED.hits, DECODED.misses
    walls, cpus, stages = [], [], []
    for question in qs:
        started = time.perf_counter()
        stages.append(_answer_in_stages(snapshot, question))
        walls.append(time.perf_counter() - started)
        cpus.append(sum(stages[-1]))
    light = [q for q in qs if q.kind != "raw"]
    return {
        "questions": len(qs),
        "wall": percentiles(walls),
        "cpu_ms_per_request_mean": round(1000 * statistics.fmean(cpus), 2),
        "cpu_ms_per_request_median": round(1000 * statistics.median(cpus), 2),
        "stages_ms_per_request_mean": _stages_ms(stages),
        "stages_ms_per_request_mean_by_kind": {
            kind: _stages_ms([s for s, q in zip(stages, qs, strict=True) if q.kind == kind])
            for kind in sorted({q.kind for q in qs})
        },
        # Reads of accumulation chunks served decoded from the process's cache.
        "decoded_chunks_kept_share": round(
            (DECODED.hits - hits) / max(1, DECODED.hits - hits + DECODED.misses - misses), 3
        ),
        "query_profile_split": profile_split(snapshot, light[:profiled]),
    }


def _stages_ms(stages: list[list[float]]) -> dict[str, float]:
    """The mean of each stage (``STAGES``), in ms."""
    return {
        stage: round(1000 * statistics.fmean(s[k] for s in stages), 3)
        for k, stage in enumerate(STAGES)
    }


def cpu_split(run: dict, floor_figures: dict) -> dict[str, float]:
    """A served request's CPU by part (ms): the floor's stages as timed, its query split as
    its profile splits it, HTTP and the hand-overs between threads the rest of the server's
    CPU per request, and the client's."""
    stages = floor_figures["stages_ms_per_request_mean"]
    query = {
        part: round(share * stages["query"], 2)
        for part, share in floor_figures["query_profile_split"].items()
    }
    return {
        "http_and_handovers": round(
            run["server_cpu_ms_per_request"] - floor_figures["cpu_ms_per_request_mean"], 2
        ),
        "check": round(stages["check"], 2),
        **query,
        "JSON": round(stages["JSON"], 2),
        "gzip": round(stages["gzip"], 2),
        "client": run["client_cpu_ms_per_request"],
    }


# --------------------------------------------------------------------------------------------
# Answers against xarray


def expected(raw: xr.DataArray, question: Question) -> xr.DataArray:
    """``question`` answered by xarray on the raw data (area weights, cos latitude)."""
    query = dict(parse_qsl(urlsplit(question.url).query))
    t0, t1 = query["time"].split("/")
    s, n = (float(v) for v in query["lat"].split("/"))
    w, e = (float(v) for v in query["lon"].split("/"))
    lon = raw["lon"].values
    inside = (lon >= w) & (lon <= e) if w <= e else (lon >= w) | (lon <= e)
    picked = raw.sel(time=slice(t0, t1), lat=slice(s, n)).isel(lon=np.flatnonzero(inside))
    weights = np.cos(np.deg2rad(picked["lat"]))
    over = query["over"].replace("lat,lon", "lat lon").split()
    return picked.weighted(weights).mean(over).compute()


def check_answers(cube: Path, bodies: dict[str, bytes], by_url: dict[str, Question]) -> dict:
    raw = xr.open_zarr(cube)[VARIABLE].astype("f8")
    worst, compared = 0.0, 0
    for url, body in bodies.items():
        answer = json.loads(body)
        values = np.array(answer["values"], dtype="f8")
        want = expected(raw, by_url[url])
        if answer["dims"] == ["lat", "lon"]:
            # Across the date line the answer's longitudes run on past 180 (as the box does).
            lon = (np.array(answer["coords"]["lon"], dtype="f8") + 180) % 360 - 180
            want = want.sel(lon=lon)
        want = want.transpose(*answer["dims"]).values
        both = np.isfinite(want) & np.isfinite(values)
        if (np.isfinite(want) != np.isfinite(values)).any():
            raise AssertionError(f"{url}: missing values differ from xarray's")
        difference = np.abs(values[both] - want[both]) / np.abs(want[both])
        worst = max(worst, float(difference.max(initial=0.0)))
        compared += 1
    if worst > 1e-9:
        raise AssertionError(f"answers differ from xarray's by {worst:.3g} (relative)")
    return {"answers_compared": compared, "largest_relative_difference": worst}


# --------------------------------------------------------------------------------------------


def chunk_cache_options(cache: str) -> list[str]:
    """``serve``'s options for a decoded-chunk cache named as ``--chunk-cache-mb`` takes it:
    ``MB``, ``MB:private`` (one a worker) or ``MB:shared``; ``default`` for serve's own
    size."""
    mb, _, kind = cache.partition(":")
    if not (mb.isdigit() or mb == "default") or kind not in ("", "private", "shared"):
        raise SystemExit(
            f"--chunk-cache-mb: {cache!r} is not MB, MB:private or MB:shared (MB: default too)"
        )
    size = [] if mb == "default" else ["--chunk-cache-mb", mb]
    return size + (["--private-chunk-cache"] if kind == "private" else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--days", type=int, default=SHAPE[0], help="a shorter cube (quick runs)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--layout", choices=list(LAYOUTS), default="issue",
        help="the accumulations served: issue 39's (time at every day) or accumulate's default "
        "(time at month ends and every 2 days)",
    )  # fmt: skip
    parser.add_argument("--requests", type=int, default=2000, help="per load")
    parser.add_argument("--loads", nargs="+", default=list(LOADS), choices=list(LOADS))
    parser.add_argument(
        "--warm-up",
        type=int,
        default=200,
        help="questions sent before the loads (half as many answered in-process before the "
        "floor): imports, the page cache, and the decoded chunks each process keeps",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="each source served this many times, in turn"
    )
    parser.add_argument("--floor-requests", type=int, default=400)
    parser.add_argument("--profiled", type=int, default=100, help="floor questions profiled")
    parser.add_argument("--check", type=int, default=24, help="answers compared with xarray")
    parser.add_argument(
        "--chunk-cache-mb",
        nargs="+",
        default=[],
        help="MB, MB:private or MB:shared (MB may be default: serve's own size): serve each "
        "source with each of these decoded-chunk caches, in turn (private: one a worker)",
    )
    parser.add_argument(
        "--sources",
        action="append",
        default=[],
        help="NAME=DIR: serve from this source tree too (default: this one's)",
    )
    parser.add_argument(
        "--bare-bytes",
        type=int,
        nargs="+",
        default=[],
        help="the HTTP floor: also serve, in each round, a bare ASGI application with serve's "
        "HTTP configuration and workers (bare_service.py), answering every request with a "
        "fixed JSON body of this many bytes",
    )
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
    args.dir.mkdir(parents=True, exist_ok=True)

    cube = prepared_cube(args.dir, args.days, args.layout)
    name = cube.name.removesuffix(".zarr")
    loads = {
        load: questions(name, args.days, args.requests, LOADS[load][1], seed=10 + k)
        for k, load in enumerate(args.loads)
    }
    if "16 clients, cache hits" in loads:  # the same few questions, over and over
        few = loads["16 clients, cache hits"][:HIT_QUESTIONS]
        loads["16 clients, cache hits"] = (few * (args.requests // len(few) + 1))[: args.requests]
    warm_up = questions(name, args.days, args.warm_up, 0.0, seed=1)
    by_url = {q.url: q for qs in loads.values() for q in qs}
    every = [q for qs in loads.values() for q in qs]
    rng = np.random.default_rng(0)
    sample = rng.choice(len(every), size=min(args.check, len(every)), replace=False)
    keep = {every[i].url for i in sample}

    here = str(Path(accumulus.__file__).parents[1])
    trees = dict(s.split("=", 1) for s in args.sources) or {"this": here}
    # Each server: a label, its source tree, serve's options, and its fixed body's size when
    # it is a bare one (the HTTP floor).
    sources: dict[str, tuple[str, list[str], int | None]] = {
        label: (tree, [], None) for label, tree in trees.items()
    }
    if args.chunk_cache_mb:
        sources = {
            (f"{label}, " if len(trees) > 1 else "") + f"{cache} MB": (
                tree,
                chunk_cache_options(cache),
                None,
            )
            for label, tree in trees.items()
            for cache in args.chunk_cache_mb
        }
    sources |= {f"bare, {size} B": (here, [], size) for size in args.bare_bytes}
    rounds: dict[str, list[dict]] = {label: [] for label in sources}
    bodies: dict[str, dict[str, bytes]] = {label: {} for label in sources}
    for _ in range(args.rounds):
        for label, (tree, options, bare) in sources.items():
            runs = measure_server(
                cube, str(Path(tree).resolve()), options, args.workers, loads, warm_up, keep, bare
            )
            for run in runs.values():
                bodies[label].update(run.pop("_bodies"))
            rounds[label].append(runs)
    checks = {}
    for label in (label for label, source in sources.items() if source[2] is None):
        try:
            checks[label] = check_answers(cube, bodies[label], by_url)
        except (AssertionError, KeyError, ValueError) as failed:  # reported with the figures
            checks[label] = {"failed": repr(failed)}
    servers = {label: medians(runs) for label, runs in rounds.items()}
    floor_questions = loads[args.loads[0]][: args.floor_requests]
    floor_figures = floor(cube, floor_questions, warm_up, args.profiled)
    for label, runs in servers.items():
        for load, run in runs.items():
            if sources[label][2] is None and LOADS[load][1] == 0 and not load.endswith("hits"):
                run["cpu_split_ms_per_request"] = cpu_split(run, floor_figures)
    report = {
        "benchmark": "service under load: unique random requests, accumulus serve --workers "
        f"{args.workers} (issue 39)",
        "cube": {"store": str(cube), "shape": [args.days, *SHAPE[1:]], "chunks": list(CHUNKS)},
        "accumulations": {"layout": args.layout, "accumulate_options": LAYOUTS[args.layout][0]},
        "client": "aiohttp in one asyncio process on the same cores (keep-alive)",
        "servers": servers,
        "floor_in_process": floor_figures,
        "checked_against_xarray": checks,
        "cpu_count": os.cpu_count(),
    }
    (a, ra), *others = servers.items()
    for b, rb in others:
        report[f"{b}_over_{a}"] = {
            load: {
                "requests_per_s": round(rb[load]["requests_per_s"] / ra[load]["requests_per_s"], 2),
                "p50": round(rb[load]["p50_ms"] / ra[load]["p50_ms"], 2),
                "p99": round(rb[load]["p99_ms"] / ra[load]["p99_ms"], 2),
                "server_cpu_per_request": round(
                    rb[load]["server_cpu_ms_per_request"] / ra[load]["server_cpu_ms_per_request"], 2
                ),
            }
            for load in ra
        }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
