"""Query results as JSON, CSV and PNG (shared by the command line and the service)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import orjson
import pandas as pd

from accumulus.accumulation.query.answer import QueryResult
from accumulus.captions import captions
from accumulus.plots import result_png as result_png  # re-exported: the PNG format


def label(value: Any) -> Any:
    """A coordinate value as JSON: ISO strings for times, plain numbers otherwise."""
    if isinstance(value, np.datetime64 | pd.Timestamp):
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
    data = result.data
    return {
        "variable": result.query.variable,
        "stat": result.query.stat,
        "weights": result.weights,
        "over": list(data.attrs.get("over", "").split(",")) if data.attrs.get("over") else [],
        "dims": list(data.dims),
        "coords": {str(d): labels(data[d].values) for d in data.dims},
        "values": _values(np.asarray(data.values)),
        "units": data.attrs.get("units"),
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
    writes it)."""
    return orjson.dumps(result_json(result), option=orjson.OPT_SERIALIZE_NUMPY)


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
