"""Which arrays hold numbers that can be averaged: integers, floats and booleans as stored, and
not times once decoded (CF time units turn numbers into dates, whose mean is not a number of
the variable's units). Strings, dates and complex numbers are refused by name."""

from __future__ import annotations

import xarray as xr

from accumulus.errors import AccumulusError

NUMERIC_KINDS = "biuf"  # NumPy dtype kinds: boolean, signed, unsigned, floating


def numeric_problem(raw: xr.Dataset, decoded: xr.Dataset, name: str) -> str | None:
    """Why array ``name`` cannot be averaged (or used as weights), or None when it can."""
    stored, values = raw[name].dtype, decoded[name].dtype
    if stored.kind not in NUMERIC_KINDS:
        return f"{name!r} holds {_kind(stored)} ({stored}), not numbers"
    if values.kind not in NUMERIC_KINDS:
        units = raw[name].attrs.get("units")
        return f"{name!r} holds {_kind(values)} once decoded (units {units!r})"
    return None


def check_numeric(raw: xr.Dataset, decoded: xr.Dataset, name: str, role: str) -> None:
    """Refuse a non-numeric array with a one-line error; ``role`` says what it was for."""
    problem = numeric_problem(raw, decoded, name)
    if problem is not None:
        raise AccumulusError(f"cannot use {name!r} as {role}: {problem}")


def _kind(dtype) -> str:
    return {
        "U": "strings",
        "S": "byte strings",
        "O": "objects (strings or dates)",
        "M": "dates",
        "m": "time intervals",
        "c": "complex numbers",
        "V": "raw records",
    }.get(dtype.kind, f"values of kind {dtype.kind!r}")
