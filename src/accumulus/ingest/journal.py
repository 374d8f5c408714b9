"""The journal of ingested granules, kept in the store: what makes appends resumable.

One JSON object, ``.accumulus/journal.json``, rewritten whole at each commit (one PUT; S3
and zarr's local store replace objects atomically). It records every granule appended
(name, size, checksum, the index range it occupies along the append dimension, its first and
last coordinate labels) and the committed extent. Writing it is the commit point of an
append: data past ``extent`` is not committed, whatever the arrays' metadata says, and the
next appender rolls it back.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime

from zarr.abc.store import Store

from accumulus.errors import AccumulusError
from accumulus.stores import keys

JOURNAL_KEY = keys.PREFIX + "journal.json"
FORMAT_VERSION = 1

CREATING = "creating"  # the cube's arrays are being created; nothing is committed
READY = "ready"


@dataclass(frozen=True)
class GranuleRecord:
    """One ingested granule."""

    name: str
    size: int  # bytes
    checksum: str  # "sha256:<hex>"
    start: int  # index range [start, stop) along the append dimension
    stop: int
    first: str  # first and last coordinate labels appended, as text
    last: str
    ingested: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))


@dataclass(frozen=True)
class Journal:
    dim: str
    state: str = CREATING
    extent: int = 0  # committed size along ``dim``
    granules: tuple[GranuleRecord, ...] = ()

    def find(self, checksum: str) -> GranuleRecord | None:
        return next((g for g in self.granules if g.checksum == checksum), None)

    def committed(self, records: Sequence[GranuleRecord], extent: int) -> Journal:
        """The journal after a commit of ``records``, the cube ``extent`` long."""
        return Journal(self.dim, READY, extent, (*self.granules, *records))

    def to_json(self) -> bytes:
        document = {
            "version": FORMAT_VERSION,
            "dim": self.dim,
            "state": self.state,
            "extent": self.extent,
            "granules": [asdict(g) for g in self.granules],
        }
        return json.dumps(document, indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> Journal:
        try:
            document = json.loads(data)
            return cls(
                dim=document["dim"],
                state=document["state"],
                extent=int(document["extent"]),
                granules=tuple(GranuleRecord(**g) for g in document["granules"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise AccumulusError(
                f"{where}: the append journal {JOURNAL_KEY} is unreadable ({exc}); it is written "
                "only by accumulus append, so the store was changed by something else"
            ) from None


def read_journal(store: Store, where: str) -> Journal | None:
    data = keys.read(store, JOURNAL_KEY)
    return None if data is None else Journal.from_json(data, where)


def write_journal(store: Store, journal: Journal) -> None:
    keys.write(store, JOURNAL_KEY, journal.to_json())
