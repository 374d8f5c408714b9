"""Create a cube from granules and append to it (``run.append``)."""

from accumulus.ingest.append.run import AppendResult, append

__all__ = ["AppendResult", "append"]
