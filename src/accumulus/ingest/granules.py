"""Granules, one at a time: a NetCDF4/HDF5 file, a Zarr store, or an ``xarray.Dataset``.

A granule is opened as xarray sees it *encoded*, the way its bytes are stored
(``decode_cf=False``): integers with their scale factor and fill value, times as numbers
"since" a date. Values are then copied as they are when the store's encoding is the same, and
converted only where it differs (``conform``). A granule is identified by its name, size and
SHA-256 checksum, which the journal records.

Compression is read from the granule too, as a chain of numcodecs codec JSON in encoding
order: HDF5 filters through ``accumulus.filters`` (as ``convert`` maps them), a Zarr store's
codecs, or an ``xarray.Dataset``'s ``encoding``. The cube created from a first granule keeps it.

Granules as NASA ships them keep their variables in groups (IMERG: ``/Grid`` and
``/Grid/Intermediate``). A granule is read from one group (``InGroup``), found by
``resolve_group`` when none is named: the group holding the variables along the append
dimension. Its nested groups come with it, their variables named by relative path
(``Intermediate/IRprecipitation``), so the cube keeps the structure; a group whose
dimensions are defined in an ancestor group (netCDF-4 scoping) gets the ancestor's
coordinate variables. Dimensions come from dimension scales or, in GPM files without them,
from each variable's ``DimensionNames`` attribute.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import xarray as xr
import zarr
from zarr.abc.store import Store

from accumulus.errors import AccumulusError
from accumulus.filters import FilterError, join_v2, join_v3
from accumulus.hierarchy import inherited_coordinates, pick_group
from accumulus.ingest.declared import DeclaredVariable, check_declared, itemsize
from accumulus.names import check_names
from accumulus.scope import accumulus_scope
from accumulus.stores import keys
from accumulus.stores.arrays import dimension_names
from accumulus.stores.group import ancestors_of, normalize_group
from accumulus.stores.locations import local_path
from accumulus.stores.opening import open_store, store_label


@dataclass(frozen=True)
class InGroup:
    """A granule read from one group of its file or Zarr store (``""``: the root), with
    those of its nested groups that hold variables along ``dim`` (all, when None)."""

    item: str | os.PathLike[str] | Store
    group: str
    dim: str | None = None


GranuleLike = str | os.PathLike[str] | xr.Dataset | Store | InGroup
CodecChain = list[dict[str, Any]]
# netcdf-c's names for dimensions without a dimension scale.
_PHONY_DIMENSION = "phony_dim_"

_READ_BLOCK = 2**22


@dataclass
class Granule:
    """One granule, open, with its variables as stored (lazy until read)."""

    name: str
    size: int  # bytes of the file or store, or of the Dataset's encoded values
    checksum: str
    dataset: xr.Dataset  # CF-encoded
    kind: str  # "netcdf", "zarr" or "dataset"
    source: Any  # path, Store or Dataset it came from
    group: str = ""  # the group of the source it was read from
    paths: Mapping[str, str] = field(default_factory=dict)  # variable -> path in the source
    # Attributes of the nested groups read along with ``group``, by relative path.
    group_attrs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def close(self) -> None:
        self.dataset.close()

    def compression(self, zarr_format: int) -> dict[str, CodecChain | None]:
        """Per variable, its codec chain (encoding order), or None when unknown."""
        if self.kind == "dataset":
            variables = self.source.variables.items()
            return {name: _dataset_chain(var.encoding) for name, var in variables}
        if self.kind == "netcdf":
            chains = _netcdf_chains(self.source, self.name, zarr_format, self.group)
        else:
            chains = _zarr_chains(self.source)
        return {name: chains.get(self.paths.get(name, name)) for name in self.dataset.variables}


def granule_name(item: GranuleLike) -> str:
    """How messages and the journal name a granule before it is opened."""
    if isinstance(item, InGroup):
        return granule_name(item.item)
    if isinstance(item, xr.Dataset):
        source = item.encoding.get("source")
        return Path(source).name if source else "xarray.Dataset"
    if isinstance(item, Store):
        return store_label(item)
    return os.fspath(item)


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
        item, group, dim = item.item, normalize_group(item.group), item.dim
    if isinstance(item, xr.Dataset):
        if group:
            raise AccumulusError(
                f"granule {granule_name(item)}: an xarray.Dataset has no groups (--group {group})"
            )
        return _open_dataset(item)
    kind, where = _locate(item)
    if kind == "zarr":
        return _open_zarr(where, storage_options, allow_references, group, dim)
    return _open_netcdf(where, os.fspath(item), group, dim)


def _locate(item: str | os.PathLike[str] | Store) -> tuple[str, Any]:
    """("zarr", store or URL) or ("netcdf", path) for a granule that is not a Dataset."""
    path = None if isinstance(item, Store) else local_path(item)
    if path is None:
        return "zarr", item
    if path.is_dir():
        return "zarr", path
    if not path.is_file():
        raise AccumulusError(f"granule {item}: no such file or Zarr store")
    return "netcdf", path


def _open_netcdf(path: Path, name: str, group: str = "", dim: str | None = None) -> Granule:
    from xarray.backends import NetCDF4DataStore

    size, checksum = _file_identity(path)
    file = _netcdf_file(path, name)  # one handle for every group read
    try:
        layout = _netcdf_layout(file)
        check_declared(f"granule {name}", _netcdf_declared(file, group), dim)

        def open_group(path_in_file: str) -> xr.Dataset:
            node = file[path_in_file] if path_in_file else file
            dataset = xr.open_dataset(NetCDF4DataStore(node), decode_cf=False)
            dataset.set_close(None)  # the file is closed once, below
            return dataset

        tree = _tree_dataset(open_group, layout, group, dim, f"granule {name}", file.close)
    except BaseException:
        file.close()
        raise
    return Granule(
        name, size, checksum, tree.dataset, "netcdf", path, group, tree.paths, tree.group_attrs
    )


def _netcdf_file(path: Path, name: str) -> Any:
    import netCDF4

    try:
        return netCDF4.Dataset(path)
    except Exception as exc:  # netCDF4/HDF5 raise OSError, RuntimeError, ValueError...
        raise AccumulusError(
            f"granule {name}: cannot read it as NetCDF4/HDF5 (truncated or not a NetCDF "
            f"file?): {exc}"
        ) from None


def _file_identity(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as file:
        while block := file.read(_READ_BLOCK):
            digest.update(block)
            size += len(block)
    return size, f"sha256:{digest.hexdigest()}"


def _open_zarr(
    item: str | os.PathLike[str] | Store,
    storage_options: dict | None,
    allow_references: Sequence[str],
    group: str = "",
    dim: str | None = None,
) -> Granule:
    name = granule_name(item)
    store = _zarr_store(item, storage_options, allow_references, name)
    check_declared(f"granule {name}", _zarr_declared(store, group, name), dim)
    digest = hashlib.sha256()
    size = 0
    for key in keys.list_keys(store):
        data = keys.read(store, key) or b""
        digest.update(key.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
        size += len(data)
    tree = open_zarr_tree(store, group, f"granule {name}", dim)
    checksum = f"sha256:{digest.hexdigest()}"
    return Granule(
        name, size, checksum, tree.dataset, "zarr", store, group, tree.paths, tree.group_attrs
    )


def _zarr_declared(store: Store, group: str, name: str) -> list[DeclaredVariable]:
    """The arrays a Zarr granule's metadata declares in and around ``group``."""
    try:
        with accumulus_scope():
            members = list(zarr.open_group(store, mode="r").members(max_depth=None))
    except Exception as exc:
        raise AccumulusError(f"granule {name}: cannot read it as a Zarr dataset: {exc}") from None
    return [
        DeclaredVariable(
            name=path.rpartition("/")[2],
            dims=dimension_names(node),
            shape=tuple(node.shape),
            itemsize=itemsize(node.dtype),
            chunks=tuple(node.shards or node.chunks) if node.ndim else None,
        )
        for path, node in members
        if isinstance(node, zarr.Array) and _read_with(path.rpartition("/")[0], group)
    ]


def _zarr_store(
    item: str | os.PathLike[str] | Store,
    storage_options: dict | None,
    allow_references: Sequence[str],
    name: str,
) -> Store:
    try:
        return open_store(
            item, "r", storage_options=storage_options, allow_references=allow_references
        )
    except AccumulusError as exc:
        raise AccumulusError(f"granule {name}: {exc}") from None


def open_zarr_tree(store: Store, group: str = "", where: str = "", dim: str | None = None) -> Tree:
    """The variables of a Zarr store's ``group`` and of its nested groups along with it
    (those with variables along ``dim``, all when None), as one encoded Dataset (nested
    variables named by relative path). Used for Zarr granules and for the cube an append
    writes to."""
    where = where or store_label(store)
    layout = _zarr_layout(store, where)

    def open_group(path: str) -> xr.Dataset:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # "no consolidated metadata"
                return xr.open_dataset(
                    store,
                    engine="zarr",
                    group=path or None,
                    decode_cf=False,
                    chunks=None,
                )
        except Exception as exc:
            raise AccumulusError(f"{where}: cannot read it as a Zarr dataset: {exc}") from None

    return _tree_dataset(open_group, layout, group, dim, where)


# Groups ------------------------------------------------------------------------------------

# Per group path ("" for the root): each variable's dimensions.
Layout = dict[str, dict[str, tuple[str, ...]]]


@dataclass(frozen=True)
class Tree:
    """A group and its nested groups read as one Dataset."""

    dataset: xr.Dataset  # CF-encoded; nested variables named "Intermediate/IRprecipitation"
    paths: dict[str, str]  # variable -> its path in the source
    group_attrs: dict[str, dict[str, Any]]  # nested group (relative path) -> its attributes


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
        item, group = item.item, item.group if group is None else group
    name = granule_name(item)
    if isinstance(item, xr.Dataset):
        return normalize_group(group) if group else ""
    kind, where = _locate(item)
    if kind == "zarr":
        store = _zarr_store(where, storage_options, allow_references, name)
        layout = _zarr_layout(store, f"granule {name}")
    else:
        with _netcdf_file(where, name) as file:
            layout = _netcdf_layout(file)
    if group is not None:
        return _existing_group(layout, group, f"granule {name}")
    holders = [g for g, variables in layout.items() if any(dim in d for d in variables.values())]
    if not holders and any(layout[g] for g in layout if g):
        dims = "; ".join(
            f"{g or '/'}: {', '.join(sorted({d for v in layout[g].values() for d in v}))}"
            for g in sorted(layout)
            if layout[g]
        )
        raise AccumulusError(
            f"granule {name}: no variable has the dimension {dim!r} to append along; "
            f"dimensions by group: {dims}"
        )
    if not holders or "" in holders:
        return ""  # the root, as before groups: its checks name what is missing
    top = [g for g in holders if not any(g.startswith(h + "/") for h in holders)]
    return pick_group(top, f"variables along {dim!r}", f"granule {name}")


def _existing_group(layout: Layout, group: str, where: str) -> str:
    path = normalize_group(group)
    if path not in layout:
        listed = ", ".join(g or "/" for g in sorted(layout))
        raise AccumulusError(f"{where}: no group {group!r}; its groups are {listed}")
    return path


def _netcdf_declared(file: Any, group: str) -> list[DeclaredVariable]:
    """The variables of ``group``, its nested groups and its ancestors as the file's
    metadata declares them (nothing is read)."""
    out = []
    pending = [file]
    while pending:
        node = pending.pop()
        pending.extend(node.groups.values())
        if not _read_with(node.path.strip("/"), group):
            continue
        for name, var in node.variables.items():
            try:
                chunking = var.chunking()
            except Exception:  # netCDF-3: no chunks (some versions say None, others raise)
                chunking = None
            out.append(
                DeclaredVariable(
                    name=str(name),
                    dims=_named(tuple(var.dimensions), getattr(var, "DimensionNames", None)),
                    shape=tuple(int(n) for n in var.shape),
                    itemsize=itemsize(var.dtype),
                    chunks=tuple(chunking) if isinstance(chunking, list | tuple) else None,
                )
            )
    return out


def _read_with(path: str, group: str) -> bool:
    """Whether reading ``group`` reads (some of) group ``path``: itself, a group nested in
    it, or an ancestor (whose coordinates it may take)."""
    return not group or path == group or path.startswith(group + "/") or path in ancestors_of(group)


def _netcdf_layout(file: Any) -> Layout:
    layout: Layout = {}
    pending = [file]
    while pending:
        node = pending.pop()
        layout[node.path.strip("/")] = {
            v: _named(tuple(var.dimensions), getattr(var, "DimensionNames", None))
            for v, var in node.variables.items()
        }
        pending.extend(node.groups.values())
    return layout


def _zarr_layout(store: Store, where: str) -> Layout:
    from accumulus.accumulation.model.spec import GROUP_SUFFIX

    try:
        with accumulus_scope():
            root = zarr.open_group(store, mode="r")
            members = list(root.members(max_depth=None))
    except Exception as exc:
        raise AccumulusError(f"{where}: cannot read it as a Zarr dataset: {exc}") from None
    layout: Layout = {"": {}}
    for path, node in members:
        parent, _, leaf = path.rpartition("/")
        if any(part.endswith(GROUP_SUFFIX) for part in path.split("/")):
            continue  # accumulations are rebuilt by the cube, not copied
        if isinstance(node, zarr.Group):
            layout.setdefault(path, {})
        else:
            layout.setdefault(parent, {})[leaf] = dimension_names(node)
    return layout


def _tree_dataset(
    open_group: Callable[[str], xr.Dataset],
    layout: Layout,
    group: str,
    dim: str | None,
    where: str,
    close_source: Callable[[], None] | None = None,
) -> Tree:
    """``group`` and its nested groups with variables along ``dim`` (with variables at all,
    when None) as one flat Dataset (nested variables named by path relative to ``group``),
    with the coordinate variables that an ancestor group defines for their dimensions."""
    top = _existing_group(layout, group, where)
    below = top + "/" if top else ""
    nested = sorted(
        g
        for g, variables in layout.items()
        if g.startswith(below)
        and g != top
        and variables
        and (dim is None or any(dim in dims for dims in variables.values()))
    )
    opened: list[xr.Dataset] = []
    variables: dict[str, xr.Variable] = {}
    paths: dict[str, str] = {}
    group_attrs: dict[str, dict[str, Any]] = {}
    try:
        for path in [top, *nested]:
            dataset = _with_dimension_names(open_group(path))
            opened.append(dataset)
            check_names(where, map(str, dataset.variables), map(str, dataset.dims))
            relative = path[len(top) :].strip("/")
            if relative:
                group_attrs[relative] = dict(dataset.attrs)
            for name, var in dataset.variables.items():
                flat = f"{relative}/{name}" if relative else str(name)
                variables[flat] = var
                paths[flat] = f"{path}/{name}" if path else str(name)
        dataset = _dataset(variables, opened[0].attrs, where)
        if any(dim not in dataset.variables for dim in dataset.dims):
            ancestors = [_with_dimension_names(open_group(a)) for a in ancestors_of(top)]
            opened.extend(ancestors)
            inherited = inherited_coordinates(dataset, ancestors)
            for name, var in inherited.items():
                variables[name] = var
                source = next(a for a in ancestors_of(top) if name in layout[a])
                paths[name] = f"{source}/{name}" if source else name
            dataset = _dataset(variables, opened[0].attrs, where)
    except BaseException:
        for each in opened:
            each.close()
        raise

    def close() -> None:
        for each in opened:
            each.close()
        if close_source is not None:
            close_source()

    dataset.set_close(close)
    return Tree(dataset, paths, group_attrs)


def _dataset(variables: Mapping[str, xr.Variable], attrs: Mapping, where: str) -> xr.Dataset:
    try:
        return xr.Dataset(dict(variables), attrs=dict(attrs))
    except ValueError as exc:  # the groups disagree on a dimension's size
        raise AccumulusError(f"{where}: its groups do not fit together: {exc}") from None


def _with_dimension_names(dataset: xr.Dataset) -> xr.Dataset:
    """Variables without dimension scales get netcdf-c's phony dimensions; GPM files name
    their dimensions in each variable's ``DimensionNames`` attribute ("nscan,npixel")."""
    renamed = {}
    for name, var in dataset.variables.items():
        names = _named(tuple(map(str, var.dims)), var.attrs.get("DimensionNames"))
        if names != var.dims:
            copy = var.copy(deep=False)
            copy.dims = names
            renamed[name] = copy
    if not renamed:
        return dataset
    variables = {name: renamed.get(name, var) for name, var in dataset.variables.items()}
    result = xr.Dataset(variables, attrs=dataset.attrs)
    result.set_close(dataset.close)
    return result


def _named(dims: tuple[str, ...], declared: Any) -> tuple[str, ...]:
    names = _dimension_names(declared)
    if len(names) == len(dims) and any(d.startswith(_PHONY_DIMENSION) for d in dims):
        return tuple(names)
    return dims


def _dimension_names(value: Any) -> list[str]:
    if isinstance(value, bytes | np.bytes_):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return []
    return [part.strip() for part in value.split(",") if part.strip()]


def _open_dataset(dataset: xr.Dataset) -> Granule:
    """An in-memory Dataset is encoded the way ``to_zarr`` would encode it (its variables'
    ``encoding`` decides time units, dtypes, fill values)."""
    name = granule_name(dataset)
    check_names(f"granule {name}", map(str, dataset.variables), map(str, dataset.dims))
    try:
        variables, attrs = xr.conventions.cf_encoder(dict(dataset.variables), dict(dataset.attrs))
        encoded = xr.Dataset(variables, attrs=attrs).load()
    except Exception as exc:
        raise AccumulusError(f"granule {name}: cannot encode it for storage: {exc}") from None
    digest = hashlib.sha256()
    size = 0
    for key in sorted(encoded.variables):
        var = encoded.variables[key]
        header = {"name": key, "dims": var.dims, "dtype": str(var.dtype), "attrs": var.attrs}
        digest.update(json.dumps(header, sort_keys=True, default=str).encode())
        values = np.ascontiguousarray(var.values)
        digest.update(values.tobytes() if values.dtype != object else repr(values).encode())
        size += values.nbytes
    checksum = f"sha256:{digest.hexdigest()}"
    if name == "xarray.Dataset":
        name = f"xarray.Dataset-{checksum[7:19]}"
    return Granule(name, size, checksum, encoded, "dataset", dataset)


# Compression ----------------------------------------------------------------------------------


def _netcdf_chains(
    path: Path, name: str, zarr_format: int, group: str = ""
) -> dict[str, CodecChain | None]:
    """Per variable path in the file, its codec chain."""
    from accumulus.ingest.convert import plan_conversion

    if not h5py.is_hdf5(path):
        return {}  # netCDF-3: never compressed; the cube gets zarr's default compression
    try:
        plan = plan_conversion(path, zarr_format=zarr_format, warn=False, group=group)
    except AccumulusError as exc:
        raise AccumulusError(f"granule {name}: cannot keep its compression: {exc}") from None
    return {array.path: list(array.codecs) for array in plan.arrays}


def _zarr_chains(store: Store) -> dict[str, CodecChain | None]:
    """Per array path in the store, its codec chain."""
    chains: dict[str, CodecChain | None] = {}
    with accumulus_scope():
        group = zarr.open_group(store, mode="r")
        arrays = [(p, n) for p, n in group.members(max_depth=None) if isinstance(n, zarr.Array)]
        for name, array in arrays:
            document = array.metadata.to_dict()
            try:
                if document.get("zarr_format") == 2:
                    chains[name] = join_v2(document.get("filters"), document.get("compressor"))
                else:
                    chains[name] = join_v3(document["codecs"])
            except FilterError:
                chains[name] = None  # a codec without a numcodecs form: the store's default
    return chains


def _dataset_chain(encoding: Mapping[str, Any]) -> CodecChain | None:
    codecs = encoding.get("compressors") or encoding.get("compressor")
    if codecs is None and not encoding.get("filters"):
        return None
    codecs = codecs if isinstance(codecs, list | tuple) else [codecs] if codecs else []
    filters = list(encoding.get("filters") or [])
    try:
        return [c.get_config() for c in [*filters, *codecs]]
    except AttributeError:  # zarr v3 codec objects: no numcodecs form
        return None
