"""A read-through store wrapper that rewrites metadata documents as they are read.

Used to read stores whose metadata other tools wrote in a form zarr-python reads wrongly
(netcdf-c's shuffle, ``nczarr_compat``) or not at all (the ZEP 3 draft grid, ``zep3``).
The bytes in the store are never changed; chunk reads pass through untouched.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype

from accumulus.errors import AccumulusError
from accumulus.stores.base import DelegatingStore
from accumulus.stores.keys import is_metadata_key


def parse_metadata(key: str, content: bytes) -> Any:
    """A metadata document's JSON, or an error naming ``key`` (zarr's would not)."""
    try:
        return json.loads(content)
    except ValueError as exc:
        reason = getattr(exc, "msg", "cannot be decoded")
        raise AccumulusError(f"metadata document {key} is not valid JSON ({reason})") from None


class MetadataRewritingStore(DelegatingStore):
    """Serves the metadata documents named in ``documents`` through ``rewrite``, each
    metadata document checked to be JSON as it is read. A document read again with the
    same bytes (an open datacube reads the root documents for every query) is served as it
    was, without parsing it again."""

    sync_reads_pass_through: ClassVar[bool] = True
    sync_writes_pass_through: ClassVar[bool] = True
    rewrites_metadata_only: ClassVar[bool] = True
    passes_other_reads: ClassVar[bool] = True

    documents: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        # The last bytes read at each metadata key and the bytes served for them.
        self._served: dict[str, tuple[bytes, bytes]] = {}

    def rewrite(self, key: str, document: dict[str, Any]) -> dict[str, Any]:
        """The document as zarr should see it (``document`` itself when nothing changes)."""
        raise NotImplementedError

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        value = await self._store.get(key, prototype, byte_range)
        return self._rewritten(key, value, prototype, byte_range)

    def serves_own_bytes(self, key: str) -> bool:
        return is_metadata_key(key)

    def read_sync(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
    ) -> Buffer | None:
        value = super().read_sync(key, prototype, byte_range)
        return self._rewritten(key, value, prototype, byte_range)

    def _rewritten(
        self,
        key: str,
        value: Buffer | None,
        prototype: BufferPrototype,
        byte_range: ByteRequest | None,
    ) -> Buffer | None:
        if value is None or byte_range is not None or not is_metadata_key(key):
            return value
        content = value.to_bytes()
        served = self._served.get(key)
        if served is not None and served[0] == content:
            return value if served[1] is served[0] else prototype.buffer.from_bytes(served[1])
        document = parse_metadata(key, content)
        name = key.rsplit("/", 1)[-1]
        fixed = document if name not in self.documents else self.rewrite(key, document)
        result = content if fixed == document else json.dumps(fixed).encode()
        if len(self._served) >= 64:
            self._served.clear()
        self._served[key] = (content, result)
        return value if result is content else prototype.buffer.from_bytes(result)
