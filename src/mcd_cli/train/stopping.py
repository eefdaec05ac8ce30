"""When training stops early: the ELBO's plateau (`--iterations auto`) and a rate too slow for the
updates a clock-bounded training needs (a policy's learning pilot). Pure functions of the host's
counters, used by `train.loop.fit` at the end of each chunk (`stop_reason`)."""

from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

from mcd_cli.config import TrainConfig


def plateaued(recent: np.ndarray, iteration: int, window: int, threshold: float = 2.0) -> bool:
    """The stopping rule of `--iterations auto`: has the ELBO stopped improving beyond its noise?

    With `W = window`, compare the mean ELBO of the last `W` updates with that of the `W` before:
    training has plateaued when the gain is below `threshold` standard errors of the difference
    of the two means (each window's standard error from its own spread, `sd / √n`, skipped
    updates left out). Needs `2W` updates first, and at least half of each window finite.

    Args:
        recent: ring buffer of the last `2W` ELBOs, ELBO of update `i` at `i mod 2W`.
        iteration: updates run so far.
        window: `W`.
        threshold: standard errors of the difference a gain must exceed to count.

    Example:
        >>> rng = np.random.default_rng(0)
        >>> flat = rng.normal(size=200)
        >>> plateaued(flat, 200, 100)
        True
        >>> rising = np.linspace(-10.0, 0.0, 200) + rng.normal(size=200)
        >>> plateaued(rising, 200, 100)
        False
    """
    if iteration < 2 * window:
        return False
    order = (np.arange(iteration - 2 * window, iteration)) % (2 * window)
    values = np.asarray(recent, dtype=np.float64)[order]
    old, new = values[:window], values[window:]
    old, new = old[np.isfinite(old)], new[np.isfinite(new)]
    if old.size < window // 2 or new.size < window // 2 or min(old.size, new.size) < 2:
        return False
    noise = np.sqrt(old.var(ddof=1) / old.size + new.var(ddof=1) / new.size)
    return bool(new.mean() - old.mean() <= threshold * noise)


def too_slow(
    iteration: int, steady: tuple[int, float], now: float, deadline: float, needed: int, cap: int, chunk: int
) -> bool:
    """Whether chunks of `chunk` updates at the rate since `steady` (the end of the first chunk:
    `(iteration, time)`) leave `iteration` short of `needed` (at most `cap`) when training stops by
    the clock: at the end of the first chunk that ends at or after `deadline`, so the chunk running
    at the deadline counts."""
    done, since = iteration - steady[0], now - steady[1]
    if done <= 0 or since <= 0:
        return False
    chunks = math.ceil(done / since * max(deadline - now, 0.0) / chunk - 1e-9)
    return iteration + chunk * chunks < min(needed, cap)


def stop_reason(
    iteration: int,
    recent: np.ndarray,
    tconf: TrainConfig,
    t0: float,
    steady: Optional[tuple[int, float]],
    seconds: Optional[float],
    min_updates: Optional[int],
    clock: Callable[[], float],
) -> tuple[Optional[str], Optional[tuple[int, float]]]:
    """Why training stops at this chunk boundary, after `iteration` updates begun at `t0` on
    `clock`, by three rules in this order: "plateau" (`TrainConfig.stop = "plateau"` and the ELBOs
    `recent` have stopped improving beyond their noise: `plateaued`), "time" (`seconds` of wall time
    have passed before the cap), "slow" (at the rate since `steady`, the clock stops training short
    of `min_updates`: `too_slow`); None: it goes on. Also `steady`, the `(iteration, time)` the rate
    is measured from: set at the end of the first chunk (which compiles), when the rule is asked for.

    The clock is read once, only when the plateau rule did not stop training.
    """
    if tconf.stop == "plateau" and plateaued(recent, iteration, tconf.plateau_window):
        return "plateau", steady
    now = clock()
    if seconds is not None and iteration < tconf.iterations and now - t0 >= seconds:
        return "time", steady
    if seconds is None or min_updates is None:
        return None, steady
    if steady is None:
        return None, (iteration, now)
    if too_slow(iteration, steady, now, t0 + seconds, min_updates, tconf.iterations, int(tconf.chunk)):
        return "slow", steady
    return None, steady
