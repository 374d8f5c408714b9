"""The service's memory (``service/memory.py``): its allocator settings, measured by the page
faults of a fresh process (an answer's arrays reuse the memory of those before it, and large
arrays still go back to the system when freed); what survives a full collection frozen out
of the next ones, and thawed for the garbage a replaced snapshot leaves."""

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


# In a process of its own (the collector's state is the process's): what is frozen, and what
# a full collection then frees.
COLLECTOR_SCRIPT = """
import gc, json, weakref
from accumulus.service import memory
from accumulus.service.memory import freeze_survivors, thaw

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a

found = {}
kept = cycle()
freeze_survivors()
found["frozen_at_start"] = gc.get_freeze_count()
made = [cycle() for _ in range(1000)]  # survive a full collection: frozen after it
gc.collect()
found["frozen_after_full"] = gc.get_freeze_count() - found["frozen_at_start"]
made = [cycle() for _ in range(1000)]  # survive a collection of the middle generation
gc.collect(1)
found["frozen_after_middle"] = gc.get_freeze_count() - found["frozen_at_start"]
gone = weakref.ref(kept)
del kept, made  # garbage in cycles, but frozen: a full collection does not look
gc.collect()
found["freed_while_frozen"] = gone() is None
thaw()
found["frozen_after_thaw"] = gc.get_freeze_count()
gc.collect()
found["freed_after_thaw"] = gone() is None
found["frozen_again"] = gc.get_freeze_count()
memory.THAW_EVERY, memory._FULL_COLLECTIONS[0] = 2, 1  # the next is a THAW_EVERY-th
gc.collect()
found["thawed_by_count"] = gc.get_freeze_count()
print(json.dumps(found))
"""


def test_survivors_of_the_older_generations_collections_are_frozen_until_thawed():
    """Each object is walked by one collection of the older generations at most (a worker's
    260,000 made the 64-client load's tail, and then the 25,000-50,000 its requests leave
    between full collections); garbage in cycles among frozen objects is freed once thawed,
    by a new snapshot or every ``THAW_EVERY``-th full collection."""
    found = json.loads(
        subprocess.run(
            [sys.executable, "-c", COLLECTOR_SCRIPT], capture_output=True, text=True, check=True
        ).stdout
    )
    assert found["frozen_at_start"] > 1000
    assert found["frozen_after_full"] >= 2000  # the 1,000 cycles that survived it
    assert found["frozen_after_middle"] >= 4000  # and the next 1,000, after a younger one
    assert not found["freed_while_frozen"]
    assert found["frozen_after_thaw"] == 0
    assert found["freed_after_thaw"]
    assert 0 < found["frozen_again"] < found["frozen_at_start"] + found["frozen_after_full"]
    assert found["thawed_by_count"] == 0  # (a long uptime without a new snapshot)
