"""Opening a granule of any kind: the kind is found (``registry``), then its sizes are
checked, its identity taken and its group read, in that order for every kind."""

from __future__ import annotations

from collections.abc import Sequence

from accumulus.ingest.declared import check_declared
from accumulus.ingest.granules.base import (
    Granule,
    GranuleFile,
    GranuleLike,
    GranuleSource,
    InGroup,
    OpenOptions,
)
from accumulus.ingest.granules.registry import kind_of
from accumulus.stores.group import normalize_group


def open_granule(
    item: GranuleLike,
    storage_options: dict | None = None,
    allow_references: Sequence[str] = (),
) -> Granule:
    """Open one granule; raises ``AccumulusError`` naming it when it cannot be read. A
    granule that is a reference set reads where its own location and ``allow_references``
    allow (``reference_targets``)."""
    group, dim = "", None
    if isinstance(item, InGroup):
        group, dim = normalize_group(item.group), item.dim
        item = item.item
    file = _open_file(item, storage_options, allow_references)
    try:
        return read_granule(file, group, dim)
    except BaseException:  # cleanup, then re-raised
        file.close()
        raise


def read_granule(file: GranuleFile, group: str, dim: str | None) -> Granule:
    """``group`` of an open granule (with its nested groups along ``dim``), once what it
    declares has passed ``declared.check_declared``."""
    check_declared(f"granule {file.name}", file.declared(group), dim)
    identity = file.identity()
    tree = file.read(group, dim)
    return Granule(
        name=file.name,
        size=identity.size,
        checksum=identity.fingerprint,
        dataset=tree.dataset,
        file=file,
        group=group,
        paths=tree.paths,
        group_attrs=tree.group_attrs,
    )


def resolve_group(
    item: GranuleLike,
    dim: str,
    group: str | None,
    storage_options: dict | None = None,
    allow_references: Sequence[str] = (),
) -> str:
    """The group of ``item`` to append from: ``group`` when given (it must exist), else the
    one group holding variables along ``dim`` (nested groups come with their parent)."""
    if isinstance(item, InGroup):
        group = item.group if group is None else group
        item = item.item
    file = _open_file(item, storage_options, allow_references)
    try:
        return file.resolve_group(dim, group)
    finally:
        file.close()


def _open_file(
    item: GranuleSource, storage_options: dict | None, allow_references: Sequence[str]
) -> GranuleFile:
    options = OpenOptions(storage_options, tuple(allow_references))
    return kind_of(item).open(item, options)
