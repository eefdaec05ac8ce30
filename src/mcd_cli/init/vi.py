"""Variational fits: a mean-field Gaussian maximising the ELBO `E_q[log γ] + H(q)`.

Reparameterised draws and Adam with a cosine-decaying rate (the defaults, `vi`'s arguments, are
what stiff posteriors need: fewer steps stop well short of the optimum), from `restarts` starting
means at once (vmapped). `_vi_runs` and `_vi_fit` are the two halves of `vi`, kept apart so that
`fit_initial("auto")` can look at every run, not only the best.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mcd_cli.init.gaussian import _LOG_2PI, Gaussian, InitFit, _check_warning, check_proposal, starting_points
from mcd_cli.init.laplace import _cluster
from mcd_cli.targets.base import Target


class _VIState(NamedTuple):
    mean: jax.Array
    log_scale: jax.Array


@functools.lru_cache(maxsize=32)
def _vi_runner(target: Target, steps: int, num_samples: int, learning_rate: float):
    """Jitted, vmapped `(keys (R,), means (R, d), log_scales (R, d)) -> (params, ELBO trace)`."""
    dim = target.dim
    # The rate decays (cosine, to 1 %) so that the final fit is not blurred by Adam's step noise.
    schedule = optax.cosine_decay_schedule(learning_rate, steps, alpha=0.01)
    optimiser = optax.apply_if_finite(optax.adam(schedule), max_consecutive_errors=50)

    def elbo(params: _VIState, key: jax.Array) -> jax.Array:
        eps = jax.random.normal(key, (num_samples, dim), params.mean.dtype)
        x = params.mean + jnp.exp(params.log_scale) * eps
        entropy = jnp.sum(params.log_scale) + 0.5 * dim * (1.0 + _LOG_2PI)
        return jnp.mean(jax.vmap(target.log_density)(x)) + entropy

    def run(key, mean, log_scale):
        params = _VIState(mean, log_scale)

        def step(carry, k):
            params, opt_state = carry
            value, grad = jax.value_and_grad(lambda p: -elbo(p, k))(params)
            updates, opt_state = optimiser.update(grad, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), -value

        (params, _), trace = jax.lax.scan(step, (params, optimiser.init(params)), jax.random.split(key, steps))
        return params, trace

    return jax.jit(jax.vmap(run))


def _vi_converged(trace: np.ndarray) -> bool:
    """The ELBO's mean over the last tenth of the steps is within noise (or 0.05) of the tenth before."""
    n = max(len(trace) // 10, 2)
    last, before = trace[-n:], trace[-2 * n : -n]
    if not (np.all(np.isfinite(last)) and np.all(np.isfinite(before))):
        return False
    noise = math.sqrt(np.var(last) / n + np.var(before) / n)
    return float(np.mean(last) - np.mean(before)) <= max(3.0 * noise, 0.05)


# A restart whose final ELBO is more than this many nats below the best's does not count as a mode of
# its own: the mass near where it ended is, as far as the fits can tell, at most e^-MODE_ELBO_GAP
# of the best fit's (ELBO_i = log Z + log m_i − KL_i), or the fit never got to a mode (a learning
# rate decayed before the fit crossed a scale's valley). Matching a mixture's moments to such a
# point ruins the start: on the normal model with unknown variance (corpus/normal_nig.py) two of five
# restarts stopped 90-130 nats below the others, and the moment-matched start had an ELBO of
# −2·10⁵ where the best fit's was 38 (log Z 38.8). Genuine modes' fits differ by a few nats
# (nice_flow: within 4 nats over 5 restarts and 4 seeds; unchanged).
MODE_ELBO_GAP = 20.0


def _mode_candidates(final: np.ndarray) -> np.ndarray:
    """The restarts whose end points count as modes: a finite final ELBO within `MODE_ELBO_GAP`
    nats of the best (a boolean mask over the restarts)."""
    finite = np.isfinite(final)
    if not finite.any():
        return finite
    return finite & (final >= np.max(final[finite]) - MODE_ELBO_GAP)


class _VIRuns(NamedTuple):
    means: np.ndarray  # (R, d)
    scales: np.ndarray  # (R, d)
    traces: np.ndarray  # (R, steps) ELBO estimates along the optimisation
    final: np.ndarray  # (R,) mean ELBO over the last tenth of the steps (-inf if not finite)


def _vi_runs(
    target: Target, key: jax.Array, steps: int, num_samples: int, learning_rate: float, restarts: int
) -> _VIRuns:
    if steps < 20 or num_samples < 1 or restarts < 0:
        raise ValueError(
            f"vi needs steps >= 20, num_samples >= 1 and restarts >= 0; got {steps}, {num_samples}, {restarts}"
        )
    k_starts, k_runs = jax.random.split(key)
    means = starting_points(target, k_starts, restarts)
    scale0 = jnp.asarray(target.initial_scale, dtype=means.dtype)
    log_scales = jnp.broadcast_to(jnp.log(scale0), means.shape)
    runner = _vi_runner(target, int(steps), int(num_samples), float(learning_rate))
    params, traces = runner(jax.random.split(k_runs, restarts + 1), means, log_scales)
    traces = np.asarray(traces, dtype=np.float64)
    tail = max(steps // 10, 2)
    final = np.array([np.mean(t[-tail:]) if np.all(np.isfinite(t[-tail:])) else -np.inf for t in traces])
    if not np.any(np.isfinite(final)):
        raise ValueError(
            "vi: the ELBO is not finite; check the target with `mcd check`, or lower the learning rate"
        )
    return _VIRuns(
        np.asarray(params.mean, np.float64), np.exp(np.asarray(params.log_scale, np.float64)), traces, final
    )


def _vi_fit(target: Target, runs: _VIRuns, key: jax.Array, check_samples: int) -> InitFit:
    """The best run's fit, with its convergence, mode count, check and warnings."""
    steps = runs.traces.shape[1]
    tail = max(steps // 10, 2)
    best = int(np.argmax(runs.final))
    gaussian = Gaussian(runs.means[best], runs.scales[best])
    trace = runs.traces[best]
    warnings: list[str] = []
    converged = _vi_converged(trace)
    if not converged:
        warnings.append(
            f"vi: the ELBO was still rising after {steps} steps (last tenth {np.mean(trace[-tail:]):.2f}, "
            f"the tenth before {np.mean(trace[-2 * tail : -tail]):.2f}); raise the number of steps"
        )
    candidates = _mode_candidates(runs.final)
    modes = len(set(_cluster(runs.means[candidates], gaussian.scale, target)))
    if modes > 1:
        good = runs.final[candidates]
        warnings.append(
            f"vi: the fits from {len(runs.final)} starting points ended at {modes} separate places (ELBO "
            f"from {good.min():.2f} to {good.max():.2f}); the target looks multimodal"
        )
    check = check_proposal(target, gaussian, key, check_samples)
    message = _check_warning("vi", check, check.elbo, "the ELBO")
    if message:
        warnings.append(message)
    return InitFit("vi", gaussian, converged, steps, check.elbo, check.elbo, check, tuple(warnings), modes)


def vi(
    target: Target,
    key: jax.Array,
    *,
    steps: int = 2000,
    num_samples: int = 16,
    learning_rate: float = 0.1,
    restarts: int = 0,
    check_samples: int = 2048,
) -> InitFit:
    """Mean-field Gaussian variational fit: maximises `E_q[log γ(x)] + H(q)` over `q = N(m, diag s²)`.

    Reparameterised draws `x = m + s ε`, `num_samples` per step, Adam on `(m, log s)` with a
    cosine-decaying rate (non-finite updates skipped by `optax.apply_if_finite`), starting from
    the declared initial distribution.
    With `restarts > 0`, as many further runs start at means drawn from the declared initial
    distribution (all runs vmapped together); the fit with the best final ELBO is returned, and
    fits more than 3 fitted standard deviations apart count as separate modes (with a warning).

    Args:
        target: the target.
        key: PRNG key (split into the optimisation's and the check's).
        steps: Adam steps.
        num_samples: draws per ELBO gradient.
        learning_rate: Adam's learning rate (on the mean and the log scale).
        restarts: further runs from random starting means.
        check_samples: draws of the importance-sampling check; its mean log weight is the final ELBO.

    Returns:
        The `InitFit`; `objective` and `log_z` are the final ELBO.

    Example:
        >>> from mcd_cli.targets import Target
        >>> t = Target.create(lambda x: jnp.sum(jax.scipy.stats.norm.logpdf(x, 1.0, 0.5)), dim=2)
        >>> fit = vi(t, jax.random.key(0), steps=300)
        >>> np.allclose(fit.gaussian.mean, 1.0, atol=0.05), np.allclose(fit.gaussian.scale, 0.5, atol=0.05)
        (True, True)
    """
    k_runs, k_check = jax.random.split(key)
    runs = _vi_runs(target, k_runs, int(steps), int(num_samples), float(learning_rate), int(restarts))
    return _vi_fit(target, runs, k_check, check_samples)
