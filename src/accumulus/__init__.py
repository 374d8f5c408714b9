"""accumulus: Zarr datacubes with ZEP 5 chunk-level accumulation.

Fast averages over any ranges of any dimensions, from a handful of chunks instead of a
full scan. ``accumulus.open(store)`` opens a datacube once for many queries; see the README
for the command line and the service.

The public names are imported when first used (PEP 562), so that ``import accumulus.cli``
(every command, ``--help`` included) does not pay for xarray, zarr and Dask until a command
needs them.
"""

from __future__ import annotations

import sys
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any

from accumulus.errors import AccumulusError, AccumulusWarning

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'accumulus' has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


class _Package(ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        # Importing the submodule accumulus.rechunk binds it here, by its name: keep the
        # function of that name instead (as an eager ``from ... import`` did).
        if isinstance(value, ModuleType) and name in _LAZY and hasattr(value, name):
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
