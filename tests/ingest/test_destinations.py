"""Outputs that cannot be written, and Ctrl-C (issue 34 item 8).

``average --png``, ``accumulate --into``, ``append`` (copied and ``--virtual``) and
``convert`` into a path whose directory is missing, is a file, or takes no new files: one
line, exit 2, before the work (the query, the build, any granule read), nothing left
behind. A bad ``--at`` with ``--into`` leaves no sidecar. Ctrl-C says in one line what was
kept and how to go on (exit 130), and running the command again finishes the work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import accumulus
from accumulus.ingest.append import run as append_module
from accumulus.ingest.append import write as write_phase
from command_line import files, refused, run
from ingest.helpers import VAR, cli_env, truth, write_granules


def unwritable_directory(tmp_path: Path) -> Path:
    """A directory where new files cannot be made: read-only by its mode, or, for the
    superuser, whom modes do not stop, /sys (sysfs makes no files on request)."""
    directory = tmp_path / "read-only"
    directory.mkdir()
    directory.chmod(0o555)
    for candidate in (directory, Path("/sys")):
        try:
            handle, probe = tempfile.mkstemp(dir=candidate)
        except OSError:
            return candidate
        os.close(handle)
        os.unlink(probe)
    pytest.fail("no directory here refuses new files; the test cannot make one")


@pytest.fixture
def granules(tmp_path) -> list[Path]:
    return write_granules(tmp_path / "in", truth(12), 3)


@pytest.fixture
def cube(tmp_path, granules) -> Path:
    path = tmp_path / "cube.zarr"
    accumulus.append(str(path), granules, chunks={"time": 3})
    return path


def bad_destinations(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "a-file").write_text("not a directory")
    return {
        "missing directory": tmp_path / "missing" / "out",
        "a file on the way": tmp_path / "a-file" / "out",
        "a directory without new files": unwritable_directory(tmp_path) / "out",
    }


def never(*args, **kwargs):
    raise AssertionError("the work ran before the destination was checked")


def test_a_picture_that_cannot_be_written(tmp_path, cube, capsys, monkeypatch):
    monkeypatch.setattr(accumulus.api, "query", never)
    destinations = bad_destinations(tmp_path)
    before = files(tmp_path)
    for why, path in destinations.items():
        png = f"{path}.png"
        message = refused(
            capsys, monkeypatch, "average", str(cube), VAR, "--over", "time", "--png", png
        )
        assert message.startswith(f"error: cannot write the picture {png}: "), why
        assert files(tmp_path) == before
    message = refused(
        capsys, monkeypatch, "average", str(cube), VAR, "--over", "time", "--png", str(cube)
    )
    assert message == f"error: cannot write the picture {cube}: it is a directory"


def test_a_sidecar_that_cannot_be_written(tmp_path, cube, capsys, monkeypatch):
    monkeypatch.setattr(accumulus.api, "open_cube", never)
    destinations = bad_destinations(tmp_path)
    destinations["a file"] = tmp_path / "a-file"
    before = files(tmp_path)
    for why, path in destinations.items():
        message = refused(capsys, monkeypatch, "accumulate", str(cube), VAR, "--into", str(path))
        assert f"the sidecar {path}: " in message, why
    assert files(tmp_path) == before


def test_a_cube_that_cannot_be_written(tmp_path, granules, capsys, monkeypatch):
    monkeypatch.setattr(append_module, "resolve_group", never)  # reads the first granule
    directories = bad_destinations(tmp_path)
    before = files(tmp_path)
    for why, path in {**directories, "a file": tmp_path / "a-file"}.items():
        message = refused(capsys, monkeypatch, "append", str(path), str(granules[0]))
        assert f"the cube {path}: " in message, why
    for why, path in directories.items():
        message = refused(
            capsys, monkeypatch, "append", f"{path}.json", str(granules[0]), "--virtual"
        )
        assert f"the reference set {path}.json: " in message, why
        if why != "missing directory":  # convert makes missing directories
            message = refused(capsys, monkeypatch, "convert", str(granules[0]), str(path))
            assert message.startswith(f"error: cannot write {path}: "), why
    assert files(tmp_path) == before


def test_a_bad_position_leaves_no_sidecar(tmp_path, cube, capsys, monkeypatch):
    side = tmp_path / "side.zarr"
    message = refused(
        capsys,
        monkeypatch,
        "accumulate",
        str(cube),
        VAR,
        "--at",
        "time=fortnight",
        "--into",
        str(side),
    )
    assert "fortnight" in message
    assert not side.exists()


def test_ctrl_c_in_append_keeps_the_last_commit(tmp_path, granules, capsys, monkeypatch):
    """Interrupted after its first commit (one granule fills one chunk), an append says
    so; run again, it appends the rest and the cube is what xarray reads from the files."""
    cube = tmp_path / "cube.zarr"
    commit = write_phase.commit
    calls = []

    def interrupted_commit(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return commit(*args, **kwargs)

    monkeypatch.setattr(write_phase, "commit", interrupted_commit)
    args = ("append", str(cube), *map(str, granules), "--chunks", "time=3")
    code, _, err = run(capsys, monkeypatch, *args)
    assert code == 130
    assert err.strip() == (
        f"interrupted: {cube} keeps its last commit, time 3 steps from 1 granule(s); run the "
        "same command again to append the rest (granules already in the cube are skipped)"
    )
    assert xr.open_zarr(cube)[VAR].shape[0] == 3

    monkeypatch.setattr(write_phase, "commit", commit)
    code, out, err = run(capsys, monkeypatch, *args)
    assert code == 0, err
    assert f"skipped{granules[0]}:alreadyingested" in "".join(out.split())  # wrapped lines
    ours = xr.open_zarr(cube)[VAR]
    theirs = xr.open_mfdataset(granules, combine="nested", concat_dim="time")[VAR]
    np.testing.assert_array_equal(ours.values, theirs.values)


def test_ctrl_c_in_a_new_sidecar_leaves_nothing(tmp_path, cube, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("accumulus.accumulation.build.accumulate.build_accumulations", interrupted)
    side = tmp_path / "side.zarr"
    code, _, err = run(capsys, monkeypatch, "accumulate", str(cube), VAR, "--into", str(side))
    assert code == 130
    assert (
        err.strip()
        == f"interrupted: the sidecar {side} was not created; run the same command again"
    )
    assert not side.exists()
    code, _, err = run(capsys, monkeypatch, "accumulate", str(cube), VAR)
    assert code == 130 and err.strip().startswith(f"interrupted: the accumulations of {VAR} are")


def _sigint_as_a_shell_leaves_it() -> None:
    """In the child before it runs the command: SIGINT's default action, not blocked."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@pytest.mark.slow
def test_a_real_sigint(tmp_path):
    """The console script interrupted by SIGINT in the middle of an append of 40 granules,
    once its first commit is in the journal. It is started as a shell starts a command, with
    SIGINT at its default and not blocked: a child inherits an ignored or blocked SIGINT,
    and Python then never sees it (a non-interactive shell starts a background job, such
    as ``make test-slow &``, with SIGINT ignored: the append then ran to its end, exit 0)."""
    granules = write_granules(tmp_path / "in", truth(120, nlat=90, nlon=180), 3)
    cube = tmp_path / "cube.zarr"
    command = [sys.executable, "-m", "accumulus", "append", str(cube), *map(str, granules)]
    command += ["--chunks", "time=3"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
        preexec_fn=_sigint_as_a_shell_leaves_it,
    )  # fmt: skip
    journal = cube / ".accumulus" / "journal.json"
    while process.poll() is None and b'"extent": 0' in (
        journal.read_bytes() if journal.exists() else b'"extent": 0'
    ):
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    [line] = err.strip().splitlines()[-1:]
    assert line.startswith(f"interrupted: {cube} keeps its last commit, time ")
    done = subprocess.run(command, capture_output=True, text=True, env=cli_env(), timeout=300)
    assert done.returncode == 0, done.stderr
    assert xr.open_zarr(cube)[VAR].shape[0] == 120
