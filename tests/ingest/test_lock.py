"""One appender at a time: a second one gets "store is being appended to"; stale locks (a
dead process on this host, a silent one elsewhere) are taken over, by exactly one recoverer."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

import accumulus
from accumulus.raw_cube import RawCube
from accumulus.stores import keys
from accumulus.stores.lock import LOCK_KEY, LockRecord, StoreBusyError, StoreLock
from accumulus.stores.opening import open_store

from .helpers import VAR, cli, cli_env, snapshot, truth, write_granule, write_granules


@pytest.fixture
def cube(tmp_path):
    t = truth(12)
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), write_granule(tmp_path / "a.nc", t, 0, 3), chunks={"time": 4})
    return store, t


def plant_lock(store, **fields) -> LockRecord:
    now = time.time()
    record = LockRecord(
        **{
            "token": "planted",
            "host": socket.gethostname(),
            "pid": 1,
            "process_started": 0.0,
            "started": now,
            "heartbeat": now,
            "command": "accumulus append (planted by a test)",
            **fields,
        }
    )
    keys.write(open_store(store, "r+"), LOCK_KEY, record.to_json())
    return record


def dead_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def test_second_appender_is_refused_while_the_first_holds_the_lock(cube, tmp_path):
    store, t = cube
    granule = write_granule(tmp_path / "b.nc", t, 3, 6)
    with StoreLock(open_store(store, "r+"), str(store)):
        before = snapshot(store)
        with pytest.raises(StoreBusyError, match=r"store is being appended to by pid \d+ on "):
            accumulus.append(str(store), granule)
        assert snapshot(store) == before
    assert accumulus.append(str(store), granule).extent == (3, 6)


def test_lock_of_a_dead_process_is_taken_over_at_once(cube, tmp_path):
    store, t = cube
    pid = dead_pid()
    plant_lock(store, pid=pid, process_started=time.time() - 1)
    result = accumulus.append(str(store), write_granule(tmp_path / "b.nc", t, 3, 6))
    assert result.recovered.startswith(f"took over the stale lock of pid {pid} on ")
    assert keys.read(open_store(store), LOCK_KEY) is None  # released at the end


def test_a_reused_pid_does_not_keep_a_lock(cube, tmp_path):
    """The lock names its holder's process creation time too: our own pid with another
    creation time is another, finished process."""
    store, t = cube
    plant_lock(store, pid=os.getpid(), process_started=12345.0)
    assert accumulus.append(str(store), write_granule(tmp_path / "b.nc", t, 3, 6)).recovered


def test_lock_from_another_host_is_stale_only_without_heartbeats(cube, tmp_path):
    store, t = cube
    granule = write_granule(tmp_path / "b.nc", t, 3, 6)
    plant_lock(store, host="elsewhere.example", heartbeat=time.time())
    with pytest.raises(StoreBusyError, match=r"by pid 1 on elsewhere\.example"):
        accumulus.append(str(store), granule)

    plant_lock(store, host="elsewhere.example", heartbeat=time.time() - 3600)
    result = accumulus.append(str(store), granule)
    assert "took over the stale lock of pid 1 on elsewhere.example" in result.recovered


def test_of_many_recoverers_exactly_one_takes_a_stale_lock(cube):
    store, _ = cube
    plant_lock(store, host="elsewhere.example", heartbeat=time.time() - 3600)
    outcomes: list[str] = []
    start = threading.Barrier(8)

    def recover() -> None:
        lock = StoreLock(open_store(store, "r+"), str(store))
        start.wait()
        try:
            lock.acquire()
            outcomes.append("took it")
        except StoreBusyError:
            outcomes.append("busy")

    threads = [threading.Thread(target=recover) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["busy"] * 7 + ["took it"]
    holder = json.loads(keys.read(open_store(store), LOCK_KEY))
    assert holder["host"] == socket.gethostname()
    assert not [k for k in keys.list_keys(open_store(store)) if "takeover" in k]


def test_lock_is_released_after_an_error(cube, tmp_path):
    store, t = cube
    bad = write_granule(tmp_path / "bad.nc", t, 3, 6, variables=("rain",))
    with pytest.raises(accumulus.AccumulusError):
        accumulus.append(str(store), bad)
    assert keys.read(open_store(store), LOCK_KEY) is None


def test_heartbeat_renews_the_lock_and_a_lost_lock_stops_the_commit(cube):
    store, _ = cube
    target = open_store(store, "r+")
    with StoreLock(target, str(store), heartbeat=0.05) as lock:
        first = json.loads(keys.read(target, LOCK_KEY))["heartbeat"]
        deadline = time.time() + 30
        while json.loads(keys.read(target, LOCK_KEY))["heartbeat"] == first:
            assert time.time() < deadline, "no heartbeat"
            time.sleep(0.02)
        lock.check()  # renewed: still ours
        plant_lock(store, host="elsewhere.example")  # someone took it over
        while not lock._lost:
            assert time.time() < deadline, "the loss was not noticed"
            time.sleep(0.02)
        with pytest.raises(StoreBusyError, match="lost its lock"):
            lock.check()
    assert json.loads(keys.read(target, LOCK_KEY))["host"] == "elsewhere.example"  # not ours


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_two_appenders_at_once_never_corrupt_the_store(cube, tmp_path):
    store, t = cube
    granules = write_granules(tmp_path / "in", t, 3)
    runs = [
        subprocess.Popen(
            [sys.executable, "-m", "accumulus", "append", str(store), *map(str, granules)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_env(),
        )
        for _ in range(2)
    ]
    outcomes = [(run.wait(timeout=300), run.stderr.read()) for run in runs]
    for code, stderr in outcomes:
        assert code == 0 or (code == 2 and "store is being appended to" in stderr), stderr
    assert any(code == 0 for code, _ in outcomes)
    journal = json.loads((store / ".accumulus" / "journal.json").read_text())
    assert [g["start"] for g in journal["granules"]] == [0, 3, 6, 9]
    reports = accumulus.verify(str(store), VAR)
    assert all(r.ok for r in reports)
    assert RawCube.open(str(store)).variable(VAR).shape[0] == 12


def test_cli_reports_a_busy_store(cube, tmp_path):
    store, t = cube
    plant_lock(store, host="elsewhere.example")
    run = cli("append", str(store), str(write_granule(tmp_path / "b.nc", t, 3, 6)))
    assert run.returncode == 2 and "store is being appended to" in run.stderr


# --------------------------------------------------------------------------------------------
# accumulate is a writer too


def test_accumulate_is_refused_while_an_append_holds_the_lock(cube, tmp_path):
    store, t = cube
    with StoreLock(open_store(store, "r+"), str(store)):
        before = snapshot(store)
        with pytest.raises(StoreBusyError, match=r"store is being appended to by pid \d+ on "):
            accumulus.accumulate(str(store), VAR, ["time", "lat,lon"])
        assert snapshot(store) == before
        run = cli("accumulate", str(store), VAR)
        assert run.returncode == 2 and "store is being appended to by pid" in run.stderr
        assert len(run.stderr.strip().splitlines()) == 1
        assert snapshot(store) == before

    assert accumulus.accumulate(str(store), VAR, ["time", "lat,lon"]).action == "built"
    assert keys.read(open_store(store), LOCK_KEY) is None  # released
    # The append that follows updates the group under its own lock (no busy error).
    result = accumulus.append(str(store), write_granule(tmp_path / "b.nc", t, 3, 9))
    assert result.accumulations == (VAR,)
    coverage = accumulus.open(str(store)).accumulation_group(VAR).coverage
    assert coverage["time"] == 8  # two complete chunks of 4 of the 9 steps
    assert all(report.ok for report in accumulus.verify(str(store), VAR))


def test_append_is_refused_while_accumulate_holds_the_lock(cube, tmp_path):
    store, t = cube
    granule = write_granule(tmp_path / "b.nc", t, 3, 6)
    with StoreLock(open_store(store, "r+"), str(store), task="accumulate"):
        before = snapshot(store)
        with pytest.raises(StoreBusyError, match=r"its accumulations are being built by pid \d+"):
            accumulus.append(str(store), granule)
        assert snapshot(store) == before
    assert accumulus.append(str(store), granule).extent == (3, 6)
