"""The stores a service was started with, by name, each an open ``Datacube``.

Requests name a dataset; the name is looked up in a dictionary built at startup, so no request
can make the service open anything else. Each dataset is a ``Datacube`` handle, which reads
its store's root metadata once per request and keeps coordinates, accumulation groups and
arrays for as long as that snapshot is current.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from zarr.abc.store import Store

from accumulus.api import CubeSnapshot, Datacube, QueryResult, ResolvedQuery
from accumulus.cube import Cube
from accumulus.errors import AccumulusError


@dataclass(frozen=True)
class Snapshot:
    """A dataset as of one metadata snapshot: answer a whole request from it."""

    dataset: str
    current: CubeSnapshot

    @property
    def token(self) -> str:
        return self.current.token

    @property
    def generation(self) -> int:
        """Increases with each new snapshot of the dataset."""
        return self.current.generation

    @property
    def cube(self) -> Cube:
        return self.current.cube

    def query(self, query: ResolvedQuery, memory_bytes: int) -> QueryResult:
        return self.current.query(query, memory_bytes)

    def reading_through(self, store: Store) -> Snapshot:
        """This snapshot with its chunks read through ``store`` (see ``guard``)."""
        return replace(self, current=self.current.reading_through(store))


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
        # A cube with groups is served from one of them.
        self.datacube = Datacube.open(url, storage_options, group=group, label=name)
        self._last: Snapshot | None = None

    def snapshot(self) -> Snapshot:
        """The dataset as its metadata stands now (reads the root metadata documents, and
        the coordinates and accumulation groups only when they changed)."""
        try:
            current = self.datacube.snapshot()
        except AccumulusError as exc:
            raise AccumulusError(f"dataset {self.name!r}: {exc}") from None
        last = self._last
        if last is None or last.current is not current:
            last = self._last = Snapshot(self.name, current)
        return last


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
