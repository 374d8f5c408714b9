"""The options several commands share, written once, and the parsing of option text
(``key=value`` pairs, positive sizes, storage options)."""

from __future__ import annotations

import datetime
import functools
import inspect
import re
from collections.abc import Callable, Sequence
from typing import Annotated, Any

import typer

from accumulus.errors import AccumulusError


def option(
    flag: str, help_text: str, minimum: float | None = None, maximum: float | None = None
) -> Any:
    """An option by its flag and help, with the smallest (and largest) number it takes where
    it is a limit: the commands' options in one shape."""
    return typer.Option(flag, min=minimum, max=maximum, help=help_text)


# How a command reaches a store: the S3 endpoint and fsspec options (see ``storage_options``),
# and where the reference sets it opens (the store, a sidecar's source, a granule) may read
# besides their own location.
EndpointUrl = Annotated[str | None, option("--endpoint-url", "S3 endpoint for s3:// URLs.")]
StorageOption = Annotated[
    list[str] | None,
    option("--storage-option", "KEY=VALUE passed to fsspec, e.g. anon=true (repeatable)."),
]
AllowReferences = Annotated[
    list[str] | None,
    option(
        "--allow-references",
        "A reference set (.json, .parq) may read chunks under this directory or URL "
        "prefix besides its own location, e.g. /data/granules or https://host/data/ "
        "(repeatable).",
    ),
]


# Which commit of an icechunk repository a command reads (or which branch it writes).
Ref = Annotated[
    str | None,
    option(
        "--ref",
        "Of an icechunk repository (icechunk://, icechunk+s3://): a branch, tag or "
        "snapshot id (default: branch main).",
    ),
]


def group_option(what: str) -> Any:
    """``--group``, described for the command that takes it."""
    return typer.Option("--group", help=what)


CubeGroup = Annotated[
    str | None,
    group_option("Group of the cube (e.g. Grid); default: the one group holding the variable."),
]
# Of a command that names no variable (inspect).
DataGroup = Annotated[
    str | None, group_option("Group of the cube; default: the one group holding data.")
]
Scheduler = Annotated[
    str | None,
    option("--scheduler", "threads (default), processes, or tcp://host:port (distributed)."),
]


Store = Annotated[str, typer.Argument(help="Cube path or URL.")]


def reaching_stores(command: Callable[..., None]) -> Callable[..., None]:
    """``command`` with the options of how it reaches its stores (``--endpoint-url``,
    ``--storage-option``, ``--allow-references``, ``--ref``), declared here once and handed
    to it as ``source``: the keywords of ``api`` that ``reading`` makes of them."""
    own = inspect.signature(command, eval_str=True)
    added = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=kind)
        for name, kind in (
            ("endpoint_url", EndpointUrl),
            ("storage_option", StorageOption),
            ("allow_references", AllowReferences),
            ("ref", Ref),
        )
    ]

    @functools.wraps(command)
    def with_source(**given: Any) -> None:
        source = reading(
            given.pop("endpoint_url"),
            given.pop("storage_option"),
            given.pop("allow_references"),
            given.pop("ref"),
        )
        command(**given, source=source)

    kept = [p for name, p in own.parameters.items() if name != "source"]
    with_source.__signature__ = own.replace(parameters=[*kept, *added])  # type: ignore[attr-defined]
    return with_source


def reading(
    endpoint_url: str | None,
    storage_option: Sequence[str] | None,
    allow_references: Sequence[str] | None,
    ref: str | None = None,
) -> dict[str, Any]:
    """The keywords of ``api`` for how a command reaches its stores, from the options above:
    ``storage_options`` (fsspec's, with ``--endpoint-url``), ``allow_references`` and, when
    given, the ``ref`` of an icechunk repository."""
    keywords = {
        "storage_options": storage_options(endpoint_url, storage_option),
        "allow_references": list(allow_references or []) or None,
    }
    return keywords if ref is None else {**keywords, "ref": ref}


def storage_options(endpoint_url: str | None, items: Sequence[str] | None) -> dict | None:
    """The fsspec options of ``--storage-option`` and ``--endpoint-url``; None for none."""
    from accumulus.stores.locations import parse_storage_options

    options = parse_storage_options(list(items or []))
    if endpoint_url:
        options["endpoint_url"] = endpoint_url
    return options or None


def pairs(items: Sequence[str], what: str) -> dict[str, str]:
    """Repeated ``key=value`` options as a dictionary."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise AccumulusError(f"{what} must look like dim=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def positive_int(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise AccumulusError(f"{what} must be a positive integer, got {text!r}") from None
    if value < 1:
        raise AccumulusError(f"{what} must be a positive integer, got {value}")
    return value


def dimension_sizes(items: Sequence[str] | None, what: str) -> dict[str, int]:
    """``dim=size`` options (repeatable, or several in one: ``time=40,lat=90``)."""
    found = [item for text in items or [] for item in text.split(",") if item.strip()]
    return {d: positive_int(n, f"{what} {d}") for d, n in pairs(found, what).items()}


# A duration: a number and its unit (seconds, minutes, hours, days, weeks).
_DURATION = re.compile(r"(\d+(?:\.\d*)?)\s*([smhdw])")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration(text: str, what: str) -> datetime.timedelta:
    """A duration written as a number and a unit: ``7d``, ``12h``, ``30m``, ``90s``, ``2w``."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None:
        raise AccumulusError(
            f"{what} must be a duration such as 7d, 12h, 30m, 90s or 2w, got {text!r}"
        )
    seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if seconds > 1e10:  # 317 years: past any archive (and datetime has no year 0)
        raise AccumulusError(f"{what} {text!r} is longer than any archive has existed")
    return datetime.timedelta(seconds=seconds)
