"""``expire``: an icechunk repository's old snapshots expired and the objects only they
read deleted, so that a daily loop's repository stays small."""

from __future__ import annotations

import datetime
from typing import Annotated

import typer

from accumulus.cli.console import console, size_text
from accumulus.cli.options import EndpointUrl, StorageOption, duration, option, storage_options


def expire(
    store: Annotated[
        str, typer.Argument(help="Repository URL (icechunk://PATH, icechunk+s3://BUCKET/PREFIX).")
    ],
    older_than: Annotated[
        str,
        option(
            "--older-than",
            "Expire snapshots written longer ago than this: 7d, 12h, 30m, 2w (branch "
            "tips and tags are kept).",
        ),
    ],
    endpoint_url: EndpointUrl = None,
    storage_option: StorageOption = None,
) -> None:
    """Expire an icechunk repository's snapshots older than --older-than and delete the
    chunks, manifests and snapshots no kept snapshot reads. Run it when no append is under
    way, or with a bound longer than an append takes."""
    from accumulus.stores.transactional import expire as expire_snapshots

    age = duration(older_than, "--older-than")
    cut = datetime.datetime.now(datetime.UTC) - age
    options = storage_options(endpoint_url, storage_option)
    done = expire_snapshots(store, cut, options)
    console.print(
        f"expired {done.snapshots} snapshot(s) written before "
        f"{cut:%Y-%m-%d %H:%M:%S} UTC; deleted {done.objects} object(s), "
        f"{size_text(done.bytes)}",
        highlight=False,
    )
