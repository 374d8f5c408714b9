"""Reading stores without xarray's conventions: what the ZEP 5 reference generator writes.

The generator (NASA GES DISC ``zarr-accumulation-generation``) leaves the variable and its
1-D ``latitude``, ``longitude``, ``time`` arrays without any attribute: no
``_ARRAY_DIMENSIONS``, no units, no ``_FillValue``. Only its accumulation group names
dimensions. Two things are inferred here, for reading only:

- **Dimensions.** A root array without ``_ARRAY_DIMENSIONS`` whose accumulation group
  (``<name>_accumulation_group``) names its dimensions (the keys of ``_ACCUMULATION_GROUP``,
  the same names as its arrays' ``_ARRAY_DIMENSIONS``) gets them in the order the 1-D arrays
  of those names fit its shape (the group's order breaks ties); each such 1-D array gets its
  own name. Anything inconsistent is a one-line error, never a guess.
- **Missing values.** The generator counts a value when it is at least the array's fill
  value (``mask = block >= fill_value``; its examples store -99 as missing with fill value
  0), so a variable without any attribute gets ``_accumulus_missing_below`` = its fill value,
  which ``raw_cube.Decoder`` applies in place of the fill-value mark (0 itself is valid).

``InferredConventionsStore`` presents the inferred attributes as if stored (``.zattrs`` and
``.zmetadata``), so zarr-python and xarray read the store as a datacube; nothing is written.
It costs nothing on stores that have ``_ARRAY_DIMENSIONS``: inference starts only when a root
array's attributes lack them. ``inferred_conventions`` says what was inferred (``inspect``).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import WrapperStore

from accumulus.errors import AccumulusError
from accumulus.stores.base import DelegatingStore
from accumulus.stores.keys import GROUP_SUFFIX, TREE_KEY
from accumulus.stores.rewriting import parse_metadata

DIMENSIONS = "_ARRAY_DIMENSIONS"
MISSING_BELOW = "_accumulus_missing_below"
_LEAF_KEYS = ("_DATA_WEIGHTED", "_DATA_UNWEIGHTED", "_WEIGHTS")


@dataclass(frozen=True)
class ArrayDoc:
    """A v2 array's metadata: shape, fill value and attributes."""

    shape: tuple[int, ...]
    fill_value: Any
    attrs: Mapping[str, Any]


@dataclass(frozen=True)
class GroupDoc:
    """A root group's attributes and the attributes of its arrays."""

    attrs: Mapping[str, Any]
    array_attrs: Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class Inferred:
    """What inference adds: attributes per root array, and how each was found."""

    attrs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)


def infer(arrays: Mapping[str, ArrayDoc], groups: Mapping[str, GroupDoc]) -> Inferred:
    """Attributes to add to the root arrays ``arrays`` (pure)."""
    attrs: dict[str, dict[str, Any]] = {}
    notes: dict[str, str] = {}
    for name, array in sorted(arrays.items()):
        group = groups.get(name + GROUP_SUFFIX)
        if DIMENSIONS in array.attrs or group is None or TREE_KEY not in group.attrs:
            continue
        dims = _variable_dims(name, array, group, arrays)
        attrs[name] = {DIMENSIONS: list(dims)}
        notes[name] = (
            f"dimensions {list(dims)} from {name}{GROUP_SUFFIX} and the 1-D arrays of those names"
        )
        if not array.attrs and _is_number(array.fill_value):
            attrs[name][MISSING_BELOW] = array.fill_value
            notes[name] += (
                f"; values below its fill value {array.fill_value} are missing (the ZEP 5 "
                "reference generator's rule)"
            )
        for dim, size in zip(dims, array.shape, strict=True):
            coordinate = arrays.get(dim)
            if (
                coordinate is not None
                and DIMENSIONS not in coordinate.attrs
                and coordinate.shape == (size,)
            ):
                attrs.setdefault(dim, {DIMENSIONS: [dim]})
                notes.setdefault(dim, f"dimension [{dim!r}]: a 1-D array named as it")
    return Inferred(attrs, notes)


def _variable_dims(
    name: str, array: ArrayDoc, group: GroupDoc, arrays: Mapping[str, ArrayDoc]
) -> tuple[str, ...]:
    where = f"{name!r} has no {DIMENSIONS} and its accumulation group"
    tree = group.attrs[TREE_KEY]
    names = [key for key in tree if key not in _LEAF_KEYS] if isinstance(tree, Mapping) else []
    named = {d for attrs in group.array_attrs.values() for d in attrs.get(DIMENSIONS) or ()}
    if len(names) != len(array.shape) or (named and named != set(names)):
        raise AccumulusError(
            f"{where} names dimensions {names} (its arrays: {sorted(named)}), which cannot be "
            f"the {len(array.shape)} dimensions of its shape {list(array.shape)}"
        )

    def fits(order: Sequence[str]) -> bool:
        for dim, size in zip(order, array.shape, strict=True):
            coordinate = arrays.get(dim)
            if coordinate is not None and coordinate.shape != (size,):
                return False
        return True

    candidates = [order for order in itertools.permutations(names) if fits(order)]
    if tuple(names) in candidates:
        return tuple(names)
    if len(candidates) == 1:
        return candidates[0]
    lengths = {d: list(arrays[d].shape) for d in names if d in arrays}
    problem = "no order" if not candidates else f"{len(candidates)} orders"
    raise AccumulusError(
        f"{where} names {names}: {problem} of them fit its shape {list(array.shape)} "
        f"(1-D arrays: {lengths})"
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# The read-only view ---------------------------------------------------------------------------


class InferredConventionsStore(DelegatingStore):
    """A read-through wrapper presenting inferred attributes (see the module docstring)."""

    sync_reads_pass_through: ClassVar[bool] = True
    sync_writes_pass_through: ClassVar[bool] = True
    rewrites_metadata_only: ClassVar[bool] = True
    passes_other_reads: ClassVar[bool] = True

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.inferred: Inferred | None = None  # None until a root array lacks dimensions
        # The last consolidated document read, what was served for it and inferred from it:
        # an open datacube reads it for every query, and the same bytes present the same.
        self._consolidated: tuple[bytes, bytes, Inferred | None] | None = None

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        value = await self._store.get(key, prototype, byte_range)
        if byte_range is not None or not self.serves_own_bytes(key):
            return value
        content = value.to_bytes() if value is not None else None
        last = self._consolidated
        if key == ".zmetadata" and last is not None and last[0] == content:
            self.inferred = last[2]
            return value if last[1] is last[0] else prototype.buffer.from_bytes(last[1])
        document = parse_metadata(key, content) if content is not None else None
        presented = await self._present(key, document)
        result = content if presented == document else json.dumps(presented).encode()
        if key == ".zmetadata" and content is not None and result is not None:
            self._consolidated = (content, result, self.inferred)
        if result is None or result is content:
            return value
        return prototype.buffer.from_bytes(result)

    def serves_own_bytes(self, key: str) -> bool:
        """The documents inferred attributes are presented in: consolidated metadata and
        the attributes of arrays."""
        return key == ".zmetadata" or key.endswith("/.zattrs")

    def read_sync(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
    ) -> Buffer | None:
        if byte_range is not None or not self.serves_own_bytes(key):  # zarr's sync fast path
            return super().read_sync(key, prototype, byte_range)
        return sync(self.get(key, prototype, byte_range))

    async def _present(self, key: str, document: dict | None) -> dict | None:
        if key == ".zmetadata" and document is not None:
            return self._present_consolidated(document)
        parent, _, _ = key.rpartition("/")
        if "/" in parent or not parent:  # only root-level arrays are inferred
            return document
        if self.inferred is None:
            if document is not None and DIMENSIONS in document:
                return document
            if not await self._store.exists(f"{parent}/.zarray"):
                return document
            self.inferred = await self._infer_from_store()
        extra = self.inferred.attrs.get(parent)
        return {**(document or {}), **extra} if extra else document

    def _present_consolidated(self, document: dict) -> dict:
        metadata = document.get("metadata") or {}
        arrays = {
            key.removesuffix("/.zarray"): _array_doc(value, metadata.get(_attrs_key(key)))
            for key, value in metadata.items()
            if key.endswith("/.zarray") and key.count("/") == 1
        }
        self.inferred = Inferred()
        if all(DIMENSIONS in array.attrs for array in arrays.values()):
            return document
        self.inferred = infer(arrays, _consolidated_groups(metadata))
        presented = dict(metadata)
        for name, extra in self.inferred.attrs.items():
            presented[f"{name}/.zattrs"] = {**(metadata.get(f"{name}/.zattrs") or {}), **extra}
        return {**document, "metadata": presented}

    async def _infer_from_store(self) -> Inferred:
        arrays: dict[str, ArrayDoc] = {}
        groups: dict[str, GroupDoc] = {}
        async for name in self._store.list_dir(""):
            array = await self._read(f"{name}/.zarray")
            if array is not None:
                arrays[name] = _array_doc(array, await self._read(f"{name}/.zattrs"))
            elif name.endswith(GROUP_SUFFIX) and await self._read(f"{name}/.zgroup"):
                groups[name] = await self._group_doc(name)
        return infer(arrays, groups)

    async def _group_doc(self, name: str) -> GroupDoc:
        members = {}
        async for member in self._store.list_dir(name):
            attrs = await self._read(f"{name}/{member}/.zattrs")
            if attrs is not None and await self._store.exists(f"{name}/{member}/.zarray"):
                members[member] = attrs
        return GroupDoc(await self._read(f"{name}/.zattrs") or {}, members)

    async def _read(self, key: str) -> dict | None:
        value = await self._store.get(key, default_buffer_prototype())
        return parse_metadata(key, value.to_bytes()) if value is not None else None


def _attrs_key(zarray_key: str) -> str:
    return zarray_key.removesuffix(".zarray") + ".zattrs"


def _array_doc(zarray: Mapping[str, Any], zattrs: Mapping[str, Any] | None) -> ArrayDoc:
    return ArrayDoc(tuple(zarray.get("shape", ())), zarray.get("fill_value"), zattrs or {})


def _consolidated_groups(metadata: Mapping[str, Any]) -> dict[str, GroupDoc]:
    groups = {}
    for key in metadata:
        name = key.removesuffix("/.zgroup")
        if key.endswith("/.zgroup") and "/" not in name and name.endswith(GROUP_SUFFIX):
            members = {
                k.split("/")[1]: metadata.get(_attrs_key(k)) or {}
                for k in metadata
                if k.startswith(f"{name}/") and k.endswith("/.zarray") and k.count("/") == 2
            }
            groups[name] = GroupDoc(metadata.get(f"{name}/.zattrs") or {}, members)
    return groups


def inferred_conventions(store: Store) -> dict[str, str]:
    """What was inferred for the arrays of ``store`` (through any wrappers), by array."""
    while isinstance(store, WrapperStore):
        if isinstance(store, InferredConventionsStore) and store.inferred is not None:
            return dict(store.inferred.notes)
        store = store._store
    return {}
