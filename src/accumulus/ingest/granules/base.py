"""What every kind of granule does, and what an open granule is.

Modelled on xarray's backends: a ``GranuleKind`` (xarray's ``BackendEntrypoint``) recognises
the granules it reads (``guess_can_open``, cheap: no values read) and opens one as a
``GranuleFile``, which answers the same questions whatever the kind:

- ``resolve_group``: the group to append from, found from its layout (metadata only);
- ``declared``: its variables' shapes, types and chunks as its metadata declares them,
  refused (``declared.check_declared``) before xarray reads anything;
- ``identity``: its size and a fingerprint that changes when it does, which the journal
  (or a virtual cube) records;
- ``read``: a group and its nested groups as one CF-encoded, lazy ``Dataset``; ``conform``
  reads its values in blocks along the append dimension;
- ``compression``: its variables' codec chains, which a cube created from it keeps;
- ``close``: whatever ``open`` holds (a file handle).

``opening.read_granule`` asks them in that order for every kind, so that the rules (sizes
checked before values are read; the identity recorded is that of the values read) are
written once. A kind is one module of this package; ``registry`` finds it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import xarray as xr
from zarr.abc.store import Store

from accumulus.ingest.declared import DeclaredVariable
from accumulus.ingest.granules.groups import Tree

# What a kind is given: a path or URL, a Zarr store, or an in-memory Dataset.
GranuleSource = str | os.PathLike[str] | xr.Dataset | Store
CodecChain = list[dict[str, Any]]


@dataclass(frozen=True)
class InGroup:
    """A granule read from one group of its file or Zarr store (``""``: the root), with
    those of its nested groups that hold variables along ``dim`` (all, when None)."""

    item: GranuleSource
    group: str
    dim: str | None = None


GranuleLike = GranuleSource | InGroup


@dataclass(frozen=True)
class OpenOptions:
    """How a granule at a URL is reached."""

    storage_options: dict[str, Any] | None = None
    # Where a granule that is a reference set may read besides its own location.
    allow_references: tuple[str, ...] = ()


@dataclass(frozen=True)
class Identity:
    """How a granule is recognised again."""

    size: int  # bytes of the file or store, or of a Dataset's encoded values
    fingerprint: str  # "sha256:<hex>" of its content, or a file's modification stamp


class GranuleFile(Protocol):
    """One granule, open: its metadata is at hand, its values are not read yet."""

    name: str  # how messages and the journal name it

    def resolve_group(self, dim: str, group: str | None) -> str:
        """``group`` when given (it must exist), else the group to read along ``dim``."""
        ...

    def declared(self, group: str) -> list[DeclaredVariable]:
        """The variables read with ``group`` (and those of its ancestors, whose coordinates
        it may take) as the metadata declares them; nothing is read."""
        ...

    def identity(self) -> Identity: ...

    def read(self, group: str, dim: str | None) -> Tree:
        """``group`` and its nested groups along ``dim`` as one encoded, lazy Dataset."""
        ...

    def compression(self, zarr_format: int, group: str) -> dict[str, CodecChain | None]:
        """Per variable path in the granule, its codec chain in encoding order (None or
        absent: unknown, the cube uses zarr's default)."""
        ...

    def close(self) -> None: ...


class GranuleKind(Protocol):
    """A kind of granule: a NetCDF4/HDF5 file, a Zarr store, an ``xarray.Dataset``..."""

    description: str  # what messages call it

    @property
    def types(self) -> tuple[type, ...]:
        """The Python types it is given (a path may be several kinds)."""
        ...

    def guess_can_open(self, item: GranuleSource) -> bool: ...

    def open(self, item: GranuleSource, options: OpenOptions) -> GranuleFile:
        """Open ``item``; raises ``AccumulusError`` naming it when it cannot be read."""
        ...


@dataclass
class Granule:
    """One granule, open, with its variables as stored (lazy until read)."""

    name: str
    size: int
    checksum: str  # its identity's fingerprint
    dataset: xr.Dataset  # CF-encoded
    file: GranuleFile
    group: str = ""  # the group of the source it was read from
    paths: Mapping[str, str] = field(default_factory=dict)  # variable -> path in the source
    # Attributes of the nested groups read along with ``group``, by relative path.
    group_attrs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def close(self) -> None:
        try:
            self.dataset.close()
        finally:
            self.file.close()

    def compression(self, zarr_format: int) -> dict[str, CodecChain | None]:
        """Per variable, its codec chain (encoding order), or None when unknown."""
        chains = self.file.compression(zarr_format, self.group)
        return {
            str(name): chains.get(self.paths.get(str(name), str(name)))
            for name in self.dataset.variables
        }
