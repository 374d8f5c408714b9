"""The command line on producers' files: commands that must succeed (no traceback), their
JSON answers as arrays, and xarray's answers on the original files to compare them with."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from command_line import run

DATA = Path(__file__).resolve().parents[1] / "data" / "real"
RTOL = 1e-9


def copy(name: str, directory: Path, as_name: str | None = None) -> Path:
    """A vendored file copied where a test may write beside it."""
    target = directory / (as_name or name)
    shutil.copy(DATA / name, target)
    return target


def ok(capsys, monkeypatch, *args: str) -> str:
    """Run ``accumulus ARGS``, which must succeed; its stdout."""
    code, out, err = run(capsys, monkeypatch, *args)
    assert code == 0, f"accumulus {' '.join(args)}: exit {code}\n{err}"
    assert "Traceback" not in err, err
    return out


def answer(capsys, monkeypatch, *args: str) -> tuple[np.ndarray, dict[str, Any]]:
    """``accumulus average ARGS --json``: the values (NaN where missing) and the document."""
    document = json.loads(ok(capsys, monkeypatch, "average", *args, "--json"))
    return np.array(document["values"], dtype="f8"), document


def cos_weighted_mean(
    data: xr.DataArray, over: Sequence[str], lat: str, weighted: bool = True
) -> np.ndarray:
    """xarray's mean of ``data`` over ``over``, in float64, weighted by cos(latitude)."""
    data = data.astype("f8")
    if not weighted:
        return data.mean(list(over)).values
    weights = np.cos(np.deg2rad(data[lat].astype("f8")))
    return data.weighted(weights).mean(list(over)).values


def assert_close(ours: np.ndarray, theirs: np.ndarray) -> None:
    theirs = np.asarray(theirs, dtype="f8")
    assert ours.shape == theirs.shape
    assert np.isfinite(theirs).any()
    np.testing.assert_allclose(ours, theirs, rtol=RTOL, equal_nan=True)
