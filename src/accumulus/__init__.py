"""accumulus: Zarr datacubes with ZEP 5 chunk-level accumulation.

Fast averages over any ranges of any dimensions, from a handful of chunks instead of a
full scan. ``accumulus.open(store)`` opens a datacube once for many queries; see the README
for the command line and the service.

The public names are imported when first used (PEP 562), so that ``import accumulus.cli``
(every command, ``--help`` included) does not pay for xarray, zarr and Dask until a command
needs them.
"""

from __future__ import annotations

import sys as _sys
from importlib import import_module as _import_module
from types import ModuleType as _ModuleType
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from accumulus.errors import AccumulusError, AccumulusWarning

if _TYPE_CHECKING:
    from accumulus.api import (
        Query,
        accumulate,
        answer,
        append,
        average,
        inspect,
        open,
        query,
        verify,
        verify_sources,
    )
    from accumulus.datacube import Datacube
    from accumulus.ingest.virtual import append_virtual
    from accumulus.rechunk import rechunk

# Public name -> the module that defines it.
_LAZY = {
    "Query": "accumulus.api",
    "accumulate": "accumulus.api",
    "answer": "accumulus.api",
    "append": "accumulus.api",
    "average": "accumulus.api",
    "inspect": "accumulus.api",
    "open": "accumulus.api",
    "query": "accumulus.api",
    "verify": "accumulus.api",
    "verify_sources": "accumulus.api",
    "Datacube": "accumulus.datacube",
    "append_virtual": "accumulus.ingest.virtual",
    "rechunk": "accumulus.rechunk",
}

__all__ = [
    "AccumulusError",
    "AccumulusWarning",
    "Datacube",
    "Query",
    "accumulate",
    "answer",
    "append",
    "append_virtual",
    "average",
    "inspect",
    "open",
    "query",
    "rechunk",
    "verify",
    "verify_sources",
]


def __getattr__(name: str) -> _Any:
    if name == "__version__":
        from importlib.metadata import version

        globals()[name] = version("accumulus")
        return globals()[name]
    if name not in _LAZY:
        raise AttributeError(f"module 'accumulus' has no attribute {name!r}")
    value = getattr(_import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    """The public names and the module's own dunders: not the submodules imported, nor
    what this file imports."""
    return sorted({*__all__, "__version__", *(n for n in globals() if n.startswith("__"))})


class _Package(_ModuleType):
    def __setattr__(self, name: str, value: _Any) -> None:
        # Importing the submodule accumulus.rechunk binds it here, by its name: keep the
        # function of that name instead (as an eager ``from ... import`` did).
        if isinstance(value, _ModuleType) and name in _LAZY and hasattr(value, name):
            value = getattr(value, name)
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package


class _AccessorOnceXarrayLoads:
    """Registers the ``.accumulus`` accessor of ``xarray.DataArray`` (``accumulus.accessor``)
    when xarray is imported: ``import accumulus`` itself loads no xarray (the command line
    starts without it), yet ``ds.precip.accumulus`` must work whichever was imported first.
    An import hook on ``sys.meta_path`` that sees only the import of ``xarray``, runs it, then
    imports the accessor and takes itself away."""

    def find_spec(self, name: str, path: _Any = None, target: _Any = None) -> _Any:
        if name != "xarray":
            return None
        from importlib.util import find_spec

        _sys.meta_path.remove(self)
        spec = find_spec(name)  # as the other finders find it
        loader = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module: _ModuleType) -> None:
            run(module)
            _import_module("accumulus.accessor")

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if "xarray" in _sys.modules:
    _import_module("accumulus.accessor")
else:
    _sys.meta_path.insert(0, _AccessorOnceXarrayLoads())
