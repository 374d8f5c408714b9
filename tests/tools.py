"""External programs some tests run (Debian's gdal-bin and chromium, a Python 3.11 for the ZEP 5
reference generator). ``make test`` on a fresh clone needs nothing but the README's set-up, so
a test whose program is absent skips, naming it and how to install it. ``.ci/run`` installs them
all and sets ``ACCUMULUS_REQUIRE_GDAL=1`` (or ``ACCUMULUS_REQUIRE_TOOLS=1``): there an absent
program fails the test instead of letting it pass unseen."""

from __future__ import annotations

import os
import shutil

import pytest

REQUIRE = ("ACCUMULUS_REQUIRE_TOOLS", "ACCUMULUS_REQUIRE_GDAL")


def required() -> bool:
    """Whether an absent program is a failure (CI) rather than a skip."""
    return any(os.environ.get(name, "") not in ("", "0") for name in REQUIRE)


def tool(command: str, install: str, *, module: bool = False) -> str:
    """The path of ``command``; skips the test (or the module) when it is not on the PATH."""
    found = shutil.which(command)
    if found is not None:
        return found
    if required():
        pytest.fail(f"{'/'.join(REQUIRE)} is set but {command} is not on the PATH ({install})")
    pytest.skip(f"{command} is not on the PATH ({install})", allow_module_level=module)
