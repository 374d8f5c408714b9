"""The raw data of a datacube, opened for reading: one metadata snapshot of a Zarr store.

``RawCube.open`` reads the store's metadata once (consolidated when present) and keeps it:
the zarr group, the xarray view of it (raw attributes for CF decoding, decoded coordinates
for label lookups). Every later read uses that snapshot, so shapes, coordinates and (read by
``accumulation.model.groups``) accumulations agree with each other even while a writer
appends. It knows nothing of accumulations: it is the Zarr and xarray view of a store's
variables, nothing more. ``datacube.Datacube`` is the handle users open, holding a
``RawCube`` and its accumulation groups per snapshot.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from math import prod
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pandas as pd
import xarray as xr
import zarr
from xarray.backends.zarr import ZarrStore
from zarr.abc.store import Store

from accumulus.chunk_reader import read_region
from accumulus.coordinates import labels_of
from accumulus.errors import AccumulusError
from accumulus.grid import ChunkBounds, array_bounds
from accumulus.hierarchy import inherited_coordinates
from accumulus.scope import accumulus_scope
from accumulus.stores.arrays import array_with
from accumulus.stores.group import ancestors_of, group_label, group_view, normalize_group
from accumulus.stores.inferred_conventions import MISSING_BELOW
from accumulus.stores.locations import remote_errors
from accumulus.stores.opening import Mode, open_store, store_label

if TYPE_CHECKING:
    import dask.array as da

# Values per Dask task when reading many stored chunks (32 MiB as float32): blocks of whole
# chunk rows rather than pieces of them, so fewer tasks, and their sums copied together in
# long runs, not rows of a few values (docs/benchmarks.md, "Figures behind the code").
BLOCK_VALUES = 2**23

T = TypeVar("T")

# CF attributes xarray's decoding reads; the rest of a variable's attributes are not needed
# to turn stored values into physical ones.
_CF_DECODING_ATTRS = ("_FillValue", "missing_value", "scale_factor", "add_offset", "_Unsigned")
_DECODING_ATTRS = (*_CF_DECODING_ATTRS, MISSING_BELOW)


@dataclass(frozen=True)
class Decoder:
    """Stored values -> physical values as float64, NaN where missing, by xarray's own CF
    decoding. Picklable, so Dask process and distributed workers can use it."""

    name: str
    dims: tuple[str, ...]
    attrs: Mapping[str, Any]

    def __call__(self, values: np.ndarray) -> np.ndarray:
        attrs = dict(self.attrs)
        below = attrs.pop(MISSING_BELOW, None)
        if below is not None:  # an inferred rule replacing the fill-value mark (inference)
            attrs = {k: v for k, v in attrs.items() if k not in ("_FillValue", "missing_value")}
            values = np.where(values < below, np.nan, values)
        stored = xr.Variable(self.dims, values, attrs=attrs)
        decoded = xr.conventions.decode_cf_variable(self.name, stored, decode_times=False)
        return np.asarray(decoded.values, dtype="f8")

    def values(self, stored: np.ndarray) -> np.ndarray:
        """Physical values of ``stored``, NaN where missing, as the sums take them: floating
        point values that are only masked (no scale, offset or sign convention) keep their
        stored type (the sums are taken in float64 whatever the type); anything else is
        decoded by xarray, to float64."""
        if stored.dtype.kind != "f" or not set(self.attrs) <= {"_FillValue", "missing_value"}:
            return self(stored)
        marks = [
            mark
            for name in ("_FillValue", "missing_value")
            for mark in np.atleast_1d(self.attrs.get(name, ()))
            if not np.isnan(mark)
        ]
        return np.where(np.isin(stored, marks), np.nan, stored) if marks else stored

    def packing(self, dtype: np.dtype) -> Packing | None:
        """The decoding of stored ``dtype`` as a linear map of integers, when it is one
        whose sums can be taken on the integers (``sums.reduce_packed``) and equal xarray's:
        integers of at most 32 bits, masked by ``_FillValue``/``missing_value`` only (no
        ``_Unsigned``, no inferred rule), scaled and offset by float64 numbers, which xarray
        decodes in float64 (``_choose_float_dtype``; a float32 scale would decode in float32,
        whose rounding the integers' sums would not repeat). None otherwise."""
        if dtype.kind not in "iu" or dtype.itemsize > 4:
            return None
        if not set(self.attrs) <= {"_FillValue", "missing_value", "scale_factor", "add_offset"}:
            return None
        linear = [self.attrs.get(k) for k in ("scale_factor", "add_offset")]
        if any(v is not None and (np.ndim(v) or np.asarray(v).dtype != "f8") for v in linear):
            return None
        marks = tuple(
            mark
            for name in ("_FillValue", "missing_value")
            for mark in np.ravel(self.attrs.get(name, ()))
            if not pd.isnull(mark)
        )
        scale, offset = linear
        return Packing(
            tuple(dict.fromkeys(marks)),
            1.0 if scale is None else float(scale),
            0.0 if offset is None else float(offset),
        )


@dataclass(frozen=True)
class Packing:
    """Stored integers x -> physical values scale·x + offset, missing where x is a mark."""

    marks: tuple[Any, ...]
    scale: float
    offset: float


@dataclass(frozen=True)
class VariableInfo:
    """A data variable of the cube, as stored."""

    name: str
    dims: tuple[str, ...]
    shape: tuple[int, ...]
    bounds: tuple[ChunkBounds, ...]
    array: zarr.Array
    decoding_attrs: Mapping[str, Any]

    def axis(self, dim: str) -> int:
        return self.dims.index(dim)

    @property
    def decoder(self) -> Decoder:
        return Decoder(self.name, self.dims, self.decoding_attrs)

    def grouped_blocks(
        self, values: int = BLOCK_VALUES, keep: str | None = None
    ) -> tuple[tuple[int, ...], ...]:
        """Dask block sizes grouping whole stored chunks (last dimensions first) into blocks of
        about ``values`` values, so that one task reads several chunks in one zarr call.
        Along ``keep``, blocks stay single chunks."""
        sizes = [b.sizes or (0,) for b in self.bounds]
        groups = [1] * len(sizes)

        def block_values(g: Sequence[int]) -> int:
            return prod(max(s) * n for s, n in zip(sizes, g, strict=True))

        for axis in reversed(range(len(sizes))):
            if keep is not None and axis == self.axis(keep):
                continue
            while groups[axis] < len(sizes[axis]):
                wider = [*groups[:axis], groups[axis] + 1, *groups[axis + 1 :]]
                if block_values(wider) > values:
                    break
                groups[axis] += 1
        return tuple(
            tuple(sum(s[i : i + g]) for i in range(0, len(s), g))
            for s, g in zip(sizes, groups, strict=True)
        )

    def dask_array(
        self, blocks: tuple[tuple[int, ...], ...] | None = None, *, as_summed: bool = False
    ) -> da.Array:
        """The decoded values (float64, NaN where missing) as a Dask array; by default one
        block per stored chunk (rectilinear grids included), or the given ``blocks``.
        ``as_summed``: in the form the sums take them (``Decoder.values``: float32 values
        that are only masked stay float32, half the bytes of float64)."""
        import dask.array as da  # builds and verification only: queries do without Dask

        chunks = blocks or tuple(b.sizes for b in self.bounds)
        stored = da.from_array(StoredValues(self.array), chunks=chunks, lock=False)
        if as_summed:
            meta = self.decoder.values(np.zeros((0,) * self.array.ndim, self.array.dtype))
            return stored.map_blocks(self.decoder.values, dtype=meta.dtype)
        return stored.map_blocks(self.decoder, dtype="f8")


@dataclass(frozen=True)
class StoredValues:
    """A zarr array's stored values as Dask reads them. Dask asks arrays for ``.chunks``,
    which zarr does not define for rectilinear grids; block sizes are given to Dask instead."""

    array: zarr.Array

    @property
    def shape(self) -> tuple[int, ...]:
        return self.array.shape

    @property
    def dtype(self) -> np.dtype:
        return self.array.dtype

    @property
    def ndim(self) -> int:
        return self.array.ndim

    def __getitem__(self, key: Any) -> np.ndarray:
        # Dask asks for blocks of whole chunks: read them in one batch, past zarr's
        # per-call path (a build reads every chunk so).
        region = _slices(key, self.array.shape)
        if region is None:
            return np.asarray(self.array[key])
        return read_region(self.array, region)


def _slices(key: Any, shape: tuple[int, ...]) -> list[slice] | None:
    """``key`` as one slice of step 1 per axis within ``shape``, or None if it is not one."""
    if not isinstance(key, tuple) or len(key) != len(shape):
        return None
    if not all(isinstance(k, slice) and k.step in (None, 1) for k in key):
        return None
    region = [slice(*k.indices(n)[:2]) for k, n in zip(key, shape, strict=True)]
    return region if all(s.start <= s.stop for s in region) else None


class RawCube:
    """The raw data of a Zarr datacube as of one metadata snapshot (xarray conventions:
    ``_ARRAY_DIMENSIONS`` in v2, ``dimension_names`` in v3)."""

    def __init__(
        self,
        store: Store,
        label: str | None = None,
        *,
        use_consolidated: bool | None = None,
        group: str | None = None,
    ) -> None:
        # A group of the store is a cube of its own, seen through a view of the store.
        self.group = normalize_group(group)
        base, store = store, group_view(store, self.group)
        self.store = store
        self.label = group_label(label or store_label(base), self.group)
        with accumulus_scope(), remote_errors(self.label):
            try:
                # use_consolidated=False: the arrays' own metadata, newer than the
                # consolidated snapshot while an append is between the two.
                self.root = zarr.open_group(store, mode="r", use_consolidated=use_consolidated)
            except zarr.errors.GroupNotFoundError:
                raise AccumulusError(
                    f"{self.label} is not a Zarr datacube: no Zarr group metadata found there"
                ) from None
            except (FileNotFoundError, ValueError) as exc:
                raise AccumulusError(f"{self.label} is not a Zarr datacube: {exc}") from None
            try:
                self.raw = xr.open_dataset(
                    self.label,
                    engine="zarr",
                    # xarray's own rule: Zarr v2 fill_value is the missing-value mark.
                    store=ZarrStore(
                        self.root,
                        use_zarr_fill_value_as_mask=self.root.metadata.zarr_format == 2,
                    ),
                    chunks=None,
                    decode_cf=False,
                )
            except (KeyError, ValueError, TypeError) as exc:
                raise AccumulusError(
                    f"{self.label}: cannot read it as a datacube (xarray conventions): {exc}"
                ) from None
            self.raw = self._with_inherited_coordinates(base, self.raw, use_consolidated)
        self.consolidated = self.root.metadata.consolidated_metadata is not None
        self._variables: dict[str, VariableInfo] = {}
        self._indexes: dict[str, pd.Index] = {}
        self._remembered: dict[Hashable, Any] = {}

    @classmethod
    def open(
        cls,
        url: str | Store,
        mode: Mode = "r",
        storage_options: dict | None = None,
        group: str | None = None,
    ) -> RawCube:
        store = open_store(url, mode, storage_options=storage_options)
        return cls(store, None if isinstance(url, Store) else str(url), group=group)

    def _with_inherited_coordinates(
        self, store: Store, raw: xr.Dataset, use_consolidated: bool | None
    ) -> xr.Dataset:
        """A group's dimensions may have their coordinate variables in an ancestor group
        (netCDF-4 scoping, kept by append and convert): they label this group's too. Read
        as this group is (``use_consolidated``): while an append commits, the consolidated
        snapshot still holds the ancestors' shorter coordinates."""
        if not self.group or all(dim in raw.variables for dim in raw.dims):
            return raw
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # "no consolidated metadata"
            ancestors = [
                xr.open_dataset(
                    store,  # type: ignore[arg-type]  # xarray's zarr engine opens a zarr Store
                    engine="zarr",
                    group=path or None,
                    chunks=None,
                    decode_cf=False,
                    consolidated=use_consolidated,
                )
                for path in ancestors_of(self.group)
            ]
        inherited = inherited_coordinates(raw, ancestors)
        return raw.assign_coords(inherited) if inherited else raw

    @cached_property
    def decoded(self) -> xr.Dataset:
        """CF-decoded view (times as datetimes, masked and scaled values), still lazy."""
        try:
            return xr.decode_cf(self.raw)
        except ValueError as exc:
            raise AccumulusError(f"{self.label}: cannot decode CF metadata: {exc}") from None

    @property
    def zarr_format(self) -> int:
        return self.root.metadata.zarr_format

    @property
    def data_variables(self) -> list[str]:
        return list(self.remembered("data variables", lambda: [str(v) for v in self.raw.data_vars]))

    def remembered(self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, computed once for this snapshot under ``key``: for what depends on
        the snapshot's metadata and coordinates only, which every query of an open datacube
        would otherwise work out again. A ``compute`` that raises is not remembered."""
        if key not in self._remembered:
            self._remembered[key] = compute()
        return self._remembered[key]

    def variable(self, name: str) -> VariableInfo:
        """``name`` as this snapshot holds it, opened once (every query of the snapshot
        asks for it)."""
        found = self._variables.get(name)
        if found is not None:
            return found
        if name not in self.raw.data_vars:
            raise AccumulusError(
                f"{self.label}: no variable {name!r}; data variables are {self.data_variables}"
            )
        raw = self.raw[name]
        array = self.root[name]
        assert isinstance(array, zarr.Array)
        found = VariableInfo(
            name=name,
            dims=tuple(str(d) for d in raw.dims),
            shape=tuple(raw.shape),
            bounds=array_bounds(array),
            array=array,
            decoding_attrs={k: raw.attrs[k] for k in _DECODING_ATTRS if k in raw.attrs},
        )
        self._variables[name] = found
        return found

    # ----------------------------------------------------------------------------------------
    # Coordinates

    def index(self, dim: str) -> pd.Index:
        """The decoded labels of ``dim`` as a pandas index: its dimension coordinate's, or
        those of the latitude or longitude variable on it (``lat(latitude)``,
        ``coordinates.labels_of``), or positions when no variable holds them
        (``labelled``)."""
        found = self._indexes.get(dim)
        if found is None:
            name = self.labels_name(dim)
            indexes = self.decoded.indexes
            if name == dim and dim in indexes:
                found = indexes[dim]
            elif name is not None:
                found = pd.Index(self.decoded.variables[name].values, name=dim)
            else:
                # Raw sizes: xarray decodes a char array's string dimension (string1 of a CF
                # grid_mapping variable) away, so the decoded view may not have it.
                found = pd.RangeIndex(self.raw.sizes[dim], name=dim)
            self._indexes[dim] = found
        return found

    def labels_name(self, dim: str) -> str | None:
        """The variable holding the labels of ``dim``, or None when it has only positions."""
        return self.remembered(("labels", dim), lambda: labels_of(self.raw, dim))

    def labelled(self, dim: str) -> bool:
        """Whether ``dim`` has labels of its own (else ``index`` gives positions)."""
        return self.labels_name(dim) is not None

    # ----------------------------------------------------------------------------------------
    # Values of other arrays

    def decoded_values(self, name: str, box: Mapping[str, slice]) -> np.ndarray:
        """The array ``name`` over ``box`` (index slices by dimension, whole where none is
        given), CF-decoded as in ``decoded``, as float64 with NaN where missing. Read through
        ``store``, the reader's (the service's guard: a time limit per read, stopped with its
        request), not through the snapshot's xarray view, whose reads nothing bounds. An array
        of an ancestor group (an inherited coordinate) is read through that view."""
        raw = self.raw[name]
        array = self.root.get(name)
        where = {str(d): box.get(str(d), slice(None)) for d in raw.dims}
        if not isinstance(array, zarr.Array):
            return np.asarray(self.decoded[name].isel(where).values, dtype="f8")
        if array.store_path.store is not self.store:
            array = array_with(array, store=self.store)
        stored = np.asarray(array[tuple(where[str(d)] for d in raw.dims)])
        attrs = {k: raw.attrs[k] for k in _DECODING_ATTRS if k in raw.attrs}
        return Decoder(name, tuple(str(d) for d in raw.dims), attrs)(stored)
