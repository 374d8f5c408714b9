"""Building and updating accumulation groups: the build or update decided and published
(``accumulate``), the raw data streamed slab by slab with Dask (``stream``) through the
compiled sums (``chunk_sums`` over ``kernel``) into arrays laid out by ``placement`` and
written whole (``encoded_chunks``), and ``verify`` against the raw data."""
