"""Interruptions at every step of an append, made deterministic: after each, readers see a
prefix of the data (accumulations agreeing), and re-running the same command finishes the
work without duplicates. (``test_kill.py`` does the same with kill -9 at random moments.)"""

from __future__ import annotations

import json

import pytest

import accumulus
from accumulus.ingest.append import commit as commit_module
from accumulus.ingest.append import create as create_module
from accumulus.ingest.append import unpublished_writer as writer_module

from .helpers import VAR, check_visible, truth, write_granule


class Crash(BaseException):
    """Stands for the process dying: nothing in accumulus catches it."""


def crash_on_call(function, n: int):
    calls = {"count": 0}

    def wrapper(*args, **kwargs):
        calls["count"] += 1
        if calls["count"] == n:
            raise Crash(f"simulated crash in {function.__name__}")
        return function(*args, **kwargs)

    return wrapper


@pytest.fixture
def cube(tmp_path):
    """A cube of 6 steps (chunks of 4) with accumulations, and three granules to append:
    the append commits at 9 (chunk 1 filled), 12 (chunk 2 filled) and 15 (the end)."""
    t = truth(15)
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), write_granule(tmp_path / "a.nc", t, 0, 6), chunks={"time": 4})
    accumulus.accumulate(str(store), VAR, ["time", "lat,lon"])
    granules = [
        write_granule(tmp_path / f"{k}.nc", t, s, s + 3)
        for k, s in zip("bcd", (6, 9, 12), strict=True)
    ]
    return store, t, granules


CRASHES = {
    "while writing chunks": (writer_module, "_write", 1, 6, ""),
    "before the first journal write": (commit_module, "write_journal", 1, 6, "cut back"),
    "after the journal, before accumulations": (
        commit_module,
        "update_accumulations",
        1,
        6,  # committed, not yet published: the re-run publishes it
        "was finished",
    ),
    "before consolidating": (commit_module, "consolidate_groups", 1, 6, "was finished"),
    "before the second journal write": (commit_module, "write_journal", 2, 9, "cut back"),
}


@pytest.mark.parametrize("where", sorted(CRASHES))
def test_rerun_after_an_interruption_finishes_the_work(cube, monkeypatch, where):
    store, t, granules = cube
    owner, name, nth, visible, note = CRASHES[where]
    with monkeypatch.context() as patch:
        patch.setattr(owner, name, crash_on_call(getattr(owner, name), nth))
        with pytest.raises(Crash):
            accumulus.append(str(store), granules)

    assert check_visible(store, t, {6, 9, 12, 15}) == visible
    result = accumulus.append(str(store), granules)

    assert note in result.recovered
    assert check_visible(store, t, {15}) == 15
    journal = json.loads((store / ".accumulus" / "journal.json").read_text())
    assert [(g["start"], g["stop"]) for g in journal["granules"]] == [
        (0, 6),
        (6, 9),
        (9, 12),
        (12, 15),
    ]
    assert all(report.ok for report in accumulus.verify(str(store)))


def test_rerun_after_an_interrupted_creation(tmp_path, monkeypatch):
    t = truth(6)
    store = tmp_path / "cube.zarr"
    granules = [write_granule(tmp_path / f"{s}.nc", t, s, s + 3) for s in (0, 3)]
    with monkeypatch.context() as patch:
        # The first journal write marks the creation, the second would end it.
        patch.setattr(create_module, "write_journal", crash_on_call(create_module.write_journal, 2))
        with pytest.raises(Crash):
            accumulus.append(str(store), granules, chunks={"time": 4})
    assert json.loads((store / ".accumulus" / "journal.json").read_text())["state"] == "creating"

    result = accumulus.append(str(store), granules, chunks={"time": 4})

    assert "interrupted creation was removed" in result.recovered and result.created
    assert check_visible(store, t, {6}) == 6
