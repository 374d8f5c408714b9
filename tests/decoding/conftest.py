"""The cubes here are read back by xarray and zarr themselves, as their users read them.
``append`` makes chunks along time that grow with the cube, a rectilinear chunk grid
(docs/appending.md), which zarr-python reads once its ``array.rectilinear_chunks`` setting
is on: these tests turn it on, as such a user does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import zarr


@pytest.fixture(autouse=True)
def rectilinear_chunks() -> Iterator[None]:
    with zarr.config.set({"array.rectilinear_chunks": True}):
        yield
