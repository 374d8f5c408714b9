"""``accumulus_scope``: what it changes holds inside it only, or for the rest of a process
that holds it (``hold_scope``: a service's)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import zarr

from accumulus.scope import accumulus_scope, scoped


def _setting() -> bool:
    return bool(zarr.config.get("array.rectilinear_chunks"))


def test_the_scope_changes_nothing_outside_it():
    before, filters = _setting(), list(warnings.filters)

    @scoped
    def inside() -> bool:
        with accumulus_scope():  # nested: still on, and still on after it
            pass
        return _setting()

    with accumulus_scope():
        assert _setting()
        assert inside()
        assert _setting()
    assert _setting() == before and warnings.filters == filters


def test_a_process_holding_the_scope_keeps_it():
    script = textwrap.dedent(
        """
        import zarr
        from accumulus.scope import accumulus_scope, hold_scope
        assert not zarr.config.get("array.rectilinear_chunks")
        hold_scope()
        with accumulus_scope():
            pass
        print(zarr.config.get("array.rectilinear_chunks"))
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
