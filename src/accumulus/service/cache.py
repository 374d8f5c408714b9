"""Answers already given, kept per (dataset, snapshot token, request).

A key holds the snapshot token, so an append (which rewrites the metadata, hence the token)
makes every older answer unreachable; those are dropped as soon as a dataset's newer snapshot
is seen rather than waiting to be pushed out by size, and an answer computed on a snapshot
older than one already seen is not kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from accumulus.service.answers import Answer
from accumulus.service.datasets import DatasetSnapshot

# What an entry costs beyond its body and key text: the dictionary slot, the tuples and
# strings of the key, the Answer object (measured with tracemalloc: about 700 bytes).
ENTRY_OVERHEAD = 1024


def entry_bytes(key: tuple, answer: Answer) -> int:
    """The memory an entry is charged: its bodies, its key's text and the fixed overhead."""
    gzipped = len(answer.gzipped) if answer.gzipped is not None else 0
    return len(answer.body) + gzipped + len(repr(key)) + ENTRY_OVERHEAD


class AnswerCache:
    """Least recently used answers, up to ``max_bytes`` in all (bodies, keys and overhead;
    0 turns it off)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        # key -> (answer, what it is charged: ``entry_bytes``, found once)
        self._answers: OrderedDict[tuple, tuple[Answer, int]] = OrderedDict()
        self._bytes = 0
        self._newest: dict[str, int] = {}  # dataset -> newest snapshot generation seen
        self._lock = threading.Lock()

    def get(self, snapshot: DatasetSnapshot, request_key: tuple) -> Answer | None:
        key = (snapshot.dataset, snapshot.token, request_key)
        with self._lock:
            self._see(snapshot)
            found = self._answers.get(key)
            if found is None:
                return None
            self._answers.move_to_end(key)
            return found[0]

    @property
    def charged_bytes(self) -> int:
        return self._bytes

    def put(self, snapshot: DatasetSnapshot, request_key: tuple, answer: Answer) -> None:
        key = (snapshot.dataset, snapshot.token, request_key)
        cost = entry_bytes(key, answer)
        if cost > self.max_bytes:
            return
        with self._lock:
            self._see(snapshot)
            if snapshot.generation < self._newest[snapshot.dataset] or key in self._answers:
                return  # computed on a snapshot already superseded, or already here
            self._answers[key] = (answer, cost)
            self._bytes += cost
            while self._bytes > self.max_bytes:
                self._bytes -= self._answers.popitem(last=False)[1][1]

    def __len__(self) -> int:
        return len(self._answers)

    def _see(self, snapshot: DatasetSnapshot) -> None:
        dataset = snapshot.dataset
        if snapshot.generation <= self._newest.get(dataset, -1):
            return
        self._newest[dataset] = snapshot.generation
        stale = [k for k in self._answers if k[0] == dataset and k[1] != snapshot.token]
        for key in stale:
            self._bytes -= self._answers.pop(key)[1]
