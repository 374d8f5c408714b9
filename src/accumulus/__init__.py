"""accumulus: Zarr datacubes with ZEP 5 chunk-level accumulation.

Fast averages over any ranges of any dimensions, from a handful of chunks instead of a
full scan. ``accumulus.open(store)`` opens a datacube once for many queries; see the README
for the command line and the service.
"""

from accumulus.api import (
    accumulate,
    append,
    average,
    inspect,
    open,
    query,
    verify,
    verify_sources,
)
from accumulus.datacube import Datacube
from accumulus.errors import AccumulusError, AccumulusWarning
from accumulus.ingest.virtual import append_virtual
from accumulus.rechunk import rechunk

__all__ = [
    "AccumulusError",
    "AccumulusWarning",
    "Datacube",
    "accumulate",
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
