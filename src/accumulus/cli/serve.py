"""``serve``: the HTTP API and the web page (``accumulus.service``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from accumulus.cli.options import (
    AllowReferences,
    EndpointUrl,
    StorageOption,
    group_option,
    option,
    reading,
)


def serve(
    stores: Annotated[
        list[str],
        typer.Argument(
            help="Cubes to serve (paths or URLs); each is a dataset named by its base name. A "
            "sidecar (accumulate --into) is served for the source it names."
        ),
    ],
    port: Annotated[int, option("--port", "TCP port (0: any free one).", 0, 65535)] = 8000,
    host: Annotated[
        str, option("--host", "Address to bind (loopback unless you say otherwise).")
    ] = "127.0.0.1",
    workers: Annotated[
        int,
        option(
            "--workers",
            "Processes answering on the port, e.g. one per core. Each has its own cache and "
            "limits (--computations, --memory-mb, --cache-mb hold per process); they share "
            "their decoded chunks (--chunk-cache-mb) unless --private-chunk-cache.",
            1,
        ),
    ] = 1,
    max_cells: Annotated[
        int | None, option("--max-cells", "Refuse answers with more values (default 2000000).", 1)
    ] = None,
    cache_mb: Annotated[int, option("--cache-mb", "Memory for cached answers.", 0)] = 256,
    chunk_cache_mb: Annotated[
        int | None,
        option(
            "--chunk-cache-mb",
            "Memory for decoded accumulation chunks kept for later questions (0: none): for "
            "all the --workers together, as files in /dev/shm that each maps (held once, "
            "whatever the workers), or per process with one worker or --private-chunk-cache. "
            "Held only as questions read them. Default: room for all of the served stores' "
            "accumulation chunks decoded, at most a quarter of the machine's memory for all "
            "the workers (a ten-year daily 1-degree cube's default accumulations: 3.5 GiB), "
            "worked out again as the stores change.",
            0,
        ),
    ] = None,
    private_chunk_cache: Annotated[
        bool,
        option(
            "--private-chunk-cache",
            "With --workers, each worker keeps its own decoded chunks (--chunk-cache-mb "
            "each) instead of sharing them. Also where /dev/shm lacks the room.",
        ),
    ] = False,
    computations: Annotated[
        int | None,
        option(
            "--computations",
            "Answers computed at once per process; others wait, then get 503 (default 2; 1 "
            "per process with --workers).",
            1,
        ),
    ] = None,
    scans: Annotated[
        int,
        option(
            "--scans",
            "Answers no accumulation can give (full scans) computed at once, queued apart "
            "from the others, which never wait behind them.",
            1,
        ),
    ] = 1,
    memory_mb: Annotated[
        int, option("--memory-mb", "Memory one computation's raw reads may hold.", 16)
    ] = 512,  # budget.DEFAULT_MEMORY_BYTES (not imported: zarr)
    queue_seconds: Annotated[
        float, option("--queue-seconds", "How long a request waits for a computation.", 0.1)
    ] = 10.0,
    request_seconds: Annotated[
        float, option("--request-seconds", "Longest computation (then 504).", 0.1)
    ] = 60.0,
    group: Annotated[
        str | None,
        group_option("Group of each cube to serve; default: the one group holding data variables."),
    ] = None,
    endpoint_url: EndpointUrl = None,
    storage_option: StorageOption = None,
    accumulations: Annotated[
        list[str] | None,
        option(
            "--accumulations",
            "Read each cube's accumulations from this sidecar store (once per cube, in order).",
        ),
    ] = None,
    allow_references: AllowReferences = None,
    ref: Annotated[
        list[str] | None,
        option(
            "--ref",
            "Of icechunk repositories: a branch, tag or snapshot id to serve, one dataset "
            "each, named NAME@REF (repeatable; default: branch main, followed as it grows).",
        ),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        option(
            "--allowed-host",
            "A Host name clients reach the service by, besides the loopback names and "
            "--host (repeatable; *.example.org for subdomains, * for any): others get 400.",
        ),
    ] = None,
    access_log: Annotated[
        bool, option("--access-log", "Log a line per request (costs CPU under load).")
    ] = False,
) -> None:
    """Serve the HTTP API and the web page: area-averaged time series and time-averaged maps."""
    from accumulus.service import serve as run_service
    from accumulus.service.guard import ServiceLimits
    from accumulus.service.server import default_computations

    cells: dict[str, Any] = {"max_cells": max_cells} if max_cells else {}
    run_service(
        stores,
        host=host,
        port=port,
        workers=workers,
        access_log=access_log,
        share_chunks=not private_chunk_cache,
        cache_bytes=cache_mb * 2**20,
        chunk_cache_bytes=None if chunk_cache_mb is None else chunk_cache_mb * 2**20,
        limits=ServiceLimits(
            computations=default_computations(workers) if computations is None else computations,
            scans=scans,
            queue_seconds=queue_seconds,
            request_seconds=request_seconds,
            memory_bytes=memory_mb * 2**20,
        ),
        group=group,
        accumulations=accumulations or None,
        allowed_hosts=allowed_host or (),
        refs=ref or None,
        **cells,
        **reading(endpoint_url, storage_option, allow_references),
    )
