"""Progress bars on stderr: the run layer's `Progress` protocol drawn with rich."""

from __future__ import annotations

import math
from typing import Callable, Optional

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from mcd_cli.report.format import stderr_console



class ProgressDisplay:
    """Progress bars on stderr for training and estimation, or nothing at all.

    Enabled only when stderr is a terminal and neither --quiet nor --json was given; when
    disabled every callback is a no-op, so the caller never needs to check.

    Example:
        >>> with ProgressDisplay(enabled=False) as p:
        ...     cb = p.training("train", total=10, start=0)
        ...     cb(0, -1.5)
    """

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._progress: Optional[Progress] = None

    def __enter__(self) -> "ProgressDisplay":
        if self.enabled:
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
                console=stderr_console(),
                transient=True,
            )
            self._progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def training(self, description: str, total: int, start: int = 0) -> Callable[[int, float], None]:
        """`callback(iteration, elbo)` for `training.fit`."""
        if self._progress is None:
            return lambda iteration, elbo: None
        progress = self._progress
        task = progress.add_task(description, total=total, completed=start, info="", rate="")

        def callback(iteration: int, elbo: float) -> None:
            speed = next((t.speed for t in progress.tasks if t.id == task), None)
            progress.update(
                task,
                completed=iteration + 1,
                info=f"ELBO {elbo:.3f}" if math.isfinite(elbo) else "ELBO (skipped)",
                rate=f"{speed:.1f} it/s" if speed else "",
            )

        return callback

    def estimation(self, description: str, total: int) -> Callable[[int, int], None]:
        """`callback(done, total)` for `estimate.estimate`."""
        if self._progress is None:
            return lambda done, total: None
        progress = self._progress
        task = progress.add_task(description, total=total, info="", rate="")

        def callback(done: int, total: int) -> None:
            progress.update(task, completed=done)

        return callback
