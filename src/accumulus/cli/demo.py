"""``demo``: a synthetic cube, accumulated, and two questions answered both ways."""

from __future__ import annotations

from typing import Annotated

from accumulus.cli.console import ProgressBar, console
from accumulus.cli.options import option
from accumulus.errors import AccumulusError


def demo(
    directory: Annotated[str, option("--dir", "Where the cube and plots go.")] = "demo-output",
    days: Annotated[int, option("--days", "Length of the daily series.")] = 1461,
    resolution: Annotated[float, option("--resolution", "Grid spacing in degrees.")] = 1.0,
    fresh: Annotated[bool, option("--fresh", "Regenerate the cube even if present.")] = False,
) -> None:
    """Build a synthetic daily precipitation cube, accumulate it (the default layout), and
    answer an area-averaged time series and two time-averaged maps (whole months, and
    day-precise ends) with accumulations and by full scan."""
    from accumulus.demo import DemoConfig, run_demo

    if days < 1 or not 0 < resolution <= 30:
        raise AccumulusError("--days must be >= 1 and --resolution in (0, 30] degrees")
    config = DemoConfig(days=days, resolution=resolution)
    with ProgressBar("accumulating precip") as report:
        comparisons = run_demo(directory, config, console.print, report, fresh)
    worst = max(c.max_abs_difference for c in comparisons)
    console.print(
        f"\n[bold]all answers agree to {worst:.1e} mm/day[/]; speed-ups "
        + ", ".join(f"x{c.speedup:.0f}" for c in comparisons)
    )
