"""Create a cube from granules and append to it: resumable, safe for readers, accumulations
kept current.

``append`` (``run.py``, the one entry point) runs five phases under the store's lock
(``accumulus.stores.lock``), each a module of this package with one function that takes the
previous phase's result, an immutable value (``values.py``), and returns its own:

1. ``recover`` -> ``Recovered``: the journal (``journal.py``) says how far the cube is
   committed; what an interrupted run left past it is cut back, a commit interrupted after
   its journal write is finished, an interrupted creation is wiped.
2. ``check`` -> ``Checked``: every granule is opened, checked against the cube
   (``conform.py``) and read whole; granules already in the journal are skipped, overlaps
   refused (or skipped with ``skip_existing``). Nothing has been written yet.
3. ``create`` -> ``Committed``: a new cube's arrays from the first granule, empty along the
   append dimension (chunks, and shards if asked, chosen by ``layout.py``).
4. ``write`` -> ``Written``: the granules are read again one at a time and their values
   written in whole chunks past the committed extent, where no reader looks
   (``unpublished_writer.py``), with a ``commit`` whenever a chunk of data has filled and
   at the end. In a sharded cube the unit written and committed is the shard (one object):
   a shard is written once it is full, the partial last one at each commit (zarr keeps its
   old inner chunks), and shards before the committed extent's are never touched.
5. ``commit`` -> ``Journal``: partial last chunks, arrays resized, the journal (the commit
   point), accumulation groups updated incrementally, consolidated metadata last.

The crash-safety rule of each phase is stated where it is enforced. Together: readers open
the consolidated snapshot, so they see the cube before or after a commit, never in between;
a run killed at any moment is finished by running it again.
"""

from accumulus.ingest.append.run import AppendResult, append

__all__ = ["AppendResult", "append"]
