"""Names that can be parts of a cube's paths: variable and dimension names become Zarr
keys (``precip/.zarray``, ``precip_accumulation_group/acc_time_lat``), so a name that is
not a plain path component would write where it should not (``..``, ``a/b``), clash with
the store's own documents (``.zattrs``, ``zarr.json``, accumulus's ``.accumulus``) or make
paths no file system holds. Such names are refused before anything is written."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable

from accumulus.errors import AccumulusError
from accumulus.stores.keys import is_metadata_key

# Bytes of a name: a cube's paths are built from it (``<variable>_accumulation_group``,
# ``acc_<dims>``), and a path component holds 255 on most file systems.
NAME_BYTES = 128


def check_names(where: str, variables: Iterable[str], dims: Iterable[str]) -> None:
    """Refuse variable and dimension names that cannot be components of a Zarr path, nor
    make ZEP 5 array names: empty, ``.``/``..`` or another name starting with a dot (Zarr's
    and accumulus's own documents), with ``/`` or ``\\``, control characters, or longer than
    ``NAME_BYTES`` bytes."""
    for kind, names in (("variable", variables), ("dimension", dims)):
        for name in names:
            problem = _name_problem(str(name))
            if problem:
                raise AccumulusError(
                    f"{where}: {kind} {_shown(str(name))} cannot be a name in a cube: {problem}; "
                    "refused before anything is written"
                )


def _name_problem(name: str) -> str:
    if not name:
        return "it is empty"
    if name.startswith("."):
        return "it starts with a dot, as Zarr's own documents and '..' do"
    if "/" in name or "\\" in name:
        return "a path separator in it would make a group of it"
    if any(unicodedata.category(c) == "Cc" for c in name):
        return "it holds control characters"
    if is_metadata_key(name):  # "zarr.json": the v2 documents start with a dot
        return "it is the name of a Zarr metadata document"
    if len(name.encode()) > NAME_BYTES:
        return (
            f"it is {len(name.encode())} bytes long, and a name may have {NAME_BYTES} (a "
            "cube's paths are made of names)"
        )
    return ""


def _shown(name: str) -> str:
    """A name as messages show it: quoted with escapes, cut when long."""
    return repr(name) if len(name) <= 60 else f"{name[:40]!r}… ({len(name)} characters)"


# A path component: most file systems (and S3 keys' parts, in practice) hold 255 bytes.
COMPONENT_BYTES = 255


def check_component(where: str, name: str) -> None:
    """Refuse a path component accumulus makes from names (an accumulation group or array)
    that a file system cannot hold."""
    if len(name.encode()) > COMPONENT_BYTES:
        raise AccumulusError(
            f"{where}: the name {_shown(name)} made from the names of the variable and its "
            f"dimensions is {len(name.encode())} bytes long; a path component holds "
            f"{COMPONENT_BYTES}: refused before anything is written"
        )
