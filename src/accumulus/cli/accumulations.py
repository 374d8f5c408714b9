"""The accumulations' commands: ``accumulate`` (build them), ``inspect`` (what a cube and
its accumulations hold), ``verify`` (recompute them, or compare a cube with its sources)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from accumulus.cli.console import ProgressBar, console, err_console, size_text, stored_text
from accumulus.cli.entry import load_api
from accumulus.cli.options import (
    CubeGroup,
    DataGroup,
    Scheduler,
    Store,
    option,
    pairs,
    positive_int,
    reaching_stores,
)
from accumulus.errors import AccumulusError


@reaching_stores
def accumulate(
    store: Annotated[
        str, typer.Argument(help="Cube path or URL (dir, file://, memory://, s3://).")
    ],
    variable: Annotated[str, typer.Argument(help="Data variable to accumulate.")],
    dims: Annotated[
        list[str] | None,
        option(
            "--dims",
            "A combination to accumulate, e.g. time or lat,lon (repeatable). "
            "Default: time at month ends and every 2 days of each month, and lat,lon at every "
            "cell (any box's series and any whole months' map without a raw chunk); with "
            "--minimal, --stride or --at: every dimension alone plus lat,lon.",
        ),
    ] = None,
    stride: Annotated[
        list[str] | None,
        option("--stride", "Accumulate every k chunks along a dimension: time=2 (repeatable)."),
    ] = None,
    at: Annotated[
        list[str] | None,
        option(
            "--at",
            "Where entries end along a dimension instead of chunk ends: DIM=RULE, the rule "
            "being chunk (the default), N (every N elements; 1 = every element), month, year, "
            "month+N (also every N elements of each month), or labels separated by commas. "
            "E.g. --at time=month, --at lat=1,lon=1 (repeatable).",
        ),
    ] = None,
    weights: Annotated[
        str | None,
        option("--weights", "area (cos latitude), none, or the name of a weights array."),
    ] = None,
    scheduler: Scheduler = None,
    rebuild: Annotated[
        bool,
        option(
            "--rebuild",
            "Build the group again. It keeps what it was built with (--dims, --at, --stride, "
            "--weights) unless given here; the output says what was kept.",
        ),
    ] = False,
    reset: Annotated[
        bool,
        option(
            "--reset",
            "Rebuild from the defaults and the options given here, forgetting what the "
            "group was built with.",
        ),
    ] = False,
    allow_missing_chunks: Annotated[
        bool,
        option(
            "--allow-missing-chunks",
            "Rebuild even where raw chunks the last build summed are missing (they are "
            "summed as missing values).",
        ),
    ] = False,
    shards: Annotated[
        bool | None,
        typer.Option(
            "--shards/--no-shards",
            help="Write the accumulation arrays in shards (Zarr v3). "
            "Default: when the variable is.",
        ),
    ] = None,
    minimal: Annotated[
        bool,
        option(
            "--minimal",
            "ZEP 5 as written only: every dimension alone plus lat,lon at chunk ends (the "
            "default adds entries every 2 days and at every cell: see inspect).",
        ),
    ] = False,
    stats: Annotated[
        str | None,
        option(
            "--stats",
            "Also store the sums these statistics need, comma-separated: var (var and std: "
            "Σw(x−c)²), trend (Σt, Σt², Σt·x), corr:VAR2 (pair sums with VAR2, along time). "
            "Beside the default layout they sit at chunk ends and months. Not built by default.",
        ),
    ] = None,
    into: Annotated[
        str | None,
        option(
            "--into",
            "Write the accumulations into this store beside the cube (a sidecar), which is "
            "only read: for URLs and reference files. Run again to extend or refresh it.",
        ),
    ] = None,
    group: CubeGroup = None,
    *,
    source: dict[str, Any],
) -> None:
    """Build the ZEP 5 accumulation group of a variable (chunk by chunk, with Dask)."""
    api = load_api()

    strides = {
        k: positive_int(v, f"--stride {k}") for k, v in pairs(stride or [], "--stride").items()
    }
    with ProgressBar(f"accumulating {variable}") as report:
        result = api.accumulate(
            store,
            variable,
            dims,
            weights=weights,
            strides=strides,
            at=at,
            scheduler=scheduler,
            rebuild=rebuild,
            reset=reset,
            allow_missing_chunks=allow_missing_chunks,
            shards=shards,
            progress=report,
            group=group,
            into=into,
            minimal=minimal,
            stats=[s.strip() for s in stats.split(",") if s.strip()] if stats else None,
            **source,
        )
    if result.action == "up to date":
        console.print(f"{variable}: accumulations already up to date; nothing written")
        return
    if result.kept:
        console.print(f"{variable}: {result.kept}", highlight=False)
    console.print(
        f"{variable}: {result.action} {len(result.arrays)} accumulation arrays with weights "
        f"{result.group.weights} in {result.seconds:.1f} s; raw array "
        f"{size_text(result.raw_stored)} stored"
    )
    for acc in result.group.accumulations:
        console.print(f"  {'+'.join(acc.dims)} at {acc.rule_text()}: " + stored_text(
            result.stored.get(acc.key), result.raw_stored
        ))  # fmt: skip
    for other, done in result.pairs.items():
        console.print(f"  corr pair sums with {other} (time at chunk ends): {done}")


@reaching_stores
def inspect(
    store: Store,
    as_json: Annotated[bool, option("--json", "Print everything as JSON.")] = False,
    group: DataGroup = None,
    *,
    source: dict[str, Any],
) -> None:
    """Arrays, dimensions, chunk grids, codecs, sizes and accumulation groups of a cube."""
    import json

    from rich.table import Table

    info = load_api().inspect(store, group=group, **source)
    if as_json:
        print(json.dumps(info, default=str))
        return
    console.print(
        f"[bold]{info['store']}[/]  Zarr v{info['zarr_format']}, "
        f"{'consolidated' if info['consolidated'] else 'not consolidated'} metadata; dimensions "
        + ", ".join(f"{d}={n}" for d, n in info["dimensions"].items())
    )
    table = Table("array", "dims", "shape", "chunks", "dtype", "codecs", "stored", "objects")
    for a in info["arrays"]:
        table.add_row(
            a["path"],
            ",".join(a["dims"]),
            "x".join(map(str, a["shape"])),
            _grid_text(a["chunk_grid"]),
            a["dtype"],
            " ".join(c.get("id") or c.get("name", "?") for c in a["codecs"]),
            size_text(a["bytes_stored"]),
            "unknown" if a["objects"] is None else str(a["objects"]),
        )
    console.print(table)
    for name, note in info["inferred"].items():
        console.print(f"inferred for {name}: {note}", highlight=False)
    if "history" in info:  # an icechunk repository: its commits, newest first
        commits = Table("commit", "time", "granules", "extent", "message")
        for c in info["history"]:
            commits.add_row(
                c["snapshot"],
                f"{c['written']:%Y-%m-%d %H:%M:%S}",
                str(c["granules"]),
                str(c["extent"]),
                c["message"],
            )
        console.print(commits)
    if "sidecar" in info:
        side = info["sidecar"]
        console.print(f"accumulations from sidecar {side['store']} (source {side['source']})")
        for name, state in side["variables"].items():
            if state["stale"]:
                console.print(f"[red]{name}: stale[/]: {state['stale']}", highlight=False)
    for g in info["accumulation_groups"]:
        status = "complete" if g["complete"] else "[red]incomplete (ignored by queries)[/]"
        if g["missing_chunks"]:
            count = sum(m["count"] for m in g["missing_chunks"].values())
            first = next(iter(g["missing_chunks"].values()))["first"]
            status = (
                f"[red]damaged: {count} chunk objects missing (first {first}); queries of "
                f"them fail: `accumulus accumulate {info['store']} {g['variable']} --rebuild`[/]"
            )
        cover = ", ".join(f"{d} {c['covered']}/{c['size']}" for d, c in g["coverage"].items())
        objects = [a["objects"] for acc in g["accumulations"] for a in _unique_arrays(acc)]
        console.print(
            f"[bold]{g['path']}[/] ({g['producer']}), {g['layout']} layout, weights "
            f"{g['weights']}, {status}; "
            f"covers {cover}; strides count {g['stride_unit']}s; "
            + ("objects unknown" if None in objects else f"{sum(objects)} objects")
        )
        sizes = [acc["bytes_stored"] for acc in g["accumulations"]]
        if g["accumulations"] and None not in sizes:
            raw = g["accumulations"][0]["raw_bytes_stored"]
            console.print("  all accumulations: " + stored_text(sum(sizes), raw))
            for stat, size in g["stats"].items():
                console.print(f"  of which the sums of --stats {stat}: " + stored_text(size, raw))
            if g.get("stats_siblings_bytes"):
                console.print(
                    "  of which the accumulations holding them at chunk ends and months: "
                    + stored_text(g["stats_siblings_bytes"], raw)
                )
        for other, kept in g.get("pairs", {}).items():
            if kept.get("complete"):
                console.print(
                    f"  pair sums with {other} (--stats corr:{other}): {kept['entries']} entries "
                    f"at {kept['at']} of {kept['dim']}, "
                    + stored_text(
                        kept["array"]["bytes_stored"],
                        g["accumulations"][0]["raw_bytes_stored"] if g["accumulations"] else None,
                    )
                )
            else:
                console.print(f"  pair sums with {other}: unfinished (run accumulate again)")
        for acc in g["accumulations"]:
            arrays = ", ".join(
                f"{a['path'].rsplit('/', 1)[-1]} {'x'.join(map(str, a['shape']))} "
                f"({size_text(a['bytes_stored'])})"
                for a in _unique_arrays(acc)
            )
            entries = ", ".join(f"{d} {n}" for d, n in acc["entries"].items())
            console.print(
                f"  {'+'.join(acc['dims'])} at {acc['at']} (entries {entries}): {arrays}; "
                + stored_text(acc["bytes_stored"], acc["raw_bytes_stored"])
            )


def _unique_arrays(acc: dict) -> list[dict]:
    return list({v["path"]: v for v in acc["arrays"].values()}.values())


def _grid_text(grid: dict) -> str:
    if grid["type"] == "regular":
        text = "x".join(map(str, grid["chunks"]))
    else:
        text = "x".join(
            str(s[0]) if len(set(s)) == 1 else f"var({len(s)})" for s in grid["chunk_sizes"]
        )
    if "shards" in grid:
        text += " in shards " + "x".join(map(str, grid["shards"]))
    return text


@reaching_stores
def verify(
    store: Store,
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="Variable (default: every accumulated one); with --sources, the files."
        ),
    ] = None,
    sources: Annotated[
        bool,
        option(
            "--sources", "Compare the cube with the files it was made from, as xarray decodes them."
        ),
    ] = False,
    group: CubeGroup = None,
    accumulations: Annotated[
        str | None,
        option("--accumulations", "Verify the accumulations in this sidecar store (--into)."),
    ] = None,
    *,
    source: dict[str, Any],
) -> None:
    """Recompute accumulations from the raw data; exit 1 on any mismatch (a sidecar: from
    its source's, and exit 1 when it is stale). With --sources FILES…: compare the cube's
    values with its sources' instead."""
    api = load_api()

    if sources:
        if "ref" in source:
            raise AccumulusError("--ref with --sources: sources are compared with the head")
        _verify_sources(store, names or [], source)
        return
    if len(names or []) > 1:
        raise AccumulusError(f"verify takes one variable, got {names}; to compare files: --sources")
    variable = names[0] if names else None
    reports = api.verify(store, variable, group=group, accumulations=accumulations, **source)
    failed = False
    for report in reports:
        if report.ok:
            console.print(
                f"{report.variable}: OK ({len(report.checked)} accumulation arrays match)"
            )
        else:
            failed = True
            for problem in report.problems:
                err_console.print(f"[red]{report.variable}: {problem}[/]", soft_wrap=True)
    if not reports:
        console.print("no accumulation groups to verify")
    if failed:
        raise typer.Exit(1)


def _verify_sources(store: str, files: list[str], source: dict[str, Any]) -> None:
    from rich.markup import escape

    api = load_api()

    comparisons = api.verify_sources(store, files, **source)
    for comparison in comparisons:
        if comparison.ok:
            steps = f", {comparison.steps} steps" if comparison.steps is not None else ""
            noted = ", except as noted below" if comparison.notes else ""
            console.print(
                f"{comparison.source}: OK ({len(comparison.variables)} variables{steps} as "
                f"xarray decodes the file{noted})",
                highlight=False,
                soft_wrap=True,
            )
        for note in comparison.notes:
            console.print(f"{comparison.source}: {note}", highlight=False, soft_wrap=True)
        for difference in comparison.differences:
            text = escape(f"{comparison.source}: {difference.describe()}")
            err_console.print(f"[red]{text}[/]", soft_wrap=True)
    if not all(c.ok for c in comparisons):
        raise typer.Exit(1)
