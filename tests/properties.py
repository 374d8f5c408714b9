"""Property tests' shared parts: the dataset a drawn case describes, and the settings of a
test that writes a cube an example."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import xarray as xr
from hypothesis import HealthCheck, settings

from cubes import synthetic_dataset


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
