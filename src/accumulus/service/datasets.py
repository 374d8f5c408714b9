"""The stores a service was started with, by name, each with its current snapshot.

Requests name a dataset; the name is looked up in a dictionary built at startup, so no request
can make the service open anything else. A dataset keeps the ``Cube`` of its latest metadata
snapshot and reuses it while the snapshot token is unchanged, so coordinates and accumulation
groups are read once per snapshot instead of once per request.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from accumulus.cube import Cube
from accumulus.errors import AccumulusError
from accumulus.hierarchy import find_cube_group, group_view
from accumulus.inference import InferredConventionsStore
from accumulus.service.snapshot import SnapshotStore, read_snapshot
from accumulus.storage import open_store


@dataclass(frozen=True)
class Snapshot:
    """A dataset as of one metadata snapshot: answer a whole request from ``cube``."""

    dataset: str
    token: str
    cube: Cube
    generation: int  # increases with each new snapshot of the dataset


class Dataset:
    """One served store."""

    def __init__(
        self,
        name: str,
        url: str,
        storage_options: dict[str, Any] | None = None,
        group: str | None = None,
    ):
        self.name = name
        self.url = url
        store = open_store(url, "r", storage_options=storage_options)
        # A cube with groups is served from one of them (the snapshot reads its documents).
        self._store = group_view(store, find_cube_group(store, group, None, url))
        self._current: Snapshot | None = None
        self._reads = 0
        self._lock = threading.Lock()

    def snapshot(self) -> Snapshot:
        """The dataset as its metadata stands now (reads the metadata documents, and the
        coordinates and accumulation groups only when they changed)."""
        with self._lock:
            self._reads += 1
            read = self._reads
        metadata = read_snapshot(self._store)
        if not metadata.documents:
            # Not a writer at work (they keep the root document): the store is gone.
            raise AccumulusError(
                f"dataset {self.name!r}: its store has no Zarr metadata any more "
                "(removed or replaced?)"
            )
        with self._lock:
            current = self._current
            if current is not None and (
                current.token == metadata.token
                # A snapshot installed from a later read is at least as new as this one.
                or current.generation > read
                # Writers (xarray's append, accumulate) rewrite the root document without
                # consolidated metadata while they work and consolidate when done; until
                # then the last consolidated snapshot is the dataset.
                or (current.cube.consolidated and metadata.complete)
            ):
                return current
            # Inferred conventions (a ZEP 5 generator's store) are read from the snapshot too.
            store = InferredConventionsStore(SnapshotStore(self._store, metadata))
            cube = Cube(store, label=self.name)
            _read_everything_once(cube)
            self._current = Snapshot(self.name, metadata.token, cube, generation=read)
            return self._current


def _read_everything_once(cube: Cube) -> None:
    """Load what queries read lazily, so that threads sharing the cube only read it."""
    for dim in cube.raw.dims:
        cube.index(str(dim))
    for name in cube.data_variables:
        cube.accumulation_group(name)


class Catalog:
    """The datasets of a service, by name."""

    def __init__(
        self,
        urls: Iterable[str],
        storage_options: dict[str, Any] | None = None,
        group: str | None = None,
    ):
        self.datasets = {
            name: Dataset(name, url, storage_options, group)
            for name, url in dataset_names(urls).items()
        }
        if not self.datasets:
            raise AccumulusError("give at least one store to serve")

    def get(self, name: str) -> Dataset | None:
        return self.datasets.get(name)

    def __iter__(self) -> Iterator[Dataset]:
        return iter(self.datasets.values())

    @property
    def names(self) -> list[str]:
        return list(self.datasets)


def dataset_names(urls: Iterable[str]) -> dict[str, str]:
    """Name each store by its base name without ``.zarr`` (or ``.zip``), made URL-safe and
    unique: ``/data/cube.zarr`` -> ``cube``; a second ``cube`` becomes ``cube-2``."""
    names: dict[str, str] = {}
    for url in urls:
        base = str(url).rstrip("/").rsplit("/", 1)[-1]
        base = re.sub(r"\.(zarr|zip)$", "", base)
        base = re.sub(r"\.zarr$", "", base)  # cube.zarr.zip
        base = re.sub(r"[^A-Za-z0-9._-]+", "_", base).strip("._") or "dataset"
        name, n = base, 1
        while name in names:
            n += 1
            name = f"{base}-{n}"
        names[name] = str(url)
    return names
