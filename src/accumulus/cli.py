"""The ``accumulus`` command.

Each command parses its options, calls one function of ``accumulus.api`` (or a subpackage's
public function) and prints the result. User mistakes arrive as ``AccumulusError`` and are
printed on one line with a non-zero exit status; nothing else is caught.
"""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from accumulus.errors import AccumulusError

app = typer.Typer(
    name="accumulus",
    help="Zarr datacubes with ZEP 5 chunk-level accumulation: fast averages over any ranges.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


def main() -> None:
    """Entry point of the console script and of ``python -m accumulus``."""
    try:
        app()
    except AccumulusError as exc:
        err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)


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
    line = "{:>6}  {:<12} {:<11} {:<11} {:<15} {:<10} {}"
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
    src: str = typer.Argument(..., help="NetCDF4/HDF5 file."),
    dest: str = typer.Argument(..., help="Zarr directory to create (must not exist)."),
    zarr_format: int = typer.Option(2, "--zarr-format", help="2 (default) or 3."),
    codec: list[str] = typer.Option(  # noqa: B008 (typer's way of declaring a list option)
        [],
        "--codec",
        help="VAR='<json>' for one variable, or '<json>' for all others; a codec or a list.",
    ),
) -> None:
    """Convert a NetCDF4/HDF5 file to Zarr, keeping each variable's compression."""
    from accumulus.ingest.convert import convert as convert_file
    from accumulus.ingest.convert import parse_codec_options

    per_variable, default = parse_codec_options(codec)
    plan = convert_file(
        src, dest, zarr_format=zarr_format, codecs=per_variable, default_codec=default
    )
    for array in plan.arrays:
        codecs = ", ".join(c["id"] for c in array.codecs) or "none"
        console.print(f"{array.path} {list(array.shape)} {array.dtype}: {codecs}", highlight=False)
    console.print(f"wrote {dest} (Zarr v{zarr_format}, {len(plan.arrays)} arrays)")
