"""What the phases of an append are given and what they hand on: immutable values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import zarr
from zarr.abc.store import Store

from accumulus.compute import Progress
from accumulus.grid import GROW, ChunkRule
from accumulus.ingest.conform import Template
from accumulus.ingest.granules import GranuleLike
from accumulus.ingest.journal import Journal
from accumulus.stores.lock import StoreLock


@dataclass(frozen=True)
class Target:
    """The store an append writes to, and the lock it holds there for the whole run."""

    store: Store
    label: str  # how messages name the store
    dim: str  # the append dimension
    lock: StoreLock


@dataclass(frozen=True)
class Request:
    """What the caller asked for, checked."""

    chunks: Mapping[str, int]  # as asked for (--chunks, and a --chunking size)
    rule: ChunkRule | None  # as asked for along ``dim``: a size, a variable rule, or None
    shards: Mapping[str, int]  # as asked for (--shards); empty: unsharded
    zarr_format: int  # of a new cube
    skip_existing: bool
    storage_options: dict | None
    allow_references: tuple[str, ...]  # where granules that are reference sets may read
    progress: Progress  # called with (done, steps)
    steps: int  # of progress: each granule is checked, then written

    @property
    def variable_rule(self) -> str | None:
        """The variable chunk rule asked for (month, year, per-granule), if any: chunks that
        grow (``GROW``) are chosen from bytes when the cube is created."""
        return self.rule if isinstance(self.rule, str) and self.rule != GROW else None


@dataclass(frozen=True)
class Committed:
    """The cube as of its last commit."""

    journal: Journal
    root: zarr.Group  # its metadata as of that commit
    variable_rule: str | None  # how its data variables are chunked along the dimension
    template: Template  # what granules appended to it must look like


@dataclass(frozen=True)
class Recovered:
    """The cube after recovery (None: there is none yet, the first granule creates it)."""

    cube: Committed | None
    note: str  # what an interrupted run had left, and what was done about it
    updated: frozenset[str]  # variables whose accumulations a finished commit updated


@dataclass(frozen=True)
class Planned:
    """A granule that passed the checks, and which of its steps to append."""

    item: GranuleLike
    name: str
    size: int
    checksum: str
    coordinate: np.ndarray  # along the append dimension, in the cube's encoding
    keep: slice = slice(None)


@dataclass(frozen=True)
class Batch:
    """The granules to append, checked."""

    planned: tuple[Planned, ...]  # in order along the dimension
    template: Template  # what they were checked against
    first: GranuleLike  # the first granule checked: a new cube takes its encodings from it


@dataclass(frozen=True)
class Checked:
    """Every granule checked: what to append, and what to skip."""

    batch: Batch | None  # None: nothing to append
    skipped: tuple[tuple[str, str], ...]  # (granule name, why)


@dataclass(frozen=True)
class Written:
    journal: Journal  # as of the last commit
    appended: tuple[str, ...]  # granule names
    commits: int
    updated: frozenset[str]  # variables whose accumulation groups were updated
