"""``serve``: the HTTP API and the web page (``accumulus.service``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from accumulus.cli.options import (
    AllowReferences,
    EndpointUrl,
    StorageOption,
    group_option,
    reading,
)


def serve(
    stores: list[str] = typer.Argument(
        ...,
        help="Cubes to serve (paths or URLs); each is a dataset named by its base name. A "
        "sidecar (accumulate --into) is served for the source it names.",
    ),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to bind (loopback unless you say otherwise)."
    ),
    workers: int = typer.Option(
        1,
        "--workers",
        min=1,
        help="Processes answering on the port, e.g. one per core. Each has its own cache and "
        "limits (--computations, --memory-mb, --cache-mb hold per process).",
    ),
    max_cells: int = typer.Option(
        None, "--max-cells", min=1, help="Refuse answers with more values (default 2000000)."
    ),
    cache_mb: int = typer.Option(256, "--cache-mb", min=0, help="Memory for cached answers."),
    computations: int = typer.Option(
        2, "--computations", min=1, help="Answers computed at once; others wait, then get 503."
    ),
    scans: int = typer.Option(
        1,
        "--scans",
        min=1,
        help="Answers no accumulation can give (full scans) computed at once, queued apart "
        "from the others, which never wait behind them.",
    ),
    memory_mb: int = typer.Option(  # budget.DEFAULT_MEMORY_BYTES (not imported: zarr)
        512, "--memory-mb", min=16, help="Memory one computation's raw reads may hold."
    ),
    queue_seconds: float = typer.Option(
        10.0, "--queue-seconds", min=0.1, help="How long a request waits for a computation."
    ),
    request_seconds: float = typer.Option(
        60.0, "--request-seconds", min=0.1, help="Longest computation (then 504)."
    ),
    group: Annotated[
        str | None,
        group_option("Group of each cube to serve; default: the one group holding data variables."),
    ] = None,
    endpoint_url: EndpointUrl = None,
    storage_option: StorageOption = None,
    accumulations: list[str] = typer.Option(
        None,
        "--accumulations",
        help="Read each cube's accumulations from this sidecar store (once per cube, in order).",
    ),
    allow_references: AllowReferences = None,
    ref: list[str] = typer.Option(
        None,
        "--ref",
        help="Of icechunk repositories: a branch, tag or snapshot id to serve, one dataset "
        "each, named NAME@REF (repeatable; default: branch main, followed as it grows).",
    ),
    allowed_host: list[str] = typer.Option(
        None,
        "--allowed-host",
        help="A Host name clients reach the service by, besides the loopback names and "
        "--host (repeatable; *.example.org for subdomains, * for any): others get 400.",
    ),
    access_log: bool = typer.Option(
        False, "--access-log", help="Log a line per request (costs CPU under load)."
    ),
) -> None:
    """Serve the HTTP API and the web page: area-averaged time series and time-averaged maps."""
    from accumulus.service import serve as run_service
    from accumulus.service.guard import ServiceLimits

    cells: dict[str, Any] = {"max_cells": max_cells} if max_cells else {}
    run_service(
        stores,
        host=host,
        port=port,
        workers=workers,
        access_log=access_log,
        cache_bytes=cache_mb * 2**20,
        limits=ServiceLimits(
            computations=computations,
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
