"""Per-step parameters of the annealed path: step sizes and the annealing schedule.

Each quantity is an `init_*` / apply pair of pure functions over a small pytree of unconstrained
parameters, mapped through the bounded parameterisations of the paper's appendix:

- step sizes `δ_k = δ_max · σ(MLP(k / K))`, a 2-layer MLP (32 hidden units) of the step index,
  or, when the sizes start from per-step values (the pilot's), `δ_k = δ_max · σ(θ_k)` with one
  parameter per step (`per_step_sizes`);
- annealing `β_k = Σ_{k'≤k} σ(b_k') / Σ_{k'≤K} σ(b_k')` (learned) or `β_k = k / K` (fixed).

UHA's own parameters (damping, mass matrix) are its kernel's (`kernels.uha`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

STEP_SIZE_HIDDEN = 32


def _logit(p: float) -> float:
    return math.log(p) - math.log1p(-p)


def init_step_size(key: jax.Array, init_step_size: float, max_step_size: float) -> dict:
    """Step-size MLP whose output is `init_step_size` at every step.

    The output layer starts at zero weight and a bias of `logit(init / max)`, so the schedule
    starts flat and the hidden layer gets gradients as soon as the output weights move.
    """
    w1 = jax.random.normal(key, (1, STEP_SIZE_HIDDEN))
    return {
        "w1": w1,
        "b1": jnp.zeros((STEP_SIZE_HIDDEN,)),
        "w2": jnp.zeros((STEP_SIZE_HIDDEN, 1)),
        "b2": jnp.full((1,), _logit(init_step_size / max_step_size), dtype=w1.dtype),
    }


def per_step_sizes(sizes, max_step_size: float) -> dict:
    """Step-size parameters with one logit per step, `δ_k = δ_max σ(θ_k)`, starting at `sizes`.

    Sizes are clipped to `[1e-8, 0.99] · δ_max`. Each Adam update moves each θ_k by about the
    learning rate, so each δ_k changes by at most that fraction per update: a well-conditioned
    start from given sizes (an MLP that interpolates K arbitrary sizes needs steep hidden units,
    whose outputs one Adam update moves by tens of nats).

    Example:
        >>> p = per_step_sizes([0.2, 0.1, 0.05], 0.25)
        >>> [round(float(s), 6) for s in step_sizes(p, 3, 0.25)]
        [0.2, 0.1, 0.05]
    """
    import numpy as np

    sizes = np.clip(np.asarray(sizes, dtype=np.float64), 1e-8 * max_step_size, 0.99 * max_step_size)
    if sizes.ndim != 1 or sizes.size < 1:
        raise ValueError(f"step sizes must be a non-empty vector, got shape {sizes.shape}")
    ratio = sizes / max_step_size
    return {"logit": jnp.asarray(np.log(ratio) - np.log1p(-ratio), dtype=jnp.result_type(float))}


def step_sizes(params: dict, steps: int, max_step_size: float) -> jax.Array:
    """Step sizes `δ_1 … δ_K`, shape `(K,)`, each in `(0, max_step_size)`.

    Example:
        >>> p = init_step_size(jax.random.key(0), 0.05, 0.25)
        >>> [round(float(s), 3) for s in step_sizes(p, 4, 0.25)]
        [0.05, 0.05, 0.05, 0.05]
    """
    if "logit" in params:  # one parameter per step (`per_step_sizes`)
        return max_step_size * jax.nn.sigmoid(params["logit"])
    t = (jnp.arange(1, steps + 1, dtype=jnp.float32) / steps)[:, None]
    hidden = jax.nn.swish(t @ params["w1"] + params["b1"])
    out = (hidden @ params["w2"] + params["b2"])[:, 0]
    return max_step_size * jax.nn.sigmoid(out)


def init_schedule(steps: int) -> dict:
    """Unconstrained schedule parameters, all equal, so the learned schedule starts linear."""
    return {"b": jnp.zeros((steps,))}


def schedule_from_betas(betas) -> dict:
    """Schedule parameters whose `betas` are the given `β_0 = 0 < β_1 < … < β_K = 1` (e.g. where an
    adaptive tempered SMC run put its temperatures): `σ(b_k) = Δβ_k / (2 max Δβ)`, so each increment
    is at most 1/2 of its bound and the sizes can still grow.

    Example:
        >>> [round(float(b), 4) for b in betas(schedule_from_betas([0.0, 0.1, 0.4, 1.0]), 3)]
        [0.0, 0.1, 0.4, 1.0]
    """
    import numpy as np

    b = np.asarray(betas, dtype=np.float64)
    increments = np.diff(b)
    if b.ndim != 1 or b.size < 2 or b[0] != 0.0 or abs(b[-1] - 1.0) > 1e-6 or np.any(increments <= 0):
        raise ValueError("a schedule is increasing from β_0 = 0 to β_K = 1")
    p = np.clip(increments / (2.0 * increments.max()), 1e-6, 0.5)
    return {"b": jnp.asarray(np.log(p) - np.log1p(-p), dtype=jnp.result_type(float))}


def betas(params: dict | None, steps: int) -> jax.Array:
    """Annealing schedule `β_0 = 0 < β_1 < … < β_K = 1`, shape `(K + 1,)`.

    With `params=None` the schedule is the fixed linear `β_k = k / K`.
    """
    if params is None:
        return jnp.arange(steps + 1, dtype=jnp.float32) / steps
    increments = jax.nn.sigmoid(params["b"])
    cumulative = jnp.cumsum(increments)
    return jnp.concatenate([jnp.zeros((1,)), cumulative / cumulative[-1]])
