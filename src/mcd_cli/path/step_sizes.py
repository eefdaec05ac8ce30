"""Step sizes for the annealing path: a curvature run, then an AIS check of its sizes.

- `curvature_step_sizes(target, betas, key=...)`: a population of particles runs through the
  annealing path; at step k, power iteration on Hessian–vector products estimates the largest
  curvature `λ_k = max |eig(∇² log γ_k)|` over the particles, the step size is
  `δ_k = min(max_step_size, safety / λ_k)` (ULA is stable for `δ λ < 2`), and the particles take
  one ULA step of `δ_k` to follow the path.
- `ais_step_scale(target, step_sizes, sconf, key)`: the factor (1, ½, …) by which to scale those
  sizes, from the untrained ULA-AIS ELBO; it matters on targets with kinks, where the curvature
  says nothing.

Training starts from the scaled sizes with one step-size parameter per step
(`schedules.per_step_sizes`).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from mcd_cli.path import annealing
from mcd_cli.config import SamplerConfig
from mcd_cli.init.gaussian import Gaussian
from mcd_cli.targets.base import Target

Array = Any

SCALE_SAMPLES = 512  # particles of each untrained ULA-AIS run of the check
SCALE_GAIN = 1.0  # nats of ELBO a halving of the sizes must gain to be taken
SCALE_HALVINGS = 4  # the smallest factor the check can choose is 2**-SCALE_HALVINGS


def _power_iteration(hvp, key: jax.Array, dim: int, iterations: int, dtype) -> jax.Array:
    """Largest |eigenvalue| of the symmetric operator `hvp`, by power iteration from a random vector."""
    v = jax.random.normal(key, (dim,), dtype)
    v = v / jnp.linalg.norm(v)

    def body(_, v):
        w = hvp(v)
        return w / jnp.maximum(jnp.linalg.norm(w), jnp.finfo(dtype).tiny)

    v = jax.lax.fori_loop(0, iterations, body, v)
    return jnp.linalg.norm(hvp(v))


def curvature_step_sizes(
    target: Target,
    betas: Array,
    *,
    key: jax.Array,
    initial: Optional[Gaussian] = None,
    num_particles: int = 16,
    power_iterations: int = 20,
    safety: float = 0.5,
    max_step_size: float = 0.25,
    min_step_size: float = 1e-8,
) -> np.ndarray:
    """Per-step ULA step sizes from the curvature of the annealing path, by a short curvature run.

    The rule: `num_particles` particles start from `π0` (the declared initial distribution, or
    `initial`, a diagonal `Gaussian`). At step k = 1 … K, power iteration on Hessian–vector
    products of `log γ_k = β_k log γ + (1 − β_k) log π0` estimates the largest curvature magnitude
    at each particle; `λ_k` is the largest over the particles, and

        δ_k = clip(safety / λ_k, min_step_size, max_step_size).

    Then every particle takes one ULA step `x ← x + δ_k ∇log γ_k(x) + sqrt(2 δ_k) ε` so that the
    next curvature is measured where the path's mass is. ULA diverges for `δ λ > 2` along a
    direction of curvature λ; `safety = 0.5` puts each step at a quarter of that limit, which also
    covers the power iteration's underestimate of `λ_k` and keeps the kernel close to invariant.

    Args:
        target: the target.
        betas: the annealing schedule `β_0 … β_K`, shape `(K + 1,)`.
        key: PRNG key.
        initial: the initial distribution (default: the target's declared one).
        num_particles: particles of the curvature run.
        power_iterations: Hessian–vector products per power iteration.
        safety: `δ_k λ_k`, the fraction of the curvature's inverse taken as the step.
        max_step_size: the cap (the paper's 0.25).
        min_step_size: the floor (a step of exactly zero would stop the sampler).

    Returns:
        `δ_1 … δ_K`, shape `(K,)`, float64.

    Example:
        >>> from mcd_cli.targets import Target
        >>> t = Target.create(lambda x: -0.5 * jnp.sum(x**2) / 0.02**2, dim=10)
        >>> d = curvature_step_sizes(t, jnp.linspace(0.0, 1.0, 65), key=jax.random.key(0))
        >>> d.shape, round(float(d[-1] * 2500), 2)  # δ_K λ_K = safety
        ((64,), 0.5)
    """
    betas = np.asarray(betas, dtype=np.float64)
    if betas.ndim != 1 or betas.size < 2:
        raise ValueError(f"betas must be the schedule β_0 … β_K, shape (K + 1,), got shape {betas.shape}")
    if not 0 < safety < 2:
        raise ValueError(f"safety must lie in (0, 2) (ULA is unstable at δ λ ≥ 2), got {safety}")
    if not 0 < min_step_size <= max_step_size:
        raise ValueError(f"need 0 < min_step_size <= max_step_size, got {min_step_size} and {max_step_size}")
    if initial is not None and initial.chol is not None:
        raise ValueError("curvature_step_sizes needs a diagonal initial Gaussian; whiten the target by a full one first")
    dtype = jnp.result_type(float)
    mean = jnp.asarray(target.initial_mean if initial is None else initial.mean, dtype)
    scale = jnp.asarray(target.initial_scale if initial is None else initial.scale, dtype)
    run = _curvature_run(
        target, int(num_particles), int(power_iterations), float(safety), float(max_step_size), float(min_step_size)
    )
    deltas = run(key, jnp.asarray(betas[1:], dtype), mean, scale)
    return np.asarray(deltas, dtype=np.float64)


@functools.lru_cache(maxsize=32)
def _curvature_run(target: Target, num: int, iterations: int, safety: float, max_step: float, min_step: float):
    grad_target = jax.grad(target.log_density)
    dim = target.dim

    @jax.jit
    def run(key, betas, mean, scale):
        dtype = mean.dtype
        k0, k_steps = jax.random.split(key)
        x0 = mean + scale * jax.random.normal(k0, (num, dim), dtype)

        def grad_k(beta, x):
            return beta * grad_target(x) - (1.0 - beta) * (x - mean) / scale**2

        def curvature(beta, x, k):
            def hvp(v):
                return beta * jax.jvp(grad_target, (x,), (v,))[1] - (1.0 - beta) * v / scale**2

            return _power_iteration(hvp, k, dim, iterations, dtype)

        def step(x, inputs):
            beta, k = inputs
            k_power, k_noise = jax.random.split(k)
            lam = jax.vmap(curvature, in_axes=(None, 0, 0))(beta, x, jax.random.split(k_power, num))
            lam = jnp.max(jnp.where(jnp.isfinite(lam), lam, 0.0))
            delta = jnp.clip(safety / lam, min_step, max_step)
            noise = jax.random.normal(k_noise, x.shape, dtype)
            moved = x + delta * jax.vmap(grad_k, in_axes=(None, 0))(beta, x) + jnp.sqrt(2 * delta) * noise
            # A particle whose move is not finite stays put: the run only measures curvature.
            x = jnp.where(jnp.all(jnp.isfinite(moved), axis=1, keepdims=True), moved, x)
            return x, delta

        _, deltas = jax.lax.scan(step, x0, (betas, jax.random.split(k_steps, betas.shape[0])))
        return deltas

    return run


def ais_step_scale(
    target: Target,
    step_sizes: Array,
    sconf: SamplerConfig,
    key: jax.Array,
    *,
    samples: int = SCALE_SAMPLES,
    gain: float = SCALE_GAIN,
    halvings: int = SCALE_HALVINGS,
) -> float:
    """The factor c ∈ {1, ½, …, 2^-halvings} by which to scale the curvature run's step sizes.

    The curvature run sees curvature only; a target with kinks (a Laplace density, an L1 penalty) has none
    away from them, so every δ_k goes to the cap, where ULA's departure from invariance is large.
    The untrained ULA-AIS ELBO (mean log weight, `samples` particles, the same key for every c, so
    the particles are paired) measures what the sizes cost: the check halves c while the ELBO
    gains more than `gain` nats and more than 3 standard errors of the paired difference. On a
    smooth target sizes below the stability limit only slow the path down, so halving loses ELBO
    and c stays 1 (the sizes are unchanged); on `laplace` c becomes ¼
    (`benchmarks/results/start.md`, module ais_step_scale). A non-finite ELBO counts as −∞; when no scale
    gives a finite one, c stays 1 and training's own checks take over.
    """
    config = SamplerConfig(
        sampler="ula", backward="ais", steps=sconf.steps, step_size="pilot", max_step_size=sconf.max_step_size,
        unroll=sconf.unroll,
    )
    sizes = np.asarray(step_sizes, dtype=np.float64)

    def log_weights(c: float) -> np.ndarray:
        params = annealing.init_params(jax.random.key(0), target, config, step_sizes=sizes * c)
        return annealing.sample_log_weights(key, params, target, config, num_samples=samples, chunk_size=samples)

    def elbo(w: np.ndarray) -> float:
        value = float(np.mean(w))
        return value if np.isfinite(value) else -math.inf

    c, current = 1.0, log_weights(1.0)
    for _ in range(halvings):
        halved = log_weights(c / 2)
        if elbo(current) == -math.inf:
            better = elbo(halved) > -math.inf
        else:
            diff = halved - current
            se = float(np.std(diff) / math.sqrt(diff.size)) if np.all(np.isfinite(diff)) else math.inf
            better = elbo(halved) - elbo(current) > max(gain, 3 * se)
        if not better:
            break
        c, current = c / 2, halved
    return c if elbo(current) > -math.inf else 1.0
