"""Query results as JSON, CSV and PNG (shared by the command line and the service)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
import orjson
import pandas as pd

from accumulus.accumulation.query.answer import AxisPart, Coordinate, QueryResult
from accumulus.captions import captions
from accumulus.identity_memo import IdentityMemo
from accumulus.plots import result_png as result_png  # re-exported: the PNG format


def label(value: Any) -> Any:
    """A coordinate value as JSON: ISO strings for times, plain numbers otherwise."""
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if isinstance(value, np.datetime64):
        return pd.Timestamp(value).isoformat()
    if hasattr(value, "isoformat"):  # cftime dates
        return value.isoformat()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def labels(values: np.ndarray) -> list[Any]:
    """``label`` of every value of a coordinate. Times in whole seconds, and finite numbers,
    are written at once (as ``isoformat`` and ``label`` write them), not one by one (a
    third of a JSON answer's time, on the service's load: docs/service.md)."""
    if values.dtype.kind == "M":
        seconds = values.astype("datetime64[s]")
        if (seconds.astype(values.dtype).view("i8") == values.view("i8")).all():
            return np.datetime_as_string(seconds, unit="s").tolist()
    if values.dtype.kind in "iu" or (values.dtype.kind == "f" and np.isfinite(values).all()):
        return values.tolist()
    return [label(v) for v in values]


def _values(values: np.ndarray) -> Any:
    """Nested lists with None where the value is missing (NaN) and the strings "inf" and
    "-inf" for infinities (JSON has no number for them), as CSV cells show them. One
    ``tolist`` for the whole array, not value by value."""
    if values.dtype.kind not in "fc" or np.isfinite(values).all():
        return values.tolist()
    cells = values.astype(object)
    cells[np.isnan(values)] = None
    cells[values == np.inf] = "inf"
    cells[values == -np.inf] = "-inf"
    return cells.tolist()


def result_json(result: QueryResult) -> dict[str, Any]:
    """The answer as a JSON document of plain Python values (``result_json_bytes`` writes
    the same document), from its values and labels (never its ``DataArray``)."""
    coords = {d: labels(result.labels(d)) for d in result.dims}
    return _document(result, coords, _values(np.asarray(result.values)))


def _document(result: QueryResult, coords: dict[str, Any], values: Any) -> dict[str, Any]:
    attrs = result.attrs
    return {
        "variable": result.query.variable,
        "stat": result.query.stat,
        "weights": result.weights,
        "over": list(attrs.get("over", "").split(",")) if attrs.get("over") else [],
        "dims": list(result.dims),
        "coords": coords,
        "values": values,
        "units": attrs.get("units"),
        # The plan that ran, measured at the store, and the planner's estimate of its time.
        "plan": result.stats.to_dict()
        | {
            "estimated_seconds": None
            if result.estimate is None
            else round(result.estimate.seconds, 6)
        },
        # What the planner estimated each candidate would read, when it chose between them.
        "estimates": {name: cost.to_dict() for name, cost in result.costs.items()},
        "note": result.note,
        "selection": {
            dim: {
                "kind": extent.kind,
                "first": label(extent.first),
                "last": label(extent.last),
                "steps": extent.steps,
            }
            for dim, extent in result.selection.items()
        },
        "titles": captions(result).to_dict(),
    }


def result_json_bytes(result: QueryResult) -> bytes:
    """``result_json`` as JSON text (UTF-8), by orjson, many times faster than ``json.dumps``
    on a map (every float the shortest text that reads back as the same value, as ``repr``
    writes it). Arrays that orjson writes as their lists would be written (``_as_written``)
    are handed to it as they are, not as lists of Python objects made first."""
    coords = {d: _written_labels(result, d) for d in result.dims}
    document = _document(result, coords, _as_written(np.asarray(result.values), _values))
    return orjson.dumps(document, option=orjson.OPT_SERIALIZE_NUMPY)


def _written_labels(result: QueryResult, dim: str) -> Any:
    """An answer's labels along ``dim`` in a form orjson writes as it writes ``labels``: a
    whole axis' JSON text, or a part of it, cut from its text written once per snapshot
    (``WrittenAxis``: checking and writing a series' thousands of days was most of its
    JSON's time, docs/benchmarks.md); others as ``_as_written`` hands them."""
    index = result.coords[dim]
    if isinstance(index, Coordinate):
        return _written_axis(index).part(0, len(index.values))
    if isinstance(index, AxisPart):
        return _written_axis(index.coordinate).part(index.start, index.stop)
    return _as_written(result.labels(dim), labels)


@dataclass(frozen=True)
class WrittenAxis:
    """A whole axis' labels as JSON text, comma-separated, and where each label's text
    ends: the text of any run of them, cut from it. A label's text depends on it alone
    (orjson writes each element of an array, and of a list, by itself), so a run's text is
    the one ``_as_written`` of those labels would give."""

    text: bytes
    ends: np.ndarray  # the end of each label's text in ``text``

    @classmethod
    def of(cls, values: np.ndarray) -> WrittenAxis:
        text = _written(values)[1:-1]  # (without the brackets)
        commas = np.flatnonzero(np.frombuffer(text, np.uint8) == ord(","))
        if len(commas) == len(values) - 1:  # no label's text holds a comma: they part there
            return cls(text, np.append(commas, len(text)))
        each = [_written(values[k : k + 1])[1:-1] for k in range(len(values))]
        return cls(b",".join(each), np.cumsum([len(t) + 1 for t in each], dtype=np.int64) - 1)

    def part(self, start: int, stop: int) -> orjson.Fragment:
        """The JSON array of labels ``start`` to ``stop``, as orjson writes it in place."""
        if start >= stop:
            return orjson.Fragment(b"[]")
        begin = 0 if start == 0 else int(self.ends[start - 1]) + 1
        # One copy of the run (a slice and two concatenations were three, of up to 77 KB
        # for a series' days).
        run = memoryview(self.text)[begin : int(self.ends[stop - 1])]
        return orjson.Fragment(b"".join((b"[", run, b"]")))


def _written(values: np.ndarray) -> bytes:
    """The JSON array of labels ``values``, as ``result_json_bytes`` writes it."""
    return orjson.dumps(_as_written(values, labels), option=orjson.OPT_SERIALIZE_NUMPY)


# Each whole axis' written labels, by its ``Coordinate`` (made once per snapshot).
_WRITTEN: IdentityMemo[WrittenAxis] = IdentityMemo()


def _written_axis(coordinate: Coordinate) -> WrittenAxis:
    return _WRITTEN.value(coordinate, partial(WrittenAxis.of, coordinate.values))


# The times orjson writes (as "YYYY-MM-DDTHH:MM:SS"); it refuses others.
_FIRST_TIME, _END_TIME = np.datetime64("0001-01-01", "s"), np.datetime64("9999-01-01", "s")


def _as_written(values: np.ndarray, as_lists: Callable[[np.ndarray], Any]) -> Any:
    """``values`` in a form orjson writes as it writes ``as_lists(values)``: the array
    itself (C-ordered) where orjson's own writing of it is the same text (64-bit floats,
    all finite; integers; times in whole seconds, as ``labels`` writes them), else the
    lists. orjson writes other floats (32-bit: their own shortest text, not a float64's)
    and missing values differently, and refuses 0-d arrays, other byte orders and times
    outside the years 1-9998."""
    kind = values.dtype.kind
    if values.ndim == 0 or not values.dtype.isnative:
        return as_lists(values)
    if (values.dtype == np.float64 and np.isfinite(values).all()) or (
        kind in "iu" and values.dtype.itemsize in (1, 2, 4, 8)
    ):
        return np.ascontiguousarray(values)
    if kind == "M" and not np.isnat(values).any():
        seconds = values.astype("datetime64[s]")
        whole = (seconds.astype(values.dtype).view("i8") == values.view("i8")).all()
        if whole and ((seconds >= _FIRST_TIME) & (seconds < _END_TIME)).all():
            return np.ascontiguousarray(seconds)
    return as_lists(values)


def result_csv(result: QueryResult) -> str:
    data = result.data
    if data.ndim == 0:
        value = data.values[()].item()
        # As pandas writes the cells of a table: missing is empty, infinities are inf.
        return f"{data.name}\n{'' if value != value else value}\n"
    frame = data.to_dataframe(name=str(data.name))
    keep = [str(d) for d in data.dims] + [str(data.name)]
    frame = frame.reset_index()[keep]
    return frame.to_csv(index=False)
