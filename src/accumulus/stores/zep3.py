"""Reading Zarr v3 stores whose arrays carry the ZEP 3 draft chunk grid.

The ZEP 3 draft (variable chunking) writes a chunk grid as

    "chunk_grid": {"type": "rectangular", "chunk_shape": [[5, 5, 5, 15, 15, 20, 35], 10],
                   "separator": "/"}

and, like the Zarr v3 drafts of its time, keys a chunk as ``"c"`` followed by its coordinates
joined by the separator (chunk (3, 1) is ``c3/1``). zarr-python knows the grid that ZEP 3
became, ``rectilinear`` (the same sizes, run-length encoded), but not the draft's spelling.
``Zep3DraftStore`` presents every such ``zarr.json`` (and the arrays in a group's consolidated
metadata) as a ``rectilinear`` grid, leaving the bytes on disk alone. An array document
without its own ``chunk_key_encoding`` gets the draft's key layout (``Zep3DraftKeys``); one
that has one keeps it. The draft's ``"regular"`` spelling (``type`` and ``chunk_shape`` at the
top) is read the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, TypeGuard

from zarr.core.chunk_key_encodings import ChunkKeyEncoding, SeparatorLiteral, parse_separator
from zarr.registry import register_chunk_key_encoding

from accumulus.errors import AccumulusError
from accumulus.grid import bounds_from_chunk_shape
from accumulus.stores.rewriting import MetadataRewritingStore

DRAFT_GRID_NAMES = ("rectangular", "regular")


@dataclass(frozen=True)
class Zep3DraftKeys(ChunkKeyEncoding):
    """Chunk keys of the Zarr v3 drafts: ``c`` then the coordinates joined by the separator."""

    name: ClassVar[str] = "accumulus.zep3_draft"
    separator: SeparatorLiteral = "/"

    def __post_init__(self) -> None:
        object.__setattr__(self, "separator", parse_separator(self.separator))

    def encode_chunk_key(self, chunk_coords: tuple[int, ...]) -> str:
        return "c" + self.separator.join(map(str, chunk_coords))


register_chunk_key_encoding(Zep3DraftKeys.name, Zep3DraftKeys)


def is_draft_grid(grid: Any) -> TypeGuard[dict[str, Any]]:
    """True for a chunk grid written in the ZEP 3 draft's spelling."""
    if not isinstance(grid, dict):
        return False
    name = grid.get("name", grid.get("type"))
    draft_spelling = "type" in grid or "chunk_shape" in grid or name == "rectangular"
    return name in DRAFT_GRID_NAMES and draft_spelling


def normalize_array_document(document: dict[str, Any], where: str) -> dict[str, Any]:
    """A v3 array document with a ZEP 3 draft grid rewritten as zarr's own grid."""
    grid = document.get("chunk_grid")
    if document.get("node_type") != "array" or not is_draft_grid(grid):
        return document
    chunk_shape = grid.get("chunk_shape", grid.get("configuration", {}).get("chunk_shape"))
    shape = document.get("shape")
    if not isinstance(chunk_shape, list) or not isinstance(shape, list):
        raise AccumulusError(f"{where}: ZEP 3 chunk grid without a chunk_shape list: {grid}")
    try:
        bounds_from_chunk_shape(chunk_shape, shape)
    except ValueError as exc:
        raise AccumulusError(f"{where}: invalid ZEP 3 chunk_shape {chunk_shape}: {exc}") from None
    fixed = dict(document)
    if all(isinstance(c, int) for c in chunk_shape):
        fixed["chunk_grid"] = {"name": "regular", "configuration": {"chunk_shape": chunk_shape}}
    else:
        fixed["chunk_grid"] = {
            "name": "rectilinear",
            "configuration": {"kind": "inline", "chunk_shapes": chunk_shape},
        }
    if "chunk_key_encoding" not in document:
        separator = grid.get("separator", grid.get("configuration", {}).get("separator", "/"))
        fixed["chunk_key_encoding"] = {
            "name": Zep3DraftKeys.name,
            "configuration": {"separator": separator},
        }
    return fixed


def normalize_document(document: dict[str, Any], where: str) -> dict[str, Any]:
    """A ``zarr.json`` document (array, or group with consolidated metadata) normalized."""
    if document.get("node_type") == "array":
        return normalize_array_document(document, where)
    consolidated = document.get("consolidated_metadata")
    if not isinstance(consolidated, dict) or not isinstance(consolidated.get("metadata"), dict):
        return document
    metadata = {
        path: normalize_array_document(child, f"{where} ({path})")
        if isinstance(child, dict)
        else child
        for path, child in consolidated["metadata"].items()
    }
    return {**document, "consolidated_metadata": {**consolidated, "metadata": metadata}}


class Zep3DraftStore(MetadataRewritingStore):
    """A read-through wrapper that serves ZEP 3 draft chunk grids as rectilinear grids."""

    documents = frozenset({"zarr.json"})

    def rewrite(self, key: str, document: dict[str, Any]) -> dict[str, Any]:
        return normalize_document(document, key)
