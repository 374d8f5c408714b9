"""Rewriting a shard so that a reader of its previous version still reads it right.

A reader of a sharded array reads a shard's index (one request), then the byte ranges of the
inner chunks it needs (more requests). An append rewrites the cube's partial last shard, and
zarr lays a shard out afresh each time (inner chunks in Morton order, new ones between old
ones), so a reader holding the old index between its two requests would read other bytes: a
decoding error, or another inner chunk's values without any error.

``StableShardStore`` wraps the store an append writes to. Every shard zarr writes over a
stored one, within the array's stored shape, is laid out again by ``stable_layout``: each
inner chunk of the stored version keeps its bytes at its offset; an inner chunk that is new
or changed goes into space no inner chunk of the stored version uses (space only older
versions used, else past them); the index goes last (or first, ``index_location="start"``),
encoded by zarr's sharding codec. The object is still replaced in one piece (a rename on a
local disk, one PUT on object storage), so a reader holding either the old index or the new
one reads right values, with zarr-python and xarray as with accumulus. Shards past the
stored shape have no reader and are written as zarr lays them out.

Dead bytes: the versions of changed inner chunks that the current index no longer names are
kept until the next rewrite of the shard, which may reuse their space. A reader that holds an
index across *two* rewrites of the same shard (two commits) is not protected.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from zarr.abc.store import ByteRequest, Store
from zarr.codecs import ShardingCodec
from zarr.codecs.sharding import MAX_UINT_64, _ShardIndex
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.core.chunk_grids import ChunkGrid
from zarr.core.metadata import ArrayV3Metadata

from accumulus.grid import sharding_of
from accumulus.stores.base import DelegatingStore
from accumulus.stores.keys import PREFIX, is_metadata_key

_GROUP = "group"  # a node that holds others
# Shards kept as stored, for the layout of their next rewrite without reading them again.
HELD_BYTES = 256 * 2**20


@dataclass(frozen=True)
class _Sharded:
    """What a sharded array's stored metadata says about its shards."""

    metadata: ArrayV3Metadata
    sharding: ShardingCodec
    grid: ChunkGrid  # the shards within the stored shape


_Node = _Sharded | str | None  # a sharded array, another node (_GROUP, "array"), nothing


class StableShardStore(DelegatingStore):
    """``store``, whose shards are rewritten by ``stable_layout`` when they replace one that
    readers may hold the index of. Reads pass through; the shards last read whole or written
    are kept (up to ``HELD_BYTES``): zarr reads a partial shard whole before rewriting it,
    and a shard written partial at one commit is rewritten at the next, so that the layout
    of the rewrite needs no second read. Its writes go through ``set``, where shards are
    laid out (its ``set_sync`` does not pass through)."""

    sync_reads_pass_through: ClassVar[bool] = True

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self._nodes: dict[str, _Node] = {}  # by path ("" the root), from its zarr.json
        self._held: OrderedDict[str, Buffer] = OrderedDict()  # shards as stored, by key
        self._guard = threading.Lock()

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        value = await self._store.get(key, prototype, byte_range)
        if byte_range is None and value is not None and await self._shard(key) is not None:
            self._hold(key, value)
        return value

    async def set(self, key: str, value: Buffer) -> None:
        if is_metadata_key(key):
            await self._store.set(key, value)
            self._learn(key, value)
            return
        found = await self._shard(key)
        if found is None:
            await self._store.set(key, value)
            return
        _, sharded, coords = found
        shard = sharded.grid[coords]
        if shard is not None:  # within the stored shape: readers may hold its index
            per_shard = tuple(
                s // c for s, c in zip(shard.codec_shape, sharded.sharding.chunk_shape, strict=True)
            )
            old = self._stored(key)
            if old is None:
                old = await self._store.get(key, default_buffer_prototype())
            value = await stable_layout(sharded.sharding, per_shard, old, value)
        await self._store.set(key, value)
        self._hold(key, value)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        await self._store.set_if_not_exists(key, value)
        self._forget(_node_path(key) if is_metadata_key(key) else key)  # looked up again

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        for key, value in values:
            await self.set(key, value)

    async def delete(self, key: str) -> None:
        await self._store.delete(key)
        self._forget(_node_path(key) if is_metadata_key(key) else key)

    async def delete_dir(self, prefix: str) -> None:
        await self._store.delete_dir(prefix)
        self._forget(prefix)

    # ----------------------------------------------------------------------------------------

    async def _shard(self, key: str) -> tuple[str, _Sharded, tuple[int, ...]] | None:
        """The sharded array ``key`` is a shard of: its path and metadata, and the shard's
        coordinates; None for any other key."""
        if key.startswith(PREFIX) or is_metadata_key(key):
            return None
        parts = key.split("/")
        for i in range(len(parts)):
            path = "/".join(parts[:i])
            node = await self._node(path)
            if isinstance(node, _Sharded):
                rest = "/".join(parts[i:])
                try:
                    coords = node.metadata.chunk_key_encoding.decode_chunk_key(rest)
                except (ValueError, NotImplementedError):  # not a key of this encoding; or
                    return None  # an encoding that cannot decode keys (zarr's base class)
                if len(coords) != len(node.metadata.shape):
                    return None
                return path, node, coords
            if node != _GROUP:
                return None
        return None

    async def _node(self, path: str) -> _Node:
        if path not in self._nodes:
            key = f"{path}/zarr.json" if path else "zarr.json"
            value = await self._store.get(key, default_buffer_prototype())
            self._nodes[path] = _parse_node(value)
        return self._nodes[path]

    def _learn(self, key: str, value: Buffer) -> None:
        """Metadata written through this store: the node's new shape (and kind)."""
        if key.rsplit("/", 1)[-1] == "zarr.json":
            self._nodes[_node_path(key)] = _parse_node(value)

    def _stored(self, key: str) -> Buffer | None:
        with self._guard:
            return self._held.get(key)

    def _hold(self, key: str, value: Buffer) -> None:
        with self._guard:
            self._held[key] = value
            self._held.move_to_end(key)
            total = sum(len(v) for v in self._held.values())
            while total > HELD_BYTES and len(self._held) > 1:
                total -= len(self._held.popitem(last=False)[1])

    def _forget(self, prefix: str) -> None:
        """Drop what is known of ``prefix`` and the keys under it."""
        with self._guard:
            for path in [p for p in self._nodes if _under(p, prefix)]:
                del self._nodes[path]
            for key in [k for k in self._held if _under(k, prefix)]:
                del self._held[key]


def _node_path(key: str) -> str:
    """The node a metadata document describes ("" for the root)."""
    return key.rsplit("/", 1)[0] if "/" in key else ""


def _under(path: str, prefix: str) -> bool:
    prefix = prefix.rstrip("/")
    return not prefix or path == prefix or path.startswith(f"{prefix}/")


def _parse_node(value: Buffer | None) -> _Node:
    if value is None:
        return None
    try:
        document = json.loads(value.to_bytes())
    except ValueError:
        return None
    if not isinstance(document, dict) or document.get("zarr_format") != 3:
        return None
    if document.get("node_type") != "array":
        return _GROUP
    try:
        metadata = ArrayV3Metadata.from_dict(document)
    except Exception:  # zarr's parsing errors (ValueError, TypeError, KeyError, its own):
        # not for zarr-python to read, nor to lay out
        return "array"
    sharding = sharding_of(metadata)
    if sharding is None:
        return "array"
    return _Sharded(metadata, sharding, ChunkGrid.from_metadata(metadata))


async def stable_layout(
    sharding: ShardingCodec, per_shard: tuple[int, ...], old: Buffer | None, new: Buffer
) -> Buffer:
    """``new``, a shard as zarr encoded it, laid out again so that every inner chunk that
    ``old`` (the stored shard it replaces) holds keeps its bytes at its offset. An inner
    chunk of ``new`` whose bytes equal ``old``'s for the same place stays where ``old`` has
    it; the others go first-fit into the space no inner chunk of ``old`` uses, largest
    first, else past them. ``per_shard``: inner chunks per shard along each dimension."""
    if old is None:
        return new
    size = sharding._shard_index_size(per_shard)
    try:
        before = (await _index(sharding, per_shard, old, size)).reshape(-1, 2)
    except Exception:  # zarr's sharding codec's errors on an index it cannot decode (crc32c):
        # not a shard zarr reads, so no reader can hold an index of it
        return new
    after = (await _index(sharding, per_shard, new, size)).reshape(-1, 2)
    old_bytes, new_bytes = old.as_numpy_array(), new.as_numpy_array()
    layout = np.full_like(after, MAX_UINT_64)
    kept = before[before[:, 0] != MAX_UINT_64]
    placing = []
    for i, (offset, length) in enumerate(after.tolist()):
        if offset == MAX_UINT_64:
            continue
        was_offset, was_length = before[i].tolist()
        if was_length == length and np.array_equal(
            old_bytes[was_offset : was_offset + was_length], new_bytes[offset : offset + length]
        ):
            layout[i] = before[i]
        else:
            placing.append(i)
    start = size if sharding.index_location == "start" else 0
    free = _free_space(kept, start)
    for i in sorted(placing, key=lambda i: -int(after[i, 1])):
        layout[i] = (_take(free, int(after[i, 1])), after[i, 1])
    present = layout[layout[:, 0] != MAX_UINT_64]
    end = max([start, *_ends(present), *_ends(kept)])
    out = np.zeros(end + (0 if sharding.index_location == "start" else size), dtype=np.uint8)
    for offset, length in kept.tolist():
        out[offset : offset + length] = old_bytes[offset : offset + length]
    for i in placing:
        (offset, length), (to, _) = after[i].tolist(), layout[i].tolist()
        out[to : to + length] = new_bytes[offset : offset + length]
    index = await sharding._encode_shard_index(
        _ShardIndex(per_shard, layout.reshape((*per_shard, 2)))
    )
    where = 0 if sharding.index_location == "start" else end
    out[where : where + size] = index.as_numpy_array()
    return default_buffer_prototype().buffer.from_array_like(out)


async def _index(
    sharding: ShardingCodec, per_shard: tuple[int, ...], shard: Buffer, size: int
) -> np.ndarray:
    """A shard's index: offset and length of each inner chunk (MAX_UINT_64 when absent)."""
    if len(shard) < size:
        raise ValueError("shorter than its index")
    part = shard[:size] if sharding.index_location == "start" else shard[len(shard) - size :]
    decoded = await sharding._decode_shard_index(part, per_shard)
    return decoded.offsets_and_lengths


def _ends(intervals: np.ndarray) -> list[int]:
    return (intervals[:, 0] + intervals[:, 1]).tolist() if len(intervals) else []


def _free_space(kept: np.ndarray, start: int) -> list[list[int]]:
    """The gaps ``[begin, end]`` between the byte ranges ``kept`` from ``start`` on; the
    last is open (``end`` -1)."""
    free, at = [], start
    for offset, length in sorted(kept.tolist()):
        if offset > at:
            free.append([at, offset])
        at = max(at, offset + length)
    free.append([at, -1])
    return free


def _take(free: list[list[int]], length: int) -> int:
    """The start of the first gap ``length`` bytes fit in, taken from it."""
    for gap in free:
        if gap[1] == -1 or gap[1] - gap[0] >= length:
            begin = gap[0]
            gap[0] += length
            return begin
    raise AssertionError("the last gap is open")
