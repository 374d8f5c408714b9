"""``average``: a statistic of a variable over dimensions and label ranges, or a shape,
printed as a table, JSON or CSV, and drawn to a PNG. The options become one ``Query``
(``accumulation.query.request``), answered by ``api.answer``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from accumulus.cli.console import console
from accumulus.cli.entry import load_api, nothing_to_finish
from accumulus.cli.options import (
    CubeGroup,
    Store,
    option,
    pairs,
    reaching_stores,
)
from accumulus.errors import AccumulusError


@reaching_stores
def average(
    store: Store,
    variable: Annotated[str, typer.Argument(help="Data variable.")],
    over: Annotated[str, option("--over", "Dimensions averaged away, e.g. lat,lon or time.")],
    range_: Annotated[
        list[str] | None,
        option(
            "--range",
            "dim=start/end, inclusive labels (repeatable); lon=170/-170 crosses the date line.",
        ),
    ] = None,
    stat: Annotated[
        str,
        option(
            "--stat",
            "mean, sum, count (= sum of weights), var or std (weighted population variance, "
            "standard deviation), trend (least-squares slope per year, per cell, over time), "
            "corr (Pearson's r with --with VAR2).",
        ),
    ] = "mean",
    with_: Annotated[
        str | None,
        option(
            "--with",
            "The second variable of --stat corr (Pearson's r over --over, on the same grid).",
        ),
    ] = None,
    season: Annotated[
        str | None,
        option(
            "--season",
            "Only this season's days: DJF, MAM, JJA, SON or a month (JAN...DEC). With "
            "--over time the map of --stat over them (mean, sum, count, var, std, trend); "
            "otherwise one value per year (DJF: December counts for the next year).",
        ),
    ] = None,
    weights: Annotated[
        str | None,
        option("--weights", "area, none or a weights array (default: the accumulations')."),
    ] = None,
    no_accumulation: Annotated[
        bool,
        option("--no-accumulation", "Force a full scan of the raw data, for comparison."),
    ] = False,
    plan: Annotated[
        str,
        option(
            "--plan",
            "cheaper: the accumulations or a full scan, whichever is estimated faster; "
            "accumulation: the accumulations even when a scan is estimated faster.",
        ),
    ] = "cheaper",
    as_json: Annotated[bool, option("--json", "Print the result as one JSON object.")] = False,
    as_csv: Annotated[bool, option("--csv", "Print the result as CSV.")] = False,
    png: Annotated[
        str | None,
        option(
            "--png",
            "Draw the answer (series, map or Hovmöller diagram) to this file: PNG, or the "
            "format its suffix names (.jpg, .webp, .tif, .svg, .pdf).",
        ),
    ] = None,
    accumulations: Annotated[
        str | None,
        option("--accumulations", "Read accumulations from this sidecar store (--into)."),
    ] = None,
    group: CubeGroup = None,
    shape: Annotated[
        str | None,
        option(
            "--shape",
            "Average over a shape: FILE (GeoJSON, shapefile...) or FILE:VALUE, the feature "
            "with a property equal to VALUE (or FILE:PROPERTY=VALUE). Cells count when their "
            "centre is inside.",
        ),
    ] = None,
    region: Annotated[
        str | None,
        option(
            "--region",
            "Average over a named region: SET:NAME, e.g. ar6:WAF, srex:AMZ, giorgi:SAS, "
            "prudence:AL (sets shipped offline).",
        ),
    ] = None,
    *,
    source: dict[str, Any],
) -> None:
    """Average (or sum, or count) a variable over dimensions and label ranges, or a shape."""
    from accumulus.destinations import check_file, write_file

    picture, drawn_as = None, "png"
    if png:  # before the query runs: where the picture goes, and in what format
        from accumulus.plots import picture_format

        picture, drawn_as = check_file(png, "the picture"), picture_format(png)
    api = load_api()
    from accumulus import output

    ranges = {
        dim: api.split_range(dim, text) for dim, text in pairs(range_ or [], "--range").items()
    }
    question = api.Query.asked(
        variable,
        over,
        ranges,
        stat=stat,
        weights=weights,
        use_accumulation=not no_accumulation,
        plan=plan,
        shape=_shape(shape, region),
        season=season,
        with_=with_,
    )
    result = api.answer(
        store,
        question,
        group=group,
        accumulations=accumulations,
        **source,
    )
    if picture is not None:
        write_file(picture, output.result_png(result, drawn_as))
    if as_json:
        print(output.result_json_bytes(result).decode())
    elif as_csv:
        print(output.result_csv(result), end="")
    else:
        _print_result(result, png)
    nothing_to_finish()


def _shape(shape: str | None, region: str | None):
    from accumulus import regions

    if shape and region:
        raise AccumulusError("give --shape or --region, not both")
    if shape:
        return regions.shape_from_file(shape)
    return regions.named_region(region) if region else None


def _print_result(result, png: str | None) -> None:
    data = result.data
    stats = result.stats
    if data.ndim == 0:
        console.print(f"{data.name} = {data.item()}")
    elif data.ndim == 1:
        console.print(data.to_series().to_string(max_rows=40))
    else:
        console.print(_summary(data), highlight=False)
    console.print(
        f"[dim]{stats.accumulation_chunks_read} accumulation chunks, {stats.raw_chunks_read} raw "
        f"chunks, {stats.bytes_read} bytes read in {stats.seconds * 1000:.1f} ms"
        + (f"; {result.note}" if result.note else "")
        + (f"; plot written to {png}" if png else "")
        + "[/]"
    )


def _summary(data) -> str:
    """A map (or any answer of 2 or more dimensions) in a few lines: its grid, the range of
    its values and how many are missing. A table of it would show its first and last rows
    only, often polar rows without a value; --csv, --json and --png give every value."""
    import numpy as np

    from accumulus.output import label

    values = np.asarray(data.values, dtype="f8")
    valid = values[~np.isnan(values)]
    grid = " x ".join(f"{d} {n}" for d, n in data.sizes.items())
    extents = ", ".join(
        f"{d} {label(data[d].values[0])} to {label(data[d].values[-1])}" for d in data.dims
    )
    what = f"{data.attrs.get('stat', 'value')} over {data.attrs.get('over', '')}".strip()
    units = f" {data.attrs['units']}" if data.attrs.get("units") else ""
    if valid.size:
        spread = (
            f"min {valid.min():.6g}, median {np.median(valid):.6g}, max {valid.max():.6g}{units}"
        )
    else:
        spread = "no value"
    missing = values.size - valid.size
    return (
        f"{data.name} ({what}): {grid} values; {extents}\n"
        f"  {spread}; {missing} of {values.size} missing\n"
        "  every value: --csv or --json; a picture: --png FILE"
    )
