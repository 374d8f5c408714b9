"""The ``accumulus`` command.

Each command parses its options, calls one function of ``accumulus.api`` (or a subpackage's
public function) and prints the result. User mistakes arrive as ``AccumulusError`` and are
printed on one line with a non-zero exit status; nothing else is caught.

One module per command group: ``average``; ``accumulations`` (accumulate, inspect, verify);
``ingest`` (append, convert, rechunk, filters); ``repository`` (expire: an icechunk
repository's housekeeping); ``serve``; ``demo``. The options several
commands share are written once in ``options``; ``console`` holds what commands print
through; ``entry`` the program itself (the Typer app, ``main``, the console script).
Importing the package loads no heavy library: each command imports what it uses when it
runs (``tests/core/test_cli_imports.py``).
"""

from accumulus.cli import accumulations, average, demo, ingest, repository, serve
from accumulus.cli.entry import app, main, script

# The commands, in the order ``accumulus --help`` lists them.
for _command in (
    accumulations.accumulate,
    average.average,
    accumulations.inspect,
    accumulations.verify,
    demo.demo,
    ingest.filters,
    ingest.convert,
    ingest.append,
    ingest.rechunk,
    repository.expire,
    serve.serve,
):
    app.command()(_command)

__all__ = ["app", "main", "script"]
