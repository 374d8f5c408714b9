"""The service's allocator settings (``service/memory.py``), measured by the page faults of a
fresh process: an answer's arrays reuse the memory of those before it, and large arrays still
go back to the system when freed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from accumulus.glibc import allocator

# In a process of its own (the settings hold for a whole process): the page faults of making,
# touching and freeing an array of each size twice, the second time after the first was freed.
SCRIPT = """
import json, resource, sys
import numpy as np
from accumulus.service.memory import tune_allocator

assert tune_allocator()

def faults(size):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    values = np.ones(size, dtype=np.uint8)
    del values
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

print(json.dumps({size: [faults(size), faults(size)] for size in map(int, sys.argv[1:])}))
"""


@pytest.mark.skipif(allocator() is None, reason="glibc's allocator only")
def test_freed_arrays_are_reused_and_large_ones_given_back():
    medium, large = 4 * 2**20, 64 * 2**20
    found = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(medium), str(large)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    faults = {int(size): counts for size, counts in json.loads(found.stdout).items()}
    # A light answer's arrays (a few MB) come back from the heap: no fresh pages the second
    # time (at a 1 MiB mmap threshold each was mapped anew and faulted in again, 514 faults).
    first, again = faults[medium]
    assert first > 100 and again < first / 10
    # A scan's large arrays are the system's pages, given back when freed: faulted in again
    # as the first time (NumPy asks for huge pages for them: fewer faults than 4 KiB pages).
    first, again = faults[large]
    assert first > 100 and again > first / 2
