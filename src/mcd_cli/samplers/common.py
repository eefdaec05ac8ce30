"""Building blocks shared by the ULA and UHA samplers.

- `init_common` / `path`: the learned step sizes, the annealing schedule and the initial Gaussian
  `π0`, resolved once per call (outside the scan over steps);
- `AnnealedPath.grad`: `∇log γ_k(x) = β_k ∇log γ(x) + (1 − β_k) ∇log π0(x)` from a cached target
  gradient, so that each step costs exactly one target-gradient evaluation;
- `scan_steps`: `lax.scan` over the K steps, optionally rematerialised in nested segments.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.stats import norm

from mcd_cli import schedules
from mcd_cli.config import SamplerConfig
from mcd_cli.targets.base import Target


class AnnealedPath(NamedTuple):
    """Everything about the path `γ_0 = π0 → γ_K = γ` that does not depend on the particle."""

    step_sizes: jax.Array  # (K,)  δ_1 … δ_K
    betas: jax.Array  # (K + 1,)  β_0 … β_K
    init_mean: jax.Array  # (d,)
    init_scale: jax.Array  # (d,)

    def sample_initial(self, key: jax.Array) -> jax.Array:
        """`x_0 ~ π0 = N(μ0, diag σ0²)`, reparameterised."""
        return self.init_mean + self.init_scale * jax.random.normal(key, self.init_mean.shape)

    def initial_log_density(self, x: jax.Array) -> jax.Array:
        """`log π0(x)`."""
        return jnp.sum(norm.logpdf(x, self.init_mean, self.init_scale))

    def initial_grad(self, x: jax.Array) -> jax.Array:
        """`∇log π0(x)`, in closed form."""
        return -(x - self.init_mean) / self.init_scale**2

    def grad(self, beta: jax.Array, x: jax.Array, target_grad: jax.Array) -> jax.Array:
        """`∇log γ_k(x)` given the cached `∇log γ(x)`."""
        return beta * target_grad + (1.0 - beta) * self.initial_grad(x)


def init_common(key: jax.Array, target: Target, config: SamplerConfig) -> dict:
    """Parameters every sampler has: step sizes, and optionally schedule and initial Gaussian."""
    params: dict[str, Any] = {
        "step_size": schedules.init_step_size(key, config.init_step_size, config.max_step_size)
    }
    if config.learn_schedule:
        params["schedule"] = schedules.init_schedule(config.steps)
    if config.learn_initial:
        params["initial"] = {
            "mean": jnp.asarray(target.initial_mean, dtype=jnp.float32),
            "log_scale": jnp.log(jnp.asarray(target.initial_scale, dtype=jnp.float32)),
        }
    return params


def path(params: dict, target: Target, config: SamplerConfig) -> AnnealedPath:
    """Resolves the per-step quantities from the parameters."""
    if "initial" in params:
        mean, scale = params["initial"]["mean"], jnp.exp(params["initial"]["log_scale"])
    else:
        mean = jnp.asarray(target.initial_mean, dtype=jnp.result_type(float))
        scale = jnp.asarray(target.initial_scale, dtype=jnp.result_type(float))
    return AnnealedPath(
        step_sizes=schedules.step_sizes(params["step_size"], config.steps, config.max_step_size),
        betas=schedules.betas(params.get("schedule"), config.steps),
        init_mean=mean,
        init_scale=scale,
    )


def value_and_grad(target: Target) -> Callable[[jax.Array], tuple[jax.Array, jax.Array]]:
    """`x -> (log γ(x), ∇log γ(x))`: the one target evaluation a step makes."""
    return jax.value_and_grad(target.log_density)


def remat_segments(steps: int) -> tuple[int, int]:
    """Splits K steps into `(outer, inner)` segments with `outer · inner = K`, `inner ≈ √K`."""
    inner = max(d for d in range(1, math.isqrt(steps) + 1) if steps % d == 0)
    return steps // inner, inner


def scan_steps(step: Callable, carry: Any, xs: Any, steps: int, remat: bool) -> Any:
    """Runs `step` over the K per-step inputs `xs`; returns the final carry.

    With `remat`, the scan is split into `outer × inner` segments and each segment is a
    `jax.checkpoint`: reverse-mode differentiation then stores only the `outer` carries between
    segments plus one segment's `inner` carries, instead of every intermediate of every step
    (memory O(√K) in the trajectory instead of O(K)), at the cost of a second forward pass.
    """
    if not remat:
        carry, _ = jax.lax.scan(step, carry, xs)
        return carry
    outer, inner = remat_segments(steps)
    segmented = jax.tree.map(lambda a: a.reshape((outer, inner) + a.shape[1:]), xs)
    step_ckpt = jax.checkpoint(step, prevent_cse=False)

    @jax.checkpoint
    def segment(c, seg_xs):
        c, _ = jax.lax.scan(step_ckpt, c, seg_xs)
        return c, None

    carry, _ = jax.lax.scan(segment, carry, segmented)
    return carry
