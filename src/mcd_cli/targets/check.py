"""`check`: evaluate a target's log density and gradient at draws from its initial distribution.

The report says whether the density can be used by the samplers: one finite-or-minus-infinity
scalar per point, gradients finite wherever the density is, `jax.jit` and `jax.vmap` work, and how
long one gradient evaluation takes. A bad density is reported, not raised; only a density that
cannot even be traced raises `TargetError`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from mcd_cli.targets.base import Target, TargetError
from mcd_cli.targets.validate import default_float, one_line, probe


@dataclasses.dataclass
class CheckReport:
    """What `check` found.

    Attributes:
        name: the target's name.
        dim: its dimension.
        num_points: how many points were drawn from the initial distribution.
        scalar_output: the density returned one scalar per point.
        num_finite, num_neg_inf, num_nan, num_pos_inf: how the values split (-inf is allowed).
        num_bad_gradients: points with a finite density but a non-finite gradient.
        jit_ok: the density and its gradient compile under `jax.jit`.
        vmap_ok: they can be `jax.vmap`-ed over a batch of points.
        compile_seconds: time to compile the batched value-and-gradient (None if it failed).
        seconds_per_gradient: time per point of one value-and-gradient evaluation (None if it failed).
        problems: one line per error (NaN, +inf, non-finite gradients, jit/vmap/grad failures).
        warnings: one line per concern that is not an error.
        ok: no problems.
    """

    name: str
    dim: int
    num_points: int
    scalar_output: bool = True
    num_finite: int = 0
    num_neg_inf: int = 0
    num_nan: int = 0
    num_pos_inf: int = 0
    num_bad_gradients: int = 0
    jit_ok: bool = True
    vmap_ok: bool = True
    compile_seconds: Optional[float] = None
    seconds_per_gradient: Optional[float] = None
    problems: list[str] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    ok: bool = True

    @property
    def gradients_finite(self) -> bool:
        """Gradients were computed and are finite wherever the density is."""
        return self.seconds_per_gradient is not None and self.num_bad_gradients == 0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        out = dataclasses.asdict(self)
        out["gradients_finite"] = self.gradients_finite
        return out

    def raise_if_failed(self) -> None:
        """Raises `TargetError` with the first problem when the check failed."""
        if not self.ok:
            more = f" (and {len(self.problems) - 1} more problems)" if len(self.problems) > 1 else ""
            raise TargetError(f"{self.name}: {self.problems[0]}{more}")


def _bad_gradients(values: np.ndarray, grads: np.ndarray) -> np.ndarray:
    """Where the density is finite and its gradient is not."""
    return np.isfinite(values) & ~np.all(np.isfinite(grads), axis=-1)


def _show(x: np.ndarray, head: int = 4) -> str:
    values = ", ".join(f"{v:.4g}" for v in x[:head])
    return f"[{values}, ... ({x.size} values)]" if x.size > head else f"[{values}]"


def _attempt(fn: Callable, *args: Any) -> tuple[Any, Optional[Exception]]:
    try:
        return jax.block_until_ready(fn(*args)), None
    except Exception as err:  # the user's density may fail in any way; the report says how
        return None, err


def _best_time(fn: Callable, x: Any, budget: float = 0.25, reps: int = 20) -> float:
    best, spent, done = float("inf"), 0.0, 0
    while done < 3 or (spent < budget and done < reps):
        start = time.perf_counter()
        jax.block_until_ready(fn(x))
        elapsed = time.perf_counter() - start
        best, spent, done = min(best, elapsed), spent + elapsed, done + 1
    return best


def _fallback(
    report: CheckReport, f: Callable, xs: jax.Array
) -> tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """Diagnoses why the batched, jitted value-and-gradient failed, computing what still works."""
    single = jax.jit(f)
    values, err = _attempt(jax.jit(jax.vmap(f)), xs)
    if err is not None:
        _, single_err = _attempt(single, xs[0])
        if single_err is None:
            report.vmap_ok = False
            report.problems.append(f"log_density cannot be vmapped over a batch of points: {one_line(err)}")
            values = np.array([single(x) for x in xs])
        else:
            report.jit_ok = False
            report.problems.append(f"log_density cannot be jitted: {one_line(single_err)}")
            return None, None
    grad = jax.jit(jax.grad(f))
    _, err = _attempt(grad, xs[0])
    if err is not None:
        report.problems.append(f"the gradient of log_density fails: {one_line(err)}")
        return np.asarray(values), None
    grads = np.stack([np.asarray(grad(x)) for x in xs])
    report.seconds_per_gradient = _best_time(grad, xs[0])
    return np.asarray(values), grads


# The gradient is also checked at draws of WIDE × the initial scale: the samplers' moves go beyond
# the initial distribution, and a gradient that overflows away from it stops them there without
# an error (PyMC's logistic regression on the breast-cancer data: NaN at 2 % of the initial draws,
# 67 % at three times their scale, and the default run 10 nats low until `gradient_nonfinite`).
WIDE = 3.0


def _wide_gradients(report: CheckReport, compiled: Callable, target: Target, noise: jax.Array, dtype: Any) -> None:
    """The gradient at the same draws at `WIDE` × the initial scale, by the program that evaluated
    the first ones (same shape, no second compilation)."""
    xs = jnp.asarray(target.initial_mean, dtype) + WIDE * jnp.asarray(target.initial_scale, dtype) * noise
    values, grads = (np.asarray(v) for v in jax.block_until_ready(compiled(xs)))
    bad = _bad_gradients(values, grads)
    if bad.any():
        report.num_bad_gradients = int(bad.sum())
        report.problems.append(
            f"the gradient is not finite at {report.num_bad_gradients} of {noise.shape[0]} points drawn at {WIDE:g}× "
            f"the initial scale where log_density is finite, e.g. x = {_show(np.asarray(xs)[np.argmax(bad)])}; "
            "the moves cannot go there"
        )


def check(target: Target, num_points: int = 64, seed: int = 0) -> CheckReport:
    """Evaluates the log density and its gradient at `num_points` draws from the initial distribution.

    Args:
        target: the target to check.
        num_points: how many points to draw.
        seed: seed of the draws (`jax.random.key(seed)`).

    Returns:
        A `CheckReport`; `report.ok` is False when the density is unusable as it stands.

    Raises:
        TargetError: the density cannot be traced at all (see `validate.probe`).

    Example:
        >>> import jax.numpy as jnp
        >>> report = check(Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2), num_points=8)
        >>> report.ok, report.num_finite
        (True, 8)
    """
    if num_points < 1:
        raise TargetError(f"num_points must be at least 1, got {num_points}")
    files = [target.source] if target.source.endswith(".py") else []
    probe(target.log_density, target.dim, target.name, files)
    report = CheckReport(name=target.name, dim=target.dim, num_points=num_points)
    f = target.log_density
    dtype = default_float()
    noise = jax.random.normal(jax.random.key(seed), (num_points, target.dim), dtype)
    xs = jnp.asarray(target.initial_mean, dtype) + jnp.asarray(target.initial_scale, dtype) * noise

    batched = jax.jit(jax.vmap(jax.value_and_grad(f)))
    compiled = None  # the batched program, where it compiles (else `_fallback` diagnoses why not)
    try:
        start = time.perf_counter()
        compiled = batched.lower(xs).compile()
        report.compile_seconds = time.perf_counter() - start
        values, grads = jax.block_until_ready(compiled(xs))
        report.seconds_per_gradient = _best_time(compiled, xs) / num_points
        values, grads = np.asarray(values), np.asarray(grads)
    except Exception:  # the user's density may fail in any way; diagnose it piece by piece
        values, grads = _fallback(report, f, xs)

    points = np.asarray(xs)
    if values is not None:
        values = values.reshape(num_points)
        nan, pos_inf, neg_inf = np.isnan(values), values == np.inf, values == -np.inf
        report.num_nan, report.num_pos_inf = int(nan.sum()), int(pos_inf.sum())
        report.num_neg_inf, report.num_finite = int(neg_inf.sum()), int(np.isfinite(values).sum())
        for mask, what in ((nan, "NaN"), (pos_inf, "+inf")):
            if mask.any():
                report.problems.append(
                    f"log_density is {what} at {int(mask.sum())} of {num_points} points, "
                    f"e.g. x = {_show(points[np.argmax(mask)])}"
                )
        if neg_inf.all():
            report.warnings.append(
                f"log_density is -inf at all {num_points} points drawn from the initial distribution; "
                "move the initial distribution onto the target's support"
            )
        if grads is not None:
            bad = _bad_gradients(values, grads)
            report.num_bad_gradients = int(bad.sum())
            if bad.any():
                report.problems.append(
                    f"the gradient is not finite at {report.num_bad_gradients} of {num_points} points "
                    f"where log_density is finite, e.g. x = {_show(points[np.argmax(bad)])}"
                )
            elif compiled is not None:
                _wide_gradients(report, compiled, target, noise, dtype)
    report.ok = not report.problems
    return report
