"""Answering a checked average request: the library's query, rendered as JSON, CSV or PNG
exactly as ``accumulus average --json/--csv/--png`` renders it, and a large text answer (a
map) compressed as well, once, for the clients that accept gzip."""

from __future__ import annotations

from dataclasses import dataclass, replace

from isal import igzip_lib

from accumulus.accumulation.query.budget import DEFAULT_MEMORY_BYTES
from accumulus.errors import AccumulationReadError
from accumulus.output import result_csv, result_json_bytes, result_png
from accumulus.service.datasets import DatasetSnapshot
from accumulus.service.parameters import AverageRequest

MEDIA_TYPES = {"json": "application/json", "csv": "text/csv; charset=utf-8", "png": "image/png"}
# Text answers from this size on are also kept gzipped, by ISA-L's deflate (level 1: a
# third of the size, three times faster than zlib's level 1 for the same size), looking back
# 64 bytes for repeats, not 32 KiB: faster and smaller on the JSON and CSV of dates and
# float64 values the service writes, slower and larger on answers of short numbers and
# nulls (docs/benchmarks.md, session svc59).
GZIP_MIN_BYTES = 64 * 2**10
GZIP_LEVEL = 1
GZIP_HISTORY_BITS = 6


@dataclass(frozen=True)
class Answer:
    """A rendered response body, and the same gzipped when it is large text."""

    body: bytes
    media_type: str
    gzipped: bytes | None = None

    @classmethod
    def rendered(cls, body: bytes, media_type: str) -> Answer:
        large_text = len(body) >= GZIP_MIN_BYTES and not media_type.startswith("image/")
        # A gzip member (header and trailer), time 0 in its header: the same answer is the
        # same bytes.
        gzipped = (
            igzip_lib.compress(body, GZIP_LEVEL, igzip_lib.COMP_GZIP, hist_bits=GZIP_HISTORY_BITS)
            if large_text
            else None
        )
        return cls(body, media_type, gzipped)


def compute_answer(
    snapshot: DatasetSnapshot, request: AverageRequest, memory_bytes: int = DEFAULT_MEMORY_BYTES
) -> Answer:
    """The rendered answer of a checked request on ``snapshot``, its chunks read and reduced
    within about ``memory_bytes``."""
    try:
        result = snapshot.query(request.query, memory_bytes)
    except AccumulationReadError as exc:
        if not request.query.use_accumulation:
            raise
        # The request's parameters were checked, so what failed is reading the accumulations
        # this snapshot points to: a writer may be replacing them (re-running `accumulate`
        # after an append rewrites the group before it publishes new metadata). The raw data
        # within the snapshot's extent is never rewritten, so it still gives this snapshot's
        # answer: slower, and said so.
        result = snapshot.query(request.query.without_accumulation(), memory_bytes)
        result = replace(
            result, note=f"accumulations could not be read ({exc}); answered from the raw data"
        )
    if request.format == "json":
        body = result_json_bytes(result)
    elif request.format == "csv":
        body = result_csv(result).encode()
    else:
        body = result_png(result)
    return Answer.rendered(body, MEDIA_TYPES[request.format])
