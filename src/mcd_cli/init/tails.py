"""A heavier-tailed start: the chosen initial distribution given Tukey-h tails when they fit better.

A Gaussian start misses the mass of a target with heavier tails (a Student-t, a Laplace): the
importance weights of the start against the target then have a heavy right tail themselves, and
tempered SMC pays for it at every temperature (Pareto k̂ of the incremental weights near 0.5 or
above). `choose_tails` compares, by importance sampling with common draws, the start N(μ0, σ0²)
with its Tukey-h versions `x = μ0 + σ0 ⊙ u exp(h u²/2)`, u ~ N(0, I) (`targets.transforms`), for
h in `TAIL_GRID`, and keeps the one of highest ELBO `E_q[log γ − log q]` (the least KL(q ‖ π)) when
it beats the Gaussian's by more than `TAIL_GAIN` nats. Measured on the bundled targets (seed 0,
2,048 draws): student_t3 (d = 20) ELBO −1.37 → −0.07 at h = 0.2 (k̂ 0.75 → 0.35), laplace −1.43 →
−0.20 (k̂ 0.77 → 0.31); every Gaussian, mixture, funnel and flow target keeps its Gaussian start.

A start can also fit the body of the target almost exactly and still have weights of infinite
variance: a Gaussian fitted to a posterior with exponential tails, such as the logit of a Beta
posterior (any parameter on (0, 1) or (0, ∞) mapped to R has such tails), gives w = π/q growing
like exp(x²/2σ²) in q's tails, k = 1 however good the fit. Adaptive tempering cannot help there,
since a start that good reaches β = 1 in one step, so the final weights are these. When the
Gaussian's weights have k̂ above `PARETO_K_WARN` and no tail gains `TAIL_GAIN`, the lightest h
whose weights have k̂ at most `PARETO_K_WARN` is kept if it costs at most `TAIL_LOSS` nats of ELBO
(a defensive, heavier-tailed proposal, as in Hesterberg 1995). The cost grows with the number of
coordinates (every one gets the tail): on the textbook corpus (benchmarks/questions/
calibration_targets/corpus, seeds 0-3) the Gaussians' k̂ were 0.5-3.7 and h = 0.1 cost 0.12-0.42
nats (k̂ -1.7-0.36) on the normal, normal-inverse-gamma, beta-binomial, Dirichlet and regression
posteriors of d = 1-5, which a budget of 0.1 nats turned away from d = 2 on, leaving their runs
`unreliable`; eight schools (d = 10, k̂ 0.51) would pay 5.9 nats and keeps its Gaussian. A
nat of ELBO is what adaptive tempering absorbs in a temperature or two; an infinite-variance last
weighting no number of particles repairs. No calibration target's start changes (seed 0).
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.stats import norm

from mcd_cli.stats import pareto_k
from mcd_cli.stats.psis import PARETO_K_WARN
from mcd_cli.targets.base import Target
from mcd_cli.targets.transforms import tukey_h, tukey_log_jacobian

TAIL_GRID = (0.1, 0.2, 0.35, 0.5)  # h: tails as heavy as a Student-t with 10, 5, 2.9, 2 degrees of freedom
TAIL_GAIN = 0.25  # nats of ELBO a heavier tail must gain over the Gaussian start to be kept
TAIL_LOSS = 1.0  # nats of ELBO a heavier tail may cost when it alone makes the weights' variance finite
TAIL_SAMPLES = 2048


class TailChoice(NamedTuple):
    """What `choose_tails` measured: the grid's h (0: the Gaussian), each one's ELBO and Pareto k̂,
    and the h chosen (0.0 when the Gaussian start is kept)."""

    h: float
    grid: tuple[float, ...]
    elbos: tuple[float, ...]
    pareto_ks: tuple[float, ...] = ()


@functools.lru_cache(maxsize=16)
def _log_weights(target: Target):
    mu = jnp.asarray(target.initial_mean)
    sigma = jnp.asarray(target.initial_scale)
    log_det = jnp.sum(jnp.log(sigma))

    def one(u, h):  # `targets.transforms.heavy_tailed`'s log density, with h traced: one compile for the grid
        x = mu + sigma * tukey_h(u, h)
        return target.log_density(x) + log_det + tukey_log_jacobian(u, h) - jnp.sum(norm.logpdf(u))

    return jax.jit(jax.vmap(jax.vmap(one, (0, None)), (None, 0)))


def choose_tails(target: Target, key: jax.Array, num_samples: int = TAIL_SAMPLES) -> TailChoice:
    """The tail of the start of `target` (its declared initial distribution): see the module docstring.

    Example:
        >>> from mcd_cli.targets import Target
        >>> gauss = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=4)
        >>> choose_tails(gauss, jax.random.key(0)).h  # the start is exact: kept
        0.0
        >>> t3 = Target.create(lambda x: jnp.sum(jax.scipy.stats.t.logpdf(x, 3.0)), dim=10)
        >>> choose_tails(t3, jax.random.key(0)).h > 0
        True
    """
    grid = (0.0, *TAIL_GRID)
    u = jax.random.normal(key, (num_samples, target.dim), jnp.result_type(float))
    log_w = np.asarray(_log_weights(target)(u, jnp.asarray(grid, u.dtype)), dtype=np.float64)
    elbos = tuple(float(np.mean(w)) if np.all(np.isfinite(w)) else float("-inf") for w in log_w)
    ks = tuple(float(pareto_k(w)) if np.all(np.isfinite(w)) else float("inf") for w in log_w)
    best = int(np.argmax(elbos))
    h = grid[best] if best and elbos[best] > elbos[0] + TAIL_GAIN else 0.0
    if not h and ks[0] > PARETO_K_WARN:
        bounded = [i for i in range(1, len(grid)) if ks[i] <= PARETO_K_WARN and elbos[i] >= elbos[0] - TAIL_LOSS]
        h = grid[bounded[0]] if bounded else 0.0
    return TailChoice(h, grid, elbos, ks)


def describe(choice: TailChoice) -> Optional[str]:
    """The suffix of `init_method` for a heavier tail (`+tails(h=0.2)`), None for the Gaussian."""
    return None if not choice.h else f"+tails(h={choice.h:g})"


