"""Zarr stores as accumulus opens and wraps them, one store per module.

``open_store`` turns what a user types (a directory, ``file://``, a ``.zip`` file,
``memory://``, ``s3://…``, a kerchunk reference set) into a zarr ``Store``. Every wrapper is
a ``DelegatingStore`` (``base``), whose every read of a key passes through its own ``get``;
whether a key holds a metadata document is one rule (``keys.is_metadata_key``).

- ``counting.CountingStore``: counts requests and bytes, adds latency (benchmarks, tests);
- ``group.GroupStore``: a group of a store as a store of its own;
- ``guarded.GuardedStore``, ``guarded.GuardedLocalStore``: one service request's reads,
  stoppable and bounded (``guarded.guarded`` chooses);
- ``inferred_conventions.InferredConventionsStore``: the ZEP 5 generator's stores, with the
  dimensions and missing values they lack;
- ``local.LeanLocalStore``: the local directory every path opens;
- ``nczarr_compat.NCZarrCompatStore``, ``zep3.Zep3DraftStore``: netcdf-c's and the ZEP 3
  draft's metadata as zarr reads it (``rewriting.MetadataRewritingStore``);
- ``snapshot.PinnedMetadataStore``: metadata pinned to one snapshot;
- ``stable_shards.StableShardStore``: shards rewritten so that readers of the old one read
  right;
- ``reference_sets``: kerchunk reference sets as read-only stores, reading only where they
  may (``reference_targets``, ``safe_reads``).
"""

from accumulus.stores.base import (
    DelegatingStore,
    below_wrappers,
    innermost,
    reads_synchronously,
    writes_synchronously,
)
from accumulus.stores.counting import CountingStore, RequestCounts
from accumulus.stores.group import GroupStore
from accumulus.stores.guarded import GuardedStore
from accumulus.stores.inferred_conventions import InferredConventionsStore
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.local import LeanLocalStore
from accumulus.stores.locations import StoreNotFoundError
from accumulus.stores.nczarr_compat import NCZarrCompatStore
from accumulus.stores.opening import Mode, open_store, store_label
from accumulus.stores.reference_sets import open_reference_file
from accumulus.stores.rewriting import MetadataRewritingStore
from accumulus.stores.snapshot import MetadataSnapshot, PinnedMetadataStore
from accumulus.stores.stable_shards import StableShardStore
from accumulus.stores.zep3 import Zep3DraftStore

__all__ = [
    "CountingStore",
    "DelegatingStore",
    "GroupStore",
    "GuardedStore",
    "InferredConventionsStore",
    "LeanLocalStore",
    "MetadataRewritingStore",
    "MetadataSnapshot",
    "Mode",
    "NCZarrCompatStore",
    "PinnedMetadataStore",
    "RequestCounts",
    "StableShardStore",
    "StoreNotFoundError",
    "Zep3DraftStore",
    "below_wrappers",
    "innermost",
    "is_metadata_key",
    "open_reference_file",
    "open_store",
    "reads_synchronously",
    "store_label",
    "writes_synchronously",
]
