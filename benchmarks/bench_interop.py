"""Interop costs, measured against the work a user would otherwise do, in the same run.

1. The NCZarr metadata step (``accumulus.stores.nczarr_metadata``) that every write's final
   consolidation now runs, against that consolidation alone (the floor), on a demo cube with its
   accumulation group: seconds and store requests, locally and with 50 ms per request
   (object storage). The step reads each node's metadata and writes only what changed.
2. Decoding szip, LZF and bitshuffle chunks with accumulus's codecs (imagecodecs) against
   HDF5's own filters reading the same chunks through h5py (the floor: the C filters).

    python benchmarks/bench_interop.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import h5py
import hdf5plugin
import numcodecs
import numpy as np
import zarr

import accumulus
from accumulus.demo import VARIABLE, DemoConfig, demo_dataset, write_demo_cube
from accumulus.filters import dataset_pipeline, for_array, pipeline_to_codecs
from accumulus.filters.builtin import load_hdf5plugin
from accumulus.scope import accumulus_scope
from accumulus.stores.arrays import consolidate
from accumulus.stores.counting import CountingStore
from accumulus.stores.nczarr_metadata import write_nczarr_metadata
from accumulus.stores.opening import open_store
from common import median_seconds, report

LATENCY = 0.05


def consolidation(directory: Path, repeats: int) -> dict:
    path = directory / "cube.zarr"
    write_demo_cube(path, DemoConfig(days=1461, resolution=5.0, chunks=(30, 12, 24)))
    accumulus.accumulate(str(path), VARIABLE, minimal=True)  # the group, NCZarr metadata in step

    def bare(store):
        with accumulus_scope():
            zarr.consolidate_metadata(store)

    out = {"nodes": len(list(zarr.open_group(path, mode="r").members(max_depth=None))) + 1}
    for label, latency in (("local", 0.0), ("latency_50ms", LATENCY)):
        rows = {}
        for name, action in (("consolidate_only", bare), ("with_nczarr_step", consolidate)):
            counting = CountingStore(open_store(str(path), "r+"), latency=latency)
            seconds, _ = median_seconds(lambda a=action, s=counting: a(s), repeats)
            counts = counting.counts
            requests = counts.read_requests + counts.write_requests + counts.list_requests
            rows[name] = {
                "seconds_median": round(seconds, 4),
                "requests": requests / repeats,
                "writes": counts.write_requests / repeats,
            }
        rows["step_over_consolidation"] = round(
            rows["with_nczarr_step"]["seconds_median"] / rows["consolidate_only"]["seconds_median"],
            2,
        )
        out[label] = rows
    # Writes when the store is in step: none (checked, not assumed).
    counting = CountingStore(open_store(str(path), "r+"))
    write_nczarr_metadata(counting)
    out["writes_when_in_step"] = counting.counts.write_requests
    return out


FILTERS = {
    "szip_nn16": {"compression": "szip", "compression_opts": ("nn", 16)},
    "lzf": {"compression": "lzf"},
    "bitshuffle_lz4": dict(hdf5plugin.Bitshuffle(cname="lz4")),
    "bitshuffle_zstd": dict(hdf5plugin.Bitshuffle(cname="zstd", clevel=3)),
}


def codecs(directory: Path, repeats: int) -> dict:
    load_hdf5plugin()
    # A year of the demo's daily field at 1°: float32, chunks of 30 x 90 x 180 (1.9 MiB).
    values = demo_dataset(DemoConfig(days=360, resolution=1.0))[VARIABLE].values
    values = np.nan_to_num(values, nan=-9999.0).astype("f4")
    chunks = (30, 90, 180)
    out = {"chunk_mib": round(np.prod(chunks) * 4 / 2**20, 2), "chunks": 0}
    with h5py.File(directory / "filters.h5", "w") as file:
        for name, options in FILTERS.items():
            dataset = file.create_dataset(name, data=values, chunks=chunks, **options)
            configs = for_array(
                pipeline_to_codecs(dataset_pipeline(dataset)), dataset.dtype, values.shape, chunks
            )
            (codec,) = [numcodecs.get_codec(c) for c in configs]
            offsets = [
                dataset.id.get_chunk_info(i).chunk_offset
                for i in range(dataset.id.get_num_chunks())
            ]
            raw = [bytes(dataset.id.read_direct_chunk(o)[1]) for o in offsets]
            if name.startswith("szip"):  # the file's own scanline (HDF5's rule), not netcdf-c's
                (stage,) = dataset_pipeline(dataset)
                codec = numcodecs.get_codec(
                    {"id": "szip", "mask": stage.params[0], "pixels-per-block": stage.params[1],
                     "bits-per-pixel": stage.params[2], "pixels-per-scanline": stage.params[3]}
                )  # fmt: skip
            ours, decoded = median_seconds(lambda c=codec, r=raw: [c.decode(b) for b in r], repeats)
            hdf5, _ = median_seconds(lambda d=dataset: d[...], repeats)
            assert np.array_equal(np.frombuffer(decoded[0], "f4"), values[:30, :90, :180].ravel())
            stored = sum(map(len, raw))
            out[name] = {
                "compression_ratio": round(values.nbytes / stored, 2),
                "accumulus_decode_seconds_median": round(ours, 4),
                "hdf5_read_seconds_median": round(hdf5, 4),
                "accumulus_over_hdf5": round(ours / hdf5, 2),
                "accumulus_decode_mib_per_s": round(values.nbytes / 2**20 / ours),
            }
            out["chunks"] = len(raw)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-interop-") as work:
        directory = Path(work)
        report(
            {
                "nczarr_metadata_step": consolidation(directory, args.repeats),
                "hdf5_filter_codecs": codecs(directory, args.repeats),
            }
        )


if __name__ == "__main__":
    main()
