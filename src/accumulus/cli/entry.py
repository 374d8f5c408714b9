"""The program: the Typer application the command groups register with, ``main`` (the
command line in this process) and ``script`` (the console script, ``python -m accumulus``).

User mistakes arrive as ``AccumulusError`` and are printed on one line with exit status 2;
nothing else is caught. Start-up is kept short: this module and the command modules import
no heavy library, and ``load_api()`` imports ``accumulus.api`` (xarray, zarr) only when a command
runs.
"""

from __future__ import annotations

import gc
import os
import sys
import warnings
from importlib import import_module
from types import ModuleType
from typing import Annotated

import typer

from accumulus.cli.console import err_console
from accumulus.errors import AccumulusError, AccumulusWarning, Interrupted

app = typer.Typer(
    name="accumulus",
    help="Zarr datacubes with ZEP 5 chunk-level accumulation: fast averages over any ranges.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        print(f"accumulus {version('accumulus')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Options of the program itself, before a command."""


# Set by a command that leaves nothing to finish once it returns (a query: its answer
# printed, nothing of its own to write or close): the console script then ends at once.
_nothing_to_finish = False


def nothing_to_finish() -> None:
    """Called by a command whose work is done once it returns: ``script`` then ends the
    process without the interpreter's teardown."""
    global _nothing_to_finish
    _nothing_to_finish = True


def script() -> None:
    """The console script and ``python -m accumulus``: ``main``, then, after a command that
    left nothing to finish, the end of the process without the interpreter's teardown
    (atexit handlers, then freeing every module and object xarray, zarr and pandas made,
    which a process that is ending does not need). What was printed is flushed first."""
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
        # and find nothing worth freeing in a process that is ending: they are skipped.
        # Finalizers, atexit handlers and closing files are not affected.
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


def load_api() -> ModuleType:
    """``accumulus.api``, imported with the cyclic garbage collector paused: importing
    xarray, zarr and pandas makes a great many objects, and the collections they would
    trigger find nothing to free. The objects are then frozen out of later collections, and
    collection resumes for the command itself."""
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
