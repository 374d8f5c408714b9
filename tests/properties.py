"""Property tests' shared parts: the dataset a drawn case describes, and the settings of a
test that writes a cube an example."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import xarray as xr
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from cubes import labels, synthetic_dataset


def case_dataset(case: Mapping[str, Any], **options: Any) -> xr.Dataset:
    """The synthetic dataset a property test's drawn ``case`` describes (its ``sizes``,
    ``seed``, ``nan_fraction`` and ``inf_fraction``)."""
    return synthetic_dataset(
        case["sizes"],
        seed=case["seed"],
        nan_fraction=case["nan_fraction"],
        inf_fraction=case["inf_fraction"],
        **options,
    )


def cube_property(max_examples: int) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Hypothesis settings of a property test that writes a cube an example (slow examples,
    a function-scoped ``tmp_path_factory``)."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


def drawn_ranges(
    data: st.DataObject, ds: xr.Dataset, dims: Iterable[str], sizes: Mapping[str, int]
) -> tuple[dict[str, tuple[Any, Any]], dict[str, slice]]:
    """A random non-empty range along each of ``dims``: as the query's inclusive labels, and
    as the index slices that select it from ``ds``."""
    ranges, isel = {}, {}
    for dim in dims:
        lo = data.draw(st.integers(0, sizes[dim] - 1))
        hi = data.draw(st.integers(lo + 1, sizes[dim]))
        ranges[dim] = labels(ds, dim, lo, hi)
        isel[dim] = slice(lo, hi)
    return ranges, isel
