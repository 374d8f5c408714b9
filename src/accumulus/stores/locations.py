"""Where a store is: what a user types to name one, the options fsspec gets for it, and what
a remote store's errors say in one line.

A store is named by a directory, ``file://``, a ``.zip`` file, ``memory://name``, a reference
set (``.json``, ``.parq``) or any URL fsspec opens (``s3://bucket/prefix``, ``https://``);
``stores.opening`` turns the name into a zarr ``Store``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from accumulus.errors import AccumulusError


class StoreNotFoundError(AccumulusError):
    """The store a user named does not exist."""


def local_path(url: str | os.PathLike[str]) -> Path | None:
    """The local path a store URL names (a plain path or ``file://``), None for other URLs."""
    text = os.fspath(url)
    if url_scheme(text) not in ("", "file"):
        return None
    return Path(text.removeprefix("file://")).expanduser()


def url_scheme(text: str) -> str:
    """The scheme of a URL ("s3", "https", …), or "" for a plain path."""
    scheme, sep, _ = text.partition("://")
    return scheme.lower() if sep and scheme.replace("+", "").isalnum() else ""


def parse_storage_options(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` texts (the CLI's ``--storage-option``) as fsspec storage options.

    Values are read as JSON when they parse (``true``, ``3``, ``{"a": 1}``), else kept as
    text; a dotted key (``client_kwargs.region_name=us-west-2``) builds a nested option."""
    options: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
            raise AccumulusError(f"--storage-option must look like KEY=VALUE, got {item!r}")
        try:
            value = json.loads(text.lower() if text.lower() in ("true", "false") else text)
        except ValueError:
            value = text
        *parents, leaf = key.strip().split(".")
        node = options
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise AccumulusError(f"--storage-option {item!r}: {part!r} is already a value")
            node = child
        node[leaf] = value
    return options


def file_options(url: str, storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """``storage_options`` as fsspec takes them for one file of ``url``'s protocol."""
    if not url_scheme(url) or url_scheme(url) == "file":
        return {}
    options = dict(storage_options or {})
    if url_scheme(url) in ("s3", "s3a"):
        endpoint = options.pop("endpoint_url", None) or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint:
            options.setdefault("client_kwargs", {})["endpoint_url"] = endpoint
    return options


def reason(exc: BaseException) -> str:
    """One line saying why a remote request failed, without internal class names."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, ValueError) and text.startswith("Protocol not known"):
        return f"{text} (not a scheme fsspec knows)"
    return text or type(exc).__name__


@contextmanager
def remote_errors(label: str) -> Iterator[None]:
    """Turn what a store raises while it is read (connection refused, 403, timeouts) into a
    one-line ``AccumulusError`` naming ``label``. User mistakes pass through unchanged."""
    try:
        yield
    except AccumulusError:
        raise
    except PermissionError as exc:
        raise AccumulusError(f"{label}: access denied ({reason(exc)})") from None
    except (OSError, TimeoutError) as exc:
        raise AccumulusError(f"cannot read {label}: {reason(exc)}") from None
    except Exception as exc:  # aiohttp's and botocore's client errors; others pass on
        if _is_client_error(exc):
            raise AccumulusError(f"cannot read {label}: {reason(exc)}") from None
        raise


def _is_client_error(exc: BaseException) -> bool:
    """aiohttp's errors (HTTP stores) and botocore's (S3: no credentials, a bad endpoint),
    without importing either for local work."""
    return any(c.__module__.split(".")[0] in _CLIENT_MODULES for c in type(exc).__mro__)


_CLIENT_MODULES = frozenset({"aiohttp", "botocore", "aiobotocore"})
