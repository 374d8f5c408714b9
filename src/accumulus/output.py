"""Query results as JSON, CSV and PNG (shared by the command line and the service)."""

from __future__ import annotations

import io
import math
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from accumulus.accumulation.query import QueryResult
from accumulus.errors import AccumulusError


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


def _values(values: np.ndarray) -> Any:
    """Nested lists with None where the value is missing."""
    if values.ndim == 0:
        v = values.item()
        return None if isinstance(v, float) and not math.isfinite(v) else v
    return [_values(v) for v in values]


def result_json(result: QueryResult) -> dict[str, Any]:
    data = result.data
    return {
        "variable": result.query.variable,
        "stat": result.query.stat,
        "weights": result.weights,
        "over": list(data.attrs.get("over", "").split(",")) if data.attrs.get("over") else [],
        "dims": list(data.dims),
        "coords": {str(d): [label(v) for v in data[d].values] for d in data.dims},
        "values": _values(np.asarray(data.values)),
        "units": data.attrs.get("units"),
        "plan": result.stats.to_dict(),
        "note": result.note,
    }


def result_csv(result: QueryResult) -> str:
    data = result.data
    if data.ndim == 0:
        return f"{data.name}\n{label(data.values[()])}\n"
    frame = data.to_dataframe(name=str(data.name))
    keep = [str(d) for d in data.dims] + [str(data.name)]
    frame = frame.reset_index()[keep]
    return frame.to_csv(index=False)


def result_png(result: QueryResult) -> bytes:
    """A line plot for a series, a map with a colour bar for a 2-D result.

    Drawn on its own ``Figure`` (no pyplot state), so threads can draw at the same time."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    data: xr.DataArray = result.data
    if data.ndim not in (1, 2):
        raise AccumulusError(
            f"a {data.ndim}-dimensional result cannot be drawn: average over more dimensions "
            "(one or two must remain), or use --json/--csv"
        )
    fig = Figure(figsize=(9, 4.5) if data.ndim == 1 else (9, 5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    label = f"{result.query.stat} of {data.name}"
    if data.attrs.get("units"):
        label += f" ({data.attrs['units']})"
    if data.ndim == 1:
        (dim,) = data.dims
        ax.plot(data[dim].values, data.values, marker="." if data.size < 200 else None)
        ax.set_xlabel(str(dim))
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    else:
        y, x = data.dims
        mesh = ax.pcolormesh(data[x].values, data[y].values, data.values, cmap="viridis")
        fig.colorbar(mesh, ax=ax, label=label)
        ax.set_xlabel(str(x))
        ax.set_ylabel(str(y))
    stats = result.stats
    ax.set_title(
        f"{label} over {', '.join(result.query.over)} — "
        f"{stats.accumulation_chunks_read} accumulation + {stats.raw_chunks_read} raw chunks, "
        f"{stats.seconds * 1000:.0f} ms",
        fontsize=9,
    )
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()
