"""`accumulus serve`: starts on loopback, answers, and refuses stores it cannot read."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

import accumulus

SOURCES = str(Path(accumulus.__file__).parents[1])


def accumulus_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "accumulus", *args]


def environment() -> dict[str, str]:
    paths = [SOURCES, os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_answers_on_loopback(cube: Path):
    port = free_port()
    process = subprocess.Popen(
        accumulus_command("serve", str(cube), "--port", str(port), "--max-cells", "50"),
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                health = httpx.get(f"{base}/api/health")
                break
            except httpx.TransportError:
                assert process.poll() is None, process.stdout.read()
                assert time.monotonic() < deadline, "the service did not start"
                time.sleep(0.2)
        assert health.json()["status"] == "ok"
        series = httpx.get(f"{base}/api/datasets/surface/tas/average?over=lat,lon")
        assert series.status_code == 200 and len(series.json()["values"]) == 40
        too_big = httpx.get(f"{base}/api/datasets/surface/tas/average?over=time")
        assert too_big.status_code == 422 and "limit of 50" in too_big.json()["error"]
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=30)
    assert f"Uvicorn running on http://127.0.0.1:{port}" in output


def test_serve_refuses_a_store_it_cannot_read(tmp_path: Path):
    result = subprocess.run(
        accumulus_command("serve", str(tmp_path / "missing.zarr")),
        env=environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "store not found" in result.stderr
