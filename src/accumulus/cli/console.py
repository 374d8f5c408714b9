"""What the commands print through: the consoles (rich, made when first used), the progress
bar, and how sizes are written."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID


# The width of a console that is not a terminal: no line of ours is longer.
UNWRAPPED = 10_000


class _Console:
    """A rich ``Console`` made when first used: a command that prints plain JSON (``average
    --json``) then never imports rich."""

    def __init__(self, **options: Any) -> None:  # rich.console.Console's keywords
        self._options = options
        self._console: Console | None = None

    @property
    def rich(self) -> Console:
        """The ``Console`` itself (for rich's own objects that take one)."""
        if self._console is None:
            from rich.console import Console

            made = Console(**self._options)
            if not made.is_terminal and "COLUMNS" not in os.environ:
                # Piped or redirected: lines as long as they are (a suggested command must
                # not break mid-line), instead of rich's 80 columns for a non-terminal.
                made = Console(**self._options, width=UNWRAPPED, soft_wrap=True)
            self._console = made
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self.rich, name)


console = _Console()
err_console = _Console(stderr=True)


class ProgressBar:
    """A rich progress bar on stderr, shown only once work starts, and taken away when the
    work fails or is interrupted (so that an error stays one line). Call it as
    ``report(done, total)``; use it as a context manager."""

    def __init__(self, description: str, count: Callable[[int, int], str] | None = None) -> None:
        self.description = description
        # What the steps done are, as words (default "done/total"): e.g. granules, when a
        # command counts two steps for each.
        self._count = count or (lambda done, total: f"{done}/{total}")
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __call__(self, done: int, total: int) -> None:
        if self._bar is None:
            from rich.progress import BarColumn, Progress, TimeElapsedColumn

            self._bar = Progress(
                "[progress.description]{task.description}",
                BarColumn(),
                "{task.fields[count]}",
                TimeElapsedColumn(),
                console=err_console.rich,
            )
            self._bar.start()
            self._task = self._bar.add_task(self.description, total=total, count="")
        assert self._task is not None
        self._bar.update(self._task, completed=done, total=total, count=self._count(done, total))
        if total and done >= total:
            self._bar.stop()  # finished: what is printed next goes below the bar

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if self._bar is not None:
            if kind is not None:
                self._bar.live.transient = True  # erased from a terminal, never printed
            self._bar.stop()


def size_text(n: float | None) -> str:
    """Bytes as a reader writes them: 512 B, 1.5 KiB, 2.4 MiB, 3.1 GiB."""
    if n is None:
        return "unknown"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def stored_text(stored: int | None, raw: int | None) -> str:
    """An accumulation's stored bytes, and as a multiple of the raw array's."""
    ratio = f" ({stored / raw:.2f}x the raw array)" if stored is not None and raw else ""
    return f"{size_text(stored)} stored{ratio}"
