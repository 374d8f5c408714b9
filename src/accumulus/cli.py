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
