"""Values worked out once per object, remembered by the object's identity.

A query asks the same facts of the same objects again and again (a store's latency, an
array's decoding rate, a coordinate's order): objects an open datacube keeps for its
snapshot. Hashing them (zarr's metadata, a pandas index) costs more than the fact, so they
are remembered by ``id``; each entry keeps its object alive, so no id is reused while it is
remembered. Bounded: past ``limit`` entries, everything is forgotten at once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any


class IdentityMemo[V]:
    """``value(owner, compute, *key)``: ``compute()`` the first time ``owner`` (the very
    object) is asked for with ``key``, the same value after."""

    def __init__(self, limit: int = 256) -> None:
        self._known: dict[tuple[Any, ...], tuple[object, V]] = {}
        self._limit = limit

    def value(self, owner: object, compute: Callable[[], V], *key: Hashable) -> V:
        at = (id(owner), *key)
        known = self._known.get(at)
        if known is not None and known[0] is owner:
            return known[1]
        value = compute()
        if len(self._known) >= self._limit:
            self._known.clear()
        self._known[at] = (owner, value)
        return value
