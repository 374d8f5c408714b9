"""Kerchunk reference sets (a JSON file or a Parquet directory) as read-only Zarr stores,
through fsspec's ``ReferenceFileSystem``, reading only what the set may read.

fsspec resolves a chunk key to its reference; every reference is checked when it is read,
before a byte of its target is (``reference_targets``: the locations the set may read,
never ``/proc``, ``/dev`` or ``/sys``). A Parquet set's references are loaded a record at a
time as chunks are read, and each is checked then like a JSON set's. One reference reads at
most what its array's chunk holds decoded (declared shape × dtype) plus what a codec may
add, which the query's memory bounds in turn (``chunk_reader``). Local targets are read by
``safe_reads.read_file_range`` (regular files only, opened without blocking); remote ones by
fsspec's filesystem of their protocol, given the storage options only where they were given
for (``ReferenceTargets.gets_options``), over HTTP without following redirects (a redirect
could lead anywhere). Errors name the reference's key and a reason, never its target.
"""

from __future__ import annotations

import asyncio
import json
import numbers
from collections.abc import Iterable, Mapping, Sequence
from math import prod
from typing import Any

import fsspec
import zarr
from fsspec.asyn import AsyncFileSystem
from fsspec.core import split_protocol
from fsspec.implementations.reference import LazyReferenceMapper, ReferenceFileSystem
from zarr.core.chunk_grids import ChunkGrid, FixedDimension
from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata
from zarr.storage import FsspecStore

from accumulus.errors import AccumulusError
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.locations import StoreNotFoundError, file_options, reason
from accumulus.stores.reference_targets import ReferenceRefused, ReferenceTargets, Target
from accumulus.stores.safe_reads import NotRegularFile, read_file_range, regular_file_size

# What a codec may add to a chunk's decoded bytes (headers, checksums, a shard's index, a
# block that does not compress): a reference may read this much more than its chunk holds.
CODEC_SLACK_SHARE = 64
CODEC_SLACK_BYTES = 64 * 2**10
# The most a reference to anything but a chunk of an array with fixed-size values (a
# metadata document, a chunk of strings) may read.
UNSIZED_LIMIT = 64 * 2**20
_TARGETS_KEPT = 4096


def open_reference_file(
    url: str, storage_options: dict[str, Any] | None, allow_references: Iterable[str] = ()
) -> FsspecStore:
    """The reference set at ``url`` (a ``.json`` file, or a ``.parq``/``.parquet``
    directory) as a read-only zarr store, reading where ``ReferenceTargets`` allows with
    ``allow_references``."""
    if is_parquet_references(url):
        references = open_parquet_references(url, storage_options)
        if references is None:
            raise StoreNotFoundError(f"store not found: {url} (no Parquet reference set there)")
        return open_reference_store(references, url, storage_options, allow_references)
    try:
        with fsspec.open(url, "rb", **file_options(url, storage_options)) as file:
            document = json.load(file)
    except FileNotFoundError:
        raise StoreNotFoundError(f"store not found: {url} (no such reference file)") from None
    except ValueError as exc:
        raise AccumulusError(f"{url}: not a reference file (invalid JSON: {exc})") from None
    except Exception as exc:  # fsspec's filesystems' (OSError, aiohttp's, botocore's)
        raise AccumulusError(f"cannot read {url}: {reason(exc)}") from None
    return open_reference_store(document, url, storage_options, allow_references)


def is_parquet_references(url: str) -> bool:
    """True for a Parquet reference set: a directory named ``*.parq`` or ``*.parquet``, the
    names fsspec's reference filesystem reads as one."""
    return url.rstrip("/").endswith((".parq", ".parquet"))


# fsspec's reference filesystem reads Parquet reference sets with this engine; so does
# accumulus, so that what it checks is what xarray users get.
PARQUET_ENGINE = "fastparquet"


def open_parquet_references(url: str, storage_options: dict[str, Any] | None) -> Any | None:
    """The lazy reference mapping (fsspec's ``LazyReferenceMapper``) of the Parquet
    reference set at ``url``, or None when there is none."""
    try:
        fs, root = fsspec.url_to_fs(url, **file_options(url, storage_options))
        if not fs.exists(f"{root.rstrip('/')}/.zmetadata"):
            return None
        mapper = LazyReferenceMapper(root.rstrip("/"), fs=fs, engine=PARQUET_ENGINE)
        mapper.setup()
    except ValueError as exc:
        raise AccumulusError(f"{url}: not a Parquet reference set ({reason(exc)})") from None
    except Exception as exc:  # fsspec's filesystems' and fastparquet's
        raise AccumulusError(f"cannot read {url}: {reason(exc)}") from None
    if not isinstance(mapper.zmetadata, dict):
        raise AccumulusError(f"{url}: not a Parquet reference set (no metadata in .zmetadata)")
    return mapper


def open_reference_store(
    references: Any,
    location: str,
    storage_options: dict[str, Any] | None = None,
    allow_references: Iterable[str] = (),
) -> FsspecStore:
    """A read-only zarr store over a kerchunk reference set found at ``location``: a JSON
    document (version 1, or the bare key -> reference mapping of version 0) or a Parquet
    set's lazy mapping (fsspec's ``LazyReferenceMapper``)."""
    lazy = isinstance(references, LazyReferenceMapper)
    refs = references if lazy else _json_refs(references)
    if refs is None:
        raise AccumulusError(f"{location}: not a kerchunk reference set")
    recorded = virtual_granules(references.zmetadata if lazy else _root_documents(refs))
    targets = ReferenceTargets.for_set(location, recorded, allow_references)
    if not lazy:  # fsspec lists a JSON set's keys from every reference: each must be one
        for key, reference in refs.items():
            if isinstance(reference, list) and not _well_formed(reference):
                raise _malformed(targets, key)
    try:
        fs = CheckedReferenceFileSystem(references, targets, storage_options)
    except Exception as exc:  # fsspec's ReferenceFileSystem on a set it cannot take
        raise AccumulusError(f"{location}: not a kerchunk reference set ({reason(exc)})") from None
    return FsspecStore(fs, read_only=True, path="")


def _json_refs(document: Any) -> dict[str, Any] | None:
    refs = document.get("refs", document) if isinstance(document, dict) else None
    return refs if isinstance(refs, dict) else None


def _root_documents(refs: Mapping[str, Any]) -> dict[str, Any]:
    """The root attribute documents of a JSON set, parsed."""
    found = {}
    for key in (".zattrs", "zarr.json"):
        document = _parsed(refs.get(key))
        if document is not None:
            found[key] = document
    return found


def virtual_granules(documents: Mapping[str, Any]) -> list[str] | None:
    """The granule URLs an accumulus virtual cube records in its root attributes
    (``accumulus.virtual.granules``, see ``ingest.virtual``), None when it records none."""
    root = documents.get("zarr.json", {}).get("attributes") or documents.get(".zattrs") or {}
    settings = root.get("accumulus") if isinstance(root, dict) else None
    virtual = settings.get("virtual") if isinstance(settings, dict) else None
    granules = virtual.get("granules") if isinstance(virtual, dict) else None
    if not isinstance(granules, list):
        return None
    return [g["url"] for g in granules if isinstance(g, dict) and isinstance(g.get("url"), str)]


class CheckedReferenceFileSystem(ReferenceFileSystem):
    """fsspec's reference filesystem, each reference checked and bounded when it is read
    (see the module's docstring)."""

    def __init__(
        self,
        references: Any,
        targets: ReferenceTargets,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        self.targets = targets
        # Not ``storage_options``: fsspec keeps a filesystem's own options under that name.
        self.target_options = storage_options
        self._local = LocalTargetFiles(asynchronous=True)
        self._remote: dict[tuple[str, bool], AsyncFileSystem] = {}
        self._limits: dict[str, int] = {}
        # A set names few files (its granules) in many references: each is resolved (links
        # followed) and checked once.
        self._targets: dict[str, Target] = {}
        # Only checked targets reach a filesystem: local ones this module's, remote ones
        # those ``_filesystem`` makes (fsspec would make one per protocol it finds).
        files = {None: self._local, "file": self._local, "local": self._local}
        super().__init__(references, fs=files, asynchronous=True)

    def _cat_common(self, path: str, start: int | None = None, end: int | None = None):
        part, first, last = self._checked(self._strip_protocol(path), start, end)
        return (part.url if isinstance(part, Target) else part), first, last

    def _checked(
        self, key: str, start: int | None = None, end: int | None = None
    ) -> tuple[bytes | Target, int | None, int | None]:
        """The inline bytes, or the checked target, of reference ``key``, and the part of
        it asked for (fsspec's arithmetic)."""
        try:
            reference = self.references[key]
        except KeyError as exc:
            raise FileNotFoundError(key) from exc  # a missing key: zarr's fill value
        if isinstance(reference, list | tuple) and not _well_formed(reference):
            raise _malformed(self.targets, key)
        part, first, last = super()._cat_common(key, start, end)
        if isinstance(part, bytes):
            return part, first, last
        target = self._targets.get(part) if isinstance(part, str) else None
        if target is None:
            target = self.targets.resolve(key, part)
            if len(self._targets) >= _TARGETS_KEPT:
                self._targets.clear()
            self._targets[part] = target
        return target, first, last

    async def _cat_file(self, path: str, start: int | None = None, end: int | None = None, **kw):
        key = self._strip_protocol(path)
        part, first, last = self._checked(key, start, end)
        if isinstance(part, bytes):
            return part[start:end]
        limit = self._limit(key)
        if last is None and (first or 0) >= 0:  # to the end of a file: a byte past the limit
            first = first or 0  # tells whether it holds more than its chunk can
            last = first + limit + 1
        else:
            span = _span(first, last)
            if span is None:
                raise self.targets.refused(key, "is asked for a byte range it cannot bound")
            if span > limit:
                raise self._too_large(key, span, limit)
        try:
            data = await self._filesystem(part)._cat_file(part.url, start=first, end=last)
        except Exception as exc:  # the target's filesystem's (OSError, aiohttp's, botocore's)
            raise self.targets.refused(key, f"cannot be read ({_public_reason(exc)})") from None
        if len(data) > limit:
            raise self._too_large(key, len(data), limit)
        return data

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        key = self._strip_protocol(path)
        reference = self.references.get(key)
        if not (isinstance(reference, list | tuple) and len(reference) == 1):
            return await super()._info(path, **kwargs)
        # A whole file: its size is asked of the filesystem it is read from.
        part, _, _ = self._checked(key)
        assert isinstance(part, Target)
        try:
            size = await self._filesystem(part)._size(part.url)
        except Exception as exc:  # the target's filesystem's (OSError, aiohttp's, botocore's)
            raise self.targets.refused(key, f"cannot be read ({_public_reason(exc)})") from None
        return {"name": key, "type": "file", "size": size}

    def _filesystem(self, target: Target) -> AsyncFileSystem:
        if target.local:
            return self._local
        protocol = split_protocol(target.url)[0]
        given = self.targets.gets_options(target)
        fs = self._remote.get((protocol, given))
        if fs is None:
            options = file_options(target.url, self.target_options) if given else {}
            if protocol in ("http", "https"):
                # aiohttp raises at the first redirect (followed, it could lead anywhere)
                options["max_redirects"] = 1
            fs = fsspec.filesystem(protocol, asynchronous=True, **options)
            self._remote[(protocol, given)] = fs
        return fs

    def _limit(self, key: str) -> int:
        """The most reference ``key`` may read: its array's decoded chunk and a codec's
        slack, or ``UNSIZED_LIMIT``."""
        array = key.rpartition("/")[0]
        if is_metadata_key(key):
            return UNSIZED_LIMIT
        limit = self._limits.get(array)
        if limit is None:
            decoded = _decoded_chunk_bytes(self.references, array)
            limit = UNSIZED_LIMIT
            if decoded is not None:
                limit = decoded + decoded // CODEC_SLACK_SHARE + CODEC_SLACK_BYTES
            self._limits[array] = limit
        return limit

    def _too_large(self, key: str, size: int, limit: int) -> ReferenceRefused:
        return self.targets.refused(
            key, f"reads {size} bytes, more than its chunk can hold ({limit} bytes at most)"
        )


class LocalTargetFiles(AsyncFileSystem):
    """Byte ranges of local files named by references (paths already resolved and
    checked): regular files only, opened without blocking (``safe_reads``)."""

    protocol = "file"
    cachable = False

    async def _cat_file(self, path: str, start: int | None = None, end: int | None = None, **kw):
        return await asyncio.to_thread(read_file_range, path, start, end)

    async def _info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        size = await asyncio.to_thread(regular_file_size, path)
        return {"name": path, "type": "file", "size": size}


def _malformed(targets: ReferenceTargets, key: str) -> ReferenceRefused:
    return targets.refused(
        key, "is malformed (a reference is [URL] or [URL, offset, size], both >= 0)"
    )


def _well_formed(reference: Sequence[Any]) -> bool:
    if len(reference) == 1:
        return True
    return len(reference) == 3 and _count(reference[1]) and _count(reference[2])


def _count(value: Any) -> bool:
    """A byte offset or size: an integer >= 0 (JSON's are ints, Parquet's NumPy's)."""
    if type(value) is not int and (
        not isinstance(value, numbers.Integral) or isinstance(value, bool)
    ):
        return False
    return bool(value >= 0)  # type: ignore[operator]  # an int or a NumPy integer here


def _span(first: int | None, last: int | None) -> int | None:
    """The most bytes a read of ``[first, last)`` can return whatever the file's size
    (positions counted from its end when negative, as in a slice); None when that depends
    on the size."""
    start = first or 0
    if start < 0:  # from ``-start`` bytes before the end
        return -start if last is None or last >= 0 else max(0, last - start)
    if last is None or last < 0:
        return None
    return max(0, last - start)


def _decoded_chunk_bytes(references: Any, array: str) -> int | None:
    """The largest chunk of ``array`` decoded (its declared shape × its dtype's size), from
    its metadata in the set; None where that is unknown (no metadata, values of variable
    size)."""
    prefix = f"{array}/" if array else ""
    for name in ("zarr.json", ".zarray"):  # a v3 Parquet set's .zarray only gives fsspec a grid
        try:
            document = _parsed(references.get(prefix + name))
            if document is None:
                continue
            metadata: ArrayV2Metadata | ArrayV3Metadata
            with zarr.config.set({"array.rectilinear_chunks": True}):
                if name == "zarr.json":
                    metadata = ArrayV3Metadata.from_dict(document)
                else:
                    metadata = ArrayV2Metadata.from_dict(document)
                grid = ChunkGrid.from_metadata(metadata)
            dtype = metadata.dtype.to_native_dtype()
        except Exception:  # zarr's parsing errors: not metadata zarr reads, nor its chunks
            continue
        if dtype.kind in "OT":
            return None
        edges = [
            d.size if isinstance(d, FixedDimension) else max(d.edges)  # type: ignore[attr-defined]
            for d in grid.dimensions  # rectilinear (VaryingDimension) otherwise: it has edges
        ]
        return prod(edges) * dtype.itemsize
    return None


def _parsed(value: Any) -> dict[str, Any] | None:
    """A metadata document given as JSON text, bytes or a mapping."""
    try:
        if isinstance(value, bytes | str):
            value = json.loads(value)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _public_reason(exc: BaseException) -> str:
    """Why a target could not be read, without its path or URL."""
    if isinstance(exc, NotRegularFile):
        return "not a regular file: a FIFO, socket, device or directory is never read"
    if isinstance(exc, FileNotFoundError):
        return "no such file"
    if isinstance(exc, PermissionError):
        return "permission denied"
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return "timed out"
    if isinstance(exc, ValueError) and str(exc).startswith("Protocol not known"):
        return "its protocol is not one fsspec knows"
    name = type(exc).__name__
    if name == "TooManyRedirects":
        return "redirected; references are not followed across redirects"
    status = getattr(exc, "status", None)
    if isinstance(status, int):
        return f"HTTP {status}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if any(c.__name__ == "ClientConnectionError" for c in type(exc).__mro__):
        return "connection failed"
    return name
