"""The stores a service was started with, by name, each an open ``Datacube``.

Requests name a dataset; the name is looked up in a dictionary built at startup, so no request
can make the service open anything else. Each dataset is a ``Datacube`` handle, which reads
its store's root metadata once per request and keeps coordinates, accumulation groups and
arrays for as long as that snapshot is current.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from zarr.abc.store import Store

from accumulus.api import DatacubeSnapshot, QueryResult, ResolvedQuery
from accumulus.datacube import Datacube
from accumulus.errors import AccumulusError
from accumulus.raw_cube import RawCube


@dataclass(frozen=True)
class DatasetSnapshot:
    """A dataset as of one metadata snapshot: answer a whole request from it."""

    dataset: str  # its name in the service
    current: DatacubeSnapshot

    @property
    def token(self) -> str:
        return self.current.token

    @property
    def generation(self) -> int:
        """Increases with each new snapshot of the dataset."""
        return self.current.generation

    @property
    def cube(self) -> RawCube:
        return self.current.cube

    def scans(self, query: ResolvedQuery) -> bool:
        """Whether ``query`` is answered from the raw data alone (a heavy question)."""
        return self.current.scans(query)

    def query(self, query: ResolvedQuery, memory_bytes: int) -> QueryResult:
        return self.current.query(query, memory_bytes)

    def reading_through(self, wrap: Callable[[Store], Store]) -> DatasetSnapshot:
        """This snapshot with its chunks (a sidecar's too) read through ``wrap(store)``
        (see ``guard``)."""
        return replace(self, current=self.current.reading_through(wrap))


class Dataset:
    """One served store: a cube (from one of its groups, when it has groups), a cube with
    its accumulations in a sidecar store (``accumulations``), or a sidecar, served for the
    source it names (opened once, here: what a request says never changes it)."""

    def __init__(
        self,
        name: str,
        url: str,
        storage_options: dict[str, Any] | None = None,
        group: str | None = None,
        accumulations: str | None = None,
        allow_references: Sequence[str] | None = None,
        ref: str | None = None,
    ):
        self.name = name
        self.url = url
        self.datacube = Datacube.open(
            url,
            storage_options,
            group=group,
            label=name,
            accumulations=accumulations,
            allow_references=allow_references,
            ref=ref,
        )
        self._last: DatasetSnapshot | None = None

    def locations(self) -> dict[str, str]:
        """Where this dataset's stores are, and how answers name them: the store served as
        the dataset, a sidecar's source or a source's sidecar by role (known once the first
        snapshot is read)."""
        datacube = self.datacube
        found = {self.url: self.name}
        if datacube.sidecar_store is not None:
            found.setdefault(datacube.source_label, f"{self.name} source")
            found.setdefault(datacube.sidecar_label, f"{self.name} accumulations")
        found.pop(self.name, None)  # a label that is the name already (not a location)
        return found

    def snapshot(self) -> DatasetSnapshot:
        """The dataset as its metadata stands now (reads the root metadata documents, and
        the coordinates and accumulation groups only when they changed)."""
        try:
            current = self.datacube.snapshot()
        except AccumulusError as exc:
            raise AccumulusError(f"dataset {self.name!r}: {exc}") from None
        last = self._last
        if last is None or last.current is not current:
            last = self._last = DatasetSnapshot(self.name, current)
        return last


class Catalog:
    """The datasets of a service, by name."""

    def __init__(
        self,
        urls: Sequence[str],
        storage_options: dict[str, Any] | None = None,
        group: str | None = None,
        accumulations: Sequence[str] | None = None,
        allow_references: Sequence[str] | None = None,
        refs: Sequence[str] | None = None,
    ):
        if not urls:
            raise AccumulusError("give at least one store to serve")
        sidecars: Sequence[str | None] = accumulations or [None] * len(urls)
        if len(sidecars) != len(urls):
            raise AccumulusError(
                f"--accumulations is given {len(sidecars)} time(s) for {len(urls)} store(s): "
                "give it once per store, in the same order"
            )
        # Of icechunk repositories, one dataset per ref: ``name@ref``.
        at: Sequence[str | None] = refs or [None]
        self.datasets = {
            f"{name}@{ref}" if refs else name: Dataset(
                f"{name}@{ref}" if refs else name,
                url,
                storage_options,
                group,
                side,
                allow_references,
                ref,
            )
            for (name, url), side in zip(dataset_names(urls).items(), sidecars, strict=True)
            for ref in at
        }

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
