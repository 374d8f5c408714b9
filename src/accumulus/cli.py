"""The ``accumulus`` command.

Each command parses its options, calls one function of ``accumulus.api`` (or a subpackage's
public function) and prints the result. User mistakes arrive as ``AccumulusError`` and are
printed on one line with a non-zero exit status; nothing else is caught.
"""

from __future__ import annotations

import gc
import os
import sys
import warnings
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING

import typer

from accumulus.errors import AccumulusError, AccumulusWarning, Interrupted

if TYPE_CHECKING:
    from rich.console import Console

app = typer.Typer(
    name="accumulus",
    help="Zarr datacubes with ZEP 5 chunk-level accumulation: fast averages over any ranges.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


class _Console:
    """A rich ``Console`` made when first used: a command that prints plain JSON (``average
    --json``) then never imports rich, 0.02-0.03 s of its start."""

    def __init__(self, **options: bool) -> None:
        self._options = options
        self._console: Console | None = None

    @property
    def rich(self) -> Console:
        """The ``Console`` itself (for rich's own objects that take one)."""
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str):
        return getattr(self.rich, name)


console = _Console()
err_console = _Console(stderr=True)


# Set by a command that leaves nothing to finish once it returns (a query: its answer
# printed, nothing of its own to write or close): the console script then ends at once.
_nothing_to_finish = False


def script() -> None:
    """The console script and ``python -m accumulus``: ``main``, then, after a command that
    left nothing to finish, the end of the process without the interpreter's teardown
    (atexit handlers, then freeing every module and object xarray, zarr and pandas made:
    0.02-0.03 s of a 0.8 s query). What was printed is flushed first."""
    try:
        main()
    except SystemExit as exc:
        if exc.code in (None, 0) and _nothing_to_finish:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except OSError:  # a closed pipe: the interpreter's own exit reports it
                raise exc from None
            os._exit(0)
        raise


def main() -> None:
    """The command line, run in this process (the tests call it; the console script runs
    ``script``)."""
    global _nothing_to_finish
    _nothing_to_finish = False
    warnings.showwarning = _show_warning
    try:
        app()
    except AccumulusError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except SystemExit as exc:
        # Ctrl-C: typer ends the command with exit status 130 and says nothing; the
        # interruption, in the exception's chain, says what was kept and how to go on.
        interruption = _interruption(exc)
        if interruption is not None:
            kept = f": {interruption.kept}" if isinstance(interruption, Interrupted) else ""
            err_console.print(f"[yellow]interrupted[/]{kept}", highlight=False, soft_wrap=True)
        raise
    finally:
        # The interpreter's last collections at exit walk every object the libraries made
        # (0.15-0.2 s of CPU after xarray, zarr and pandas are imported) and find nothing
        # worth freeing in a process that is ending: they are skipped. Finalizers, atexit
        # handlers and closing files are not affected.
        gc.freeze()


def _interruption(exc: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt that ``exc`` was raised from, if any."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def _api() -> ModuleType:
    """``accumulus.api``, imported with the cyclic garbage collector paused: importing
    xarray, zarr and pandas makes some 190,000 objects, and the collections they would
    trigger find nothing to free (0.05-0.06 s of a command's start). The objects are then
    frozen out of later collections, and collection resumes for the command itself."""
    gc.disable()
    try:
        return import_module("accumulus.api")
    finally:
        gc.freeze()
        gc.enable()


_show_other_warning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Our warnings on one line, like our errors; others as Python shows them."""
    if issubclass(category, AccumulusWarning):
        err_console.print(f"[yellow]warning:[/] {message}", highlight=False, soft_wrap=True)
    else:
        _show_other_warning(message, category, filename, lineno, file, line)


# --- ZEP 5 core: accumulate, average, inspect, verify (issue 2) ---


def _group_option(what: str) -> typer.models.OptionInfo:
    return typer.Option(None, "--group", help=what)


CUBE_GROUP_HELP = "Group of the cube (e.g. Grid); default: the one group holding the variable."


# Every command that opens a store: where the reference sets it opens (the store, a
# sidecar's source, a granule) may read besides their own location.
ALLOW_REFERENCES = typer.Option(
    None,
    "--allow-references",
    help="A reference set (.json, .parq) may read chunks under this directory or URL "
    "prefix besides its own location, e.g. /data/granules or https://host/data/ (repeatable).",
)


def _pairs(items: list[str], what: str) -> dict[str, str]:
    """Parse repeated `key=value` options."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise AccumulusError(f"{what} must look like dim=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


class _ProgressBar:
    """A rich progress bar on stderr, shown only once work starts, and taken away when the
    work fails or is interrupted (so that an error stays one line). Call it as
    ``report(done, total)``; use it as a context manager."""

    def __init__(self, description: str) -> None:
        self.description = description
        self._bar = None
        self._task = None

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

            self._bar = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err_console.rich,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.description, total=total)
        self._bar.update(self._task, completed=done, total=total)
        if total and done >= total:
            self._bar.stop()  # finished: what is printed next goes below the bar

    def __enter__(self) -> _ProgressBar:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if self._bar is not None:
            if kind is not None:
                self._bar.live.transient = True  # erased from a terminal, never printed
            self._bar.stop()


@app.command()
def accumulate(
    store: str = typer.Argument(..., help="Cube path or URL (dir, file://, memory://, s3://)."),
    variable: str = typer.Argument(..., help="Data variable to accumulate."),
    dims: list[str] = typer.Option(
        None,
        "--dims",
        help="A combination to accumulate, e.g. time or latitude,longitude (repeatable). "
        "Default: every dimension alone plus latitude,longitude.",
    ),
    stride: list[str] = typer.Option(
        None, "--stride", help="Accumulate every k chunks along a dimension: time=2 (repeatable)."
    ),
    at: list[str] = typer.Option(
        None,
        "--at",
        help="Where entries end along a dimension instead of chunk ends: DIM=chunk (default), "
        "N (every N elements; 1 = every element), month, year, or labels "
        "(time=2001-01-01,2006-01-01); e.g. --at time=month or --at lat=1,lon=1 (repeatable).",
    ),
    weights: str = typer.Option(
        None, "--weights", help="area (cos latitude), none, or the name of a weights array."
    ),
    scheduler: str = typer.Option(
        None, "--scheduler", help="threads (default), processes, or tcp://host:port (distributed)."
    ),
    rebuild: bool = typer.Option(False, "--rebuild", help="Replace accumulations built otherwise."),
    allow_missing_chunks: bool = typer.Option(
        False,
        "--allow-missing-chunks",
        help="Rebuild even where raw chunks the last build summed are missing (they are "
        "summed as missing values).",
    ),
    shards: bool = typer.Option(
        None,
        "--shards/--no-shards",
        help="Write the accumulation arrays in shards (Zarr v3). Default: when the variable is.",
    ),
    into: str = typer.Option(
        None,
        "--into",
        help="Write the accumulations into this store beside the cube (a sidecar), which is "
        "only read: for URLs and reference files. Run again to extend or refresh it.",
    ),
    group: str = _group_option(CUBE_GROUP_HELP),
    endpoint_url: str = typer.Option(None, "--endpoint-url", help="S3 endpoint for s3:// URLs."),
    storage_option: list[str] = typer.Option(
        None, "--storage-option", help="KEY=VALUE passed to fsspec, e.g. anon=true (repeatable)."
    ),
    allow_references: list[str] = ALLOW_REFERENCES,
) -> None:
    """Build the ZEP 5 accumulation group of a variable (chunk by chunk, with Dask)."""
    api = _api()

    strides = {
        k: _positive_int(v, f"--stride {k}") for k, v in _pairs(stride or [], "--stride").items()
    }
    with _ProgressBar(f"accumulating {variable}") as report:
        result = api.accumulate(
            store,
            variable,
            dims or None,
            weights=weights,
            strides=strides,
            at=at or None,
            scheduler=scheduler,
            rebuild=rebuild,
            allow_missing_chunks=allow_missing_chunks,
            shards=shards,
            progress=report,
            storage_options=_storage_options(endpoint_url, storage_option),
            group=group,
            into=into,
            allow_references=allow_references or None,
        )
    if result.action == "up to date":
        console.print(f"{variable}: accumulations already up to date; nothing written")
        return
    console.print(
        f"{variable}: {result.action} {len(result.arrays)} accumulation arrays with weights "
        f"{result.group.weights} in {result.seconds:.1f} s; raw array "
        f"{_size(result.raw_stored)} stored"
    )
    for acc in result.group.accumulations:
        console.print(f"  {'+'.join(acc.dims)} at {acc.rule_text()}: " + _stored_text(
            result.stored.get(acc.key), result.raw_stored
        ))  # fmt: skip


def _stored_text(stored: int | None, raw: int | None) -> str:
    """An accumulation's stored bytes, and as a multiple of the raw array's."""
    ratio = f" ({stored / raw:.2f}x the raw array)" if stored is not None and raw else ""
    return f"{_size(stored)} stored{ratio}"


def _positive_int(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise AccumulusError(f"{what} must be a positive integer, got {text!r}") from None
    if value < 1:
        raise AccumulusError(f"{what} must be a positive integer, got {value}")
    return value


def _storage_options(endpoint_url: str | None, items: list[str] | None) -> dict | None:
    from accumulus.stores.locations import parse_storage_options

    options = parse_storage_options(items or [])
    if endpoint_url:
        options["endpoint_url"] = endpoint_url
    return options or None


def _ranges(items: list[str]) -> dict[str, tuple[str | None, str | None]]:
    from accumulus.api import split_range

    return {dim: split_range(dim, text) for dim, text in _pairs(items, "--range").items()}


@app.command()
def average(
    store: str = typer.Argument(..., help="Cube path or URL."),
    variable: str = typer.Argument(..., help="Data variable."),
    over: str = typer.Option(..., "--over", help="Dimensions averaged away: latitude,longitude."),
    range_: list[str] = typer.Option(
        None,
        "--range",
        help="dim=start/end, inclusive labels (repeatable); lon=170/-170 crosses the date line.",
    ),
    stat: str = typer.Option("mean", "--stat", help="mean, sum or count (= sum of weights)."),
    weights: str = typer.Option(
        None, "--weights", help="area, none or a weights array (default: the accumulations')."
    ),
    no_accumulation: bool = typer.Option(
        False, "--no-accumulation", help="Force a full scan of the raw data, for comparison."
    ),
    plan: str = typer.Option(
        "cheaper",
        "--plan",
        help="cheaper: the accumulations or a full scan, whichever reads less; accumulation: "
        "the accumulations even when a scan reads less.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as one JSON object."),
    as_csv: bool = typer.Option(False, "--csv", help="Print the result as CSV."),
    png: str = typer.Option(
        None, "--png", help="Draw the answer (series, map or Hovmöller diagram) to this PNG."
    ),
    accumulations: str = typer.Option(
        None, "--accumulations", help="Read accumulations from this sidecar store (--into)."
    ),
    group: str = _group_option(CUBE_GROUP_HELP),
    shape: str = typer.Option(
        None,
        "--shape",
        help="Average over a shape: FILE (GeoJSON, shapefile...) or FILE:VALUE, the feature "
        "with a property equal to VALUE (or FILE:PROPERTY=VALUE). Cells count when their "
        "centre is inside.",
    ),
    region: str = typer.Option(
        None,
        "--region",
        help="Average over a named region: SET:NAME, e.g. ar6:WAF, srex:AMZ, giorgi:SAS, "
        "prudence:AL (sets shipped offline).",
    ),
    endpoint_url: str = typer.Option(None, "--endpoint-url", help="S3 endpoint for s3:// URLs."),
    storage_option: list[str] = typer.Option(
        None, "--storage-option", help="KEY=VALUE passed to fsspec, e.g. anon=true (repeatable)."
    ),
    allow_references: list[str] = ALLOW_REFERENCES,
) -> None:
    """Average (or sum, or count) a variable over dimensions and label ranges, or a shape."""
    from accumulus.destinations import check_file, write_file

    picture = check_file(png, "the picture") if png else None  # before the query runs
    api = _api()
    from accumulus import output

    result = api.query(
        store,
        variable,
        over,
        _ranges(range_ or []),
        stat=stat,
        weights=weights,
        use_accumulation=not no_accumulation,
        plan=plan,
        storage_options=_storage_options(endpoint_url, storage_option),
        group=group,
        shape=_shape(shape, region),
        accumulations=accumulations,
        allow_references=allow_references or None,
    )
    if picture is not None:
        write_file(picture, output.result_png(result))
    if as_json:
        print(output.result_json_bytes(result).decode())
    elif as_csv:
        print(output.result_csv(result), end="")
    else:
        _print_result(result, png)
    global _nothing_to_finish
    _nothing_to_finish = True


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
        console.print(str(data.to_pandas()))  # pandas shortens a large table itself
    console.print(
        f"[dim]{stats.accumulation_chunks_read} accumulation chunks, {stats.raw_chunks_read} raw "
        f"chunks, {stats.bytes_read} bytes read in {stats.seconds * 1000:.1f} ms"
        + (f"; {result.note}" if result.note else "")
        + (f"; plot written to {png}" if png else "")
        + "[/]"
    )


@app.command()
def inspect(
    store: str = typer.Argument(..., help="Cube path or URL."),
    as_json: bool = typer.Option(False, "--json", help="Print everything as JSON."),
    group: str = _group_option("Group of the cube; default: the one group holding data."),
    endpoint_url: str = typer.Option(None, "--endpoint-url", help="S3 endpoint for s3:// URLs."),
    storage_option: list[str] = typer.Option(
        None, "--storage-option", help="KEY=VALUE passed to fsspec, e.g. anon=true (repeatable)."
    ),
    allow_references: list[str] = ALLOW_REFERENCES,
) -> None:
    """Arrays, dimensions, chunk grids, codecs, sizes and accumulation groups of a cube."""
    import json

    from rich.table import Table

    api = _api()

    info = api.inspect(
        store,
        storage_options=_storage_options(endpoint_url, storage_option),
        group=group,
        allow_references=allow_references or None,
    )
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
            _size(a["bytes_stored"]),
            "unknown" if a["objects"] is None else str(a["objects"]),
        )
    console.print(table)
    for name, note in info["inferred"].items():
        console.print(f"inferred for {name}: {note}", highlight=False)
    if "sidecar" in info:
        side = info["sidecar"]
        console.print(f"accumulations from sidecar {side['store']} (source {side['source']})")
        for name, state in side["variables"].items():
            if state["stale"]:
                console.print(f"[red]{name}: stale[/]: {state['stale']}", highlight=False)
    for g in info["accumulation_groups"]:
        status = "complete" if g["complete"] else "[red]incomplete (ignored by queries)[/]"
        cover = ", ".join(f"{d} {c['covered']}/{c['size']}" for d, c in g["coverage"].items())
        objects = [a["objects"] for acc in g["accumulations"] for a in _unique_arrays(acc)]
        console.print(
            f"[bold]{g['path']}[/] ({g['producer']}), weights {g['weights']}, {status}; "
            f"covers {cover}; strides count {g['stride_unit']}s; "
            + ("objects unknown" if None in objects else f"{sum(objects)} objects")
        )
        for acc in g["accumulations"]:
            arrays = ", ".join(
                f"{a['path'].rsplit('/', 1)[-1]} {'x'.join(map(str, a['shape']))} "
                f"({_size(a['bytes_stored'])})"
                for a in _unique_arrays(acc)
            )
            entries = ", ".join(f"{d} {n}" for d, n in acc["entries"].items())
            console.print(
                f"  {'+'.join(acc['dims'])} at {acc['at']} (entries {entries}): {arrays}; "
                + _stored_text(acc["bytes_stored"], acc["raw_bytes_stored"])
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


def _size(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@app.command()
def verify(
    store: str = typer.Argument(..., help="Cube path or URL."),
    names: list[str] = typer.Argument(
        None, help="Variable (default: every accumulated one); with --sources, the files."
    ),
    sources: bool = typer.Option(
        False,
        "--sources",
        help="Compare the cube with the files it was made from, as xarray decodes them.",
    ),
    group: str = _group_option(CUBE_GROUP_HELP),
    endpoint_url: str = typer.Option(None, "--endpoint-url", help="S3 endpoint for s3:// URLs."),
    storage_option: list[str] = typer.Option(
        None, "--storage-option", help="KEY=VALUE passed to fsspec, e.g. anon=true (repeatable)."
    ),
    accumulations: str = typer.Option(
        None, "--accumulations", help="Verify the accumulations in this sidecar store (--into)."
    ),
    allow_references: list[str] = ALLOW_REFERENCES,
) -> None:
    """Recompute accumulations from the raw data; exit 1 on any mismatch (a sidecar: from
    its source's, and exit 1 when it is stale). With --sources FILES…: compare the cube's
    values with its sources' instead."""
    api = _api()

    options = _storage_options(endpoint_url, storage_option)
    allowed = allow_references or None
    if sources:
        _verify_sources(store, names or [], options, allowed)
        return
    if len(names or []) > 1:
        raise AccumulusError(f"verify takes one variable, got {names}; to compare files: --sources")
    variable = names[0] if names else None
    reports = api.verify(
        store,
        variable,
        storage_options=options,
        group=group,
        accumulations=accumulations,
        allow_references=allowed,
    )
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


def _verify_sources(
    store: str, files: list[str], storage_options: dict | None, allowed: list[str] | None
) -> None:
    from rich.markup import escape

    api = _api()

    comparisons = api.verify_sources(
        store, files, storage_options=storage_options, allow_references=allowed
    )
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


@app.command()
def demo(
    directory: str = typer.Option("demo-output", "--dir", help="Where the cube and plots go."),
    days: int = typer.Option(1461, "--days", help="Length of the daily series."),
    resolution: float = typer.Option(1.0, "--resolution", help="Grid spacing in degrees."),
    fresh: bool = typer.Option(False, "--fresh", help="Regenerate the cube even if present."),
) -> None:
    """Build a synthetic daily precipitation cube, accumulate it, and answer an area-averaged
    time series and a time-averaged map with accumulations and by full scan."""
    from accumulus.demo import DemoConfig, run_demo

    if days < 1 or not 0 < resolution <= 30:
        raise AccumulusError("--days must be >= 1 and --resolution in (0, 30] degrees")
    config = DemoConfig(days=days, resolution=resolution)
    with _ProgressBar("accumulating precip") as report:
        comparisons = run_demo(directory, config, console.print, report, fresh)
    worst = max(c.max_abs_difference for c in comparisons)
    console.print(
        f"\n[bold]both answers agree to {worst:.1e} mm/day[/]; speed-ups "
        + ", ".join(f"x{c.speedup:.0f}" for c in comparisons)
    )


# --- filters and convert (issue 4) ---


@app.command()
def filters(
    as_json: bool = typer.Option(False, "--json", help="Print the table as JSON."),
) -> None:
    """The HDF5 filter ↔ Zarr codec pairing table: which filters are usable here, and why not."""
    import json

    from accumulus.filters import default_registry

    registry = default_registry()
    rows = registry.pairs()
    if as_json:
        document = {"filters": [row.to_dict() for row in rows], "problems": registry.problems}
        console.print_json(json.dumps(document))
        return
    line = "{:>6}  {:<12} {:<16} {:<11} {:<15} {:<10} {}"
    console.print(
        line.format("id", "filter", "codec", "HDF5 side", "codec side", "same bytes", "usable"),
        style="bold",
        highlight=False,
    )
    for row in rows:
        same_bytes = {True: "yes", False: "no", None: "-"}[row.same_bytes]
        hdf5_side = _side_text(row.hdf5_provider, row.hdf5_problem)
        codec_side = _side_text(row.codec_provider, row.codec_problem)
        usable = "yes" if row.usable else "no"
        text = line.format(
            row.hdf5_id, row.name, row.codec_id or "-", hdf5_side, codec_side, same_bytes, usable
        )
        console.print(text, highlight=False)
    console.print()
    for row in rows:
        if not row.usable:
            console.print(f"{row.hdf5_id} {row.name}: {row.reason}", highlight=False)
    for problem in registry.problems:
        err_console.print(f"[yellow]plugin not loaded:[/] {problem}", highlight=False)


def _side_text(provider: str | None, problem: str | None) -> str:
    if provider is None:
        return "missing"
    return provider if problem is None else f"{provider} (no)"  # the reason is printed below


@app.command()
def convert(
    src: str = typer.Argument(..., help="NetCDF4/HDF5 or NetCDF-3 file."),
    dest: str = typer.Argument(..., help="Zarr directory to create (must not exist)."),
    zarr_format: int = typer.Option(2, "--zarr-format", help="2 (default) or 3."),
    codec: list[str] = typer.Option(
        [],
        "--codec",
        help="VAR='<json>' for one variable, or '<json>' for all others; a codec or a list.",
    ),
    group: str = _group_option(
        "Convert this group (and its nested groups) only, kept at its place; default: all."
    ),
) -> None:
    """Convert a NetCDF4/HDF5 or NetCDF-3 file to Zarr, keeping each variable's compression
    (NetCDF-3 has none: its variables get the default codec)."""
    from accumulus.ingest.convert import convert as convert_file
    from accumulus.ingest.convert import parse_codec_options

    per_variable, default = parse_codec_options(codec)
    plan = convert_file(
        src,
        dest,
        zarr_format=zarr_format,
        codecs=per_variable,
        default_codec=default,
        group=group,
    )
    for array in plan.arrays:
        codecs = ", ".join(c["id"] for c in array.codecs) or "none"
        console.print(f"{array.path} {list(array.shape)} {array.dtype}: {codecs}", highlight=False)
    if plan.note:
        console.print(plan.note, highlight=False, soft_wrap=True)
    console.print(
        f"wrote {dest} from {plan.source_format} (Zarr v{zarr_format}, {len(plan.arrays)} arrays)"
    )


# --- append (issue 3) ---


@app.command()
def append(
    store: str = typer.Argument(..., help="Cube path or URL (dir, file://, s3://)."),
    granules: list[str] = typer.Argument(
        ..., help="NetCDF4/HDF5 files or Zarr stores, in any order."
    ),
    dim: str = typer.Option("time", "--dim", help="The dimension to append along."),
    chunks: list[str] = typer.Option(
        None,
        "--chunks",
        help="When the cube is created: dim=size,... e.g. time=40 (default: ~100 MiB chunks).",
    ),
    chunking: str = typer.Option(
        None,
        "--chunking",
        help="When the cube is created, along --dim: month or year (a chunk per calendar "
        "period), per-granule (each granule a chunk), or a size. Variable chunks need Zarr v3.",
    ),
    shards: list[str] = typer.Option(
        None,
        "--shards",
        help="When the cube is created (Zarr v3): data chunks packed in shards of dim=size,... "
        "e.g. time=365 (multiples of the chunks; one chunk per shard along other dimensions).",
    ),
    skip_existing: bool = typer.Option(
        False, "--skip-existing", help="Skip steps already in the cube instead of refusing."
    ),
    zarr_format: int = typer.Option(
        None,
        "--zarr-format",
        help="When the cube is created: 2 or 3 (default 2; 3 with variable --chunking or "
        "--shards).",
    ),
    group: str = _group_option(
        "Group of the granules to append (with its nested groups), kept at the same place "
        "in the cube; default: the one group holding variables along --dim."
    ),
    endpoint_url: str = typer.Option(None, "--endpoint-url", help="S3 endpoint for s3:// URLs."),
    storage_option: list[str] = typer.Option(
        None, "--storage-option", help="KEY=VALUE passed to fsspec, e.g. anon=true (repeatable)."
    ),
    virtual: bool = typer.Option(
        False,
        "--virtual",
        help="Write references to the granules' chunks, no data copied: a .json reference "
        "file, or a .parq Parquet reference set (for large archives).",
    ),
    allow_references: list[str] = ALLOW_REFERENCES,
) -> None:
    """Create a cube from granules, or append them to it. Safe to re-run, safe to kill."""
    api = _api()

    options = _storage_options(endpoint_url, storage_option)
    if virtual:
        if chunks or chunking or shards:
            raise AccumulusError(
                "--virtual keeps the granules' own chunks; --chunks, --chunking and --shards "
                "do not apply"
            )
        _append_virtual(store, granules, dim, zarr_format, skip_existing, options, group)
        return
    items = [item for text in chunks or [] for item in text.split(",") if item.strip()]
    sizes = {d: _positive_int(n, f"--chunks {d}") for d, n in _pairs(items, "--chunks").items()}
    items = [item for text in shards or [] for item in text.split(",") if item.strip()]
    shard_sizes = {
        d: _positive_int(n, f"--shards {d}") for d, n in _pairs(items, "--shards").items()
    }
    with _ProgressBar("checking and appending granules") as report:
        result = api.append(
            store,
            granules,
            dim=dim,
            chunks=sizes or None,
            chunking=chunking,
            skip_existing=skip_existing,
            storage_options=options,
            zarr_format=zarr_format,
            progress=report,
            group=group,
            shards=shard_sizes or None,
            allow_references=allow_references or None,
        )
    if result.recovered:
        console.print(f"[yellow]recovered:[/] {result.recovered}", highlight=False)
    if result.chunking is not None:
        console.print(f"created {result.store}: {result.chunking.reason}", highlight=False)
    for name, why in result.skipped:
        console.print(f"[dim]skipped {name}: {why}[/]", highlight=False)
    before, after = result.extent
    if not result.appended:
        console.print(f"nothing to append; {dim} has {after} steps", highlight=False)
        return
    updated = (
        f"; accumulations updated for {', '.join(result.accumulations)}"
        if result.accumulations
        else ""
    )
    console.print(
        f"appended {len(result.appended)} granule(s): {dim} {before} → {after} steps in "
        f"{result.commits} commit(s), {result.seconds:.1f} s{updated}",
        highlight=False,
    )


def _append_virtual(
    out: str,
    granules: list[str],
    dim: str,
    zarr_format: int | None,
    skip_existing: bool,
    options: dict | None,
    group: str | None,
) -> None:
    from accumulus.destinations import check_file, check_store
    from accumulus.ingest.virtual import LARGE_JSON_SET, append_virtual
    from accumulus.stores.locations import local_path
    from accumulus.stores.reference_sets import is_parquet_references
    from accumulus.stores.reference_targets import directories_to_allow

    if local_path(out) is not None:  # before any granule is read
        check = check_store if is_parquet_references(out) else check_file
        check(out, "the reference set")
    try:
        result = append_virtual(
            out,
            granules,
            dim,
            zarr_format=zarr_format,
            skip_existing=skip_existing,
            storage_options=options,
            group=group,
        )
    except KeyboardInterrupt:
        raise Interrupted(
            f"{out} is unchanged (a reference set is replaced in one write, once every granule "
            "is read); run the same command again"
        ) from None
    for name, why in result.skipped:
        console.print(f"[dim]skipped {name}: {why}[/]", highlight=False)
    before, after = result.extent
    if not result.appended:
        console.print(f"nothing to append; {dim} has {after} steps", highlight=False)
        return
    share = result.bytes_read / result.granule_bytes if result.granule_bytes else 0.0
    console.print(
        f"{'created' if result.created else 'extended'} {out} (virtual, Zarr "
        f"v{result.zarr_format}): {len(result.appended)} granule(s) referenced, {dim} "
        f"{before} → {after} steps; read {_size(result.bytes_read)} of "
        f"{_size(result.granule_bytes)} ({share:.1%}) in {result.seconds:.1f} s",
        highlight=False,
    )
    outside = directories_to_allow(out, result.appended)
    if outside:
        console.print(
            f"[dim]{out} reads granules outside its own directory only where its readers "
            f"allow them: --allow-references {' --allow-references '.join(outside)}[/]",
            highlight=False,
            soft_wrap=True,  # a command to copy, on one line
        )
    if out.endswith(".json") and result.references > LARGE_JSON_SET:
        console.print(
            f"[dim]{out} holds {result.references:,} chunk references, which every reader "
            "parses to open it; a Parquet reference set opens lazily at any size: "
            f"accumulus append {out.removesuffix('.json')}.parq GRANULES --virtual[/]",
            highlight=False,
        )


# --- variable chunking (issue 5) ---


@app.command()
def rechunk(
    src: str = typer.Argument(..., help="Cube path or URL to read."),
    dest: str = typer.Argument(..., help="Store to write (must not exist): dir, memory://, s3://."),
    chunks: list[str] = typer.Option(
        ...,
        "--chunks",
        help="dim=rule: time=month, time=year, lat=90 or time=31,28,31,... (repeatable; "
        "several in one: time=month,lat=90). Dimensions not named keep their chunks.",
    ),
    zarr_format: int = typer.Option(
        None, "--zarr-format", help="2 or 3. Default: the source's, or 3 when chunks vary."
    ),
    scheduler: str = typer.Option(
        None, "--scheduler", help="threads (default), processes, or tcp://host:port (distributed)."
    ),
    endpoint_url: str = typer.Option(None, "--endpoint-url", help="S3 endpoint for s3:// URLs."),
    storage_option: list[str] = typer.Option(
        None, "--storage-option", help="KEY=VALUE passed to fsspec, e.g. anon=true (repeatable)."
    ),
    allow_references: list[str] = ALLOW_REFERENCES,
) -> None:
    """Copy a cube with other chunks (e.g. one chunk per month), rebuilding accumulations."""
    from accumulus.grid import parse_chunk_rules
    from accumulus.rechunk import rechunk as rechunk_cube

    with _ProgressBar("rechunking") as report:
        result = rechunk_cube(
            src,
            dest,
            chunks,
            zarr_format,
            scheduler=scheduler,
            progress=report,
            storage_options=_storage_options(endpoint_url, storage_option),
            allow_references=allow_references or None,
        )
    named = set(parse_chunk_rules(chunks))
    for path, sizes in result.chunks.items():
        if named & set(sizes):
            text = ", ".join(f"{dim} {_chunk_sizes_text(s)}" for dim, s in sizes.items())
            console.print(f"{path}: {text}", highlight=False)
    rebuilt = f"; accumulations rebuilt for {', '.join(result.accumulated)}"
    console.print(
        f"wrote {result.dest} (Zarr v{result.zarr_format}, {len(result.chunks)} arrays"
        f"{rebuilt if result.accumulated else ''}) in {result.seconds:.1f} s",
        highlight=False,
    )


def _chunk_sizes_text(sizes: tuple[int, ...]) -> str:
    count = f"{len(sizes)} chunk{'s' if len(sizes) != 1 else ''}"
    if len(set(sizes[:-1])) <= 1 and (not sizes or sizes[-1] <= sizes[0]):
        return f"{sizes[0] if sizes else 0} ({count})"
    shown = ",".join(map(str, sizes[:12])) + (",…" if len(sizes) > 12 else "")
    return f"{shown} ({count})"


# --- service (issue 6) ---


@app.command()
def serve(
    stores: list[str] = typer.Argument(
        ...,
        help="Cubes to serve (paths or URLs); each is a dataset named by its base name. A "
        "sidecar (accumulate --into) is served for the source it names.",
    ),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to bind (loopback unless you say otherwise)."
    ),
    workers: int = typer.Option(
        1,
        "--workers",
        min=1,
        help="Processes answering on the port, e.g. one per core. Each has its own cache and "
        "limits (--computations, --memory-mb, --cache-mb hold per process).",
    ),
    max_cells: int = typer.Option(
        None, "--max-cells", min=1, help="Refuse answers with more values (default 2000000)."
    ),
    cache_mb: int = typer.Option(256, "--cache-mb", min=0, help="Memory for cached answers."),
    computations: int = typer.Option(
        2, "--computations", min=1, help="Answers computed at once; others wait, then get 503."
    ),
    memory_mb: int = typer.Option(  # budget.DEFAULT_MEMORY_BYTES (not imported: zarr)
        512, "--memory-mb", min=16, help="Memory one computation's raw reads may hold."
    ),
    queue_seconds: float = typer.Option(
        10.0, "--queue-seconds", min=0.1, help="How long a request waits for a computation."
    ),
    request_seconds: float = typer.Option(
        60.0, "--request-seconds", min=0.1, help="Longest computation (then 504)."
    ),
    group: str = _group_option(
        "Group of each cube to serve; default: the one group holding data variables."
    ),
    endpoint_url: str = typer.Option(None, "--endpoint-url", help="S3 endpoint for s3:// URLs."),
    storage_option: list[str] = typer.Option(
        None, "--storage-option", help="KEY=VALUE passed to fsspec, e.g. anon=true (repeatable)."
    ),
    accumulations: list[str] = typer.Option(
        None,
        "--accumulations",
        help="Read each cube's accumulations from this sidecar store (once per cube, in order).",
    ),
    allow_references: list[str] = ALLOW_REFERENCES,
    allowed_host: list[str] = typer.Option(
        None,
        "--allowed-host",
        help="A Host name clients reach the service by, besides the loopback names and "
        "--host (repeatable; *.example.org for subdomains, * for any): others get 400.",
    ),
) -> None:
    """Serve the HTTP API and the web page: area-averaged time series and time-averaged maps."""
    from accumulus.service import serve as run_service
    from accumulus.service.guard import ServiceLimits

    cells = {"max_cells": max_cells} if max_cells else {}
    run_service(
        stores,
        host=host,
        port=port,
        workers=workers,
        cache_bytes=cache_mb * 2**20,
        storage_options=_storage_options(endpoint_url, storage_option),
        limits=ServiceLimits(
            computations=computations,
            queue_seconds=queue_seconds,
            request_seconds=request_seconds,
            memory_bytes=memory_mb * 2**20,
        ),
        group=group,
        accumulations=accumulations or None,
        allow_references=allow_references or None,
        allowed_hosts=allowed_host or (),
        **cells,
    )
