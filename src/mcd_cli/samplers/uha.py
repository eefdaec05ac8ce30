"""Unadjusted Hamiltonian AIS and MCD (the paper's Algorithm 2, refreshment variance (1 − h²) M).

State `(x, p)` with diagonal mass `M` and damping `h`. For k = 1..K:

- refresh  `p̃_k ~ N(h p_{k-1}, (1 − h²) M)`;
- weight   `log w += log N(p_{k-1}; h f(k, x_{k-1}, p̃_k), (1 − h²) M) − log N(p̃_k; h p_{k-1}, (1 − h²) M)`
  with `f = p̃` (AIS) or `f = p̃ − 2 log(h) · M s̃_θ(k, x_{k-1}, p̃_k)` (MCD, warm-started form of
  the paper's `p̃ − 2 log(h) [M s_θ + p̃]` with `s_θ = s̃_θ − M⁻¹ p`);
- move     `(x_k, p_k) = Φ_k(x_{k-1}, p̃_k)`, one leapfrog step on `γ_k`, no momentum flip.

`log w = −log π0(x_0) − log N(p_0; 0, M) + Σ_k […] + log γ(x_K) + log N(p_K; 0, M)`.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
from jax.scipy.stats import norm

from mcd_cli import schedules, score
from mcd_cli.config import SamplerConfig
from mcd_cli.samplers import common
from mcd_cli.targets.base import Target


def leapfrog(
    x: jax.Array,
    p: jax.Array,
    grad_x: jax.Array,
    step_size: jax.Array,
    inverse_mass: jax.Array,
    grad_fn: Callable[[jax.Array], tuple[jax.Array, Any]],
) -> tuple[jax.Array, jax.Array, jax.Array, Any]:
    """One leapfrog step of `H(x, p) = −log γ_k(x) + ½ pᵀ M⁻¹ p`.

    Args:
        x, p: position and momentum.
        grad_x: `∇log γ_k(x)`, already known.
        step_size: `δ`.
        inverse_mass: diagonal of `M⁻¹`.
        grad_fn: `x -> (∇log γ_k(x), aux)`; called once, at the new position.

    Returns:
        `(x_new, p_new, ∇log γ_k(x_new), aux)`. The map is volume preserving and satisfies
        `Φ⁻¹ = flip ∘ Φ ∘ flip` with `flip(x, p) = (x, −p)`.
    """
    p_half = p + 0.5 * step_size * grad_x
    x_new = x + step_size * inverse_mass * p_half
    grad_new, aux = grad_fn(x_new)
    p_new = p_half + 0.5 * step_size * grad_new
    return x_new, p_new, grad_new, aux


def init_params(key: jax.Array, target: Target, config: SamplerConfig) -> dict:
    """Learnable parameters: step sizes, damping, mass (+ schedule, initial) and the score network."""
    k_common, k_score = jax.random.split(key)
    params = common.init_common(k_common, target, config)
    params["damping"] = schedules.init_damping(config.init_damping)
    if config.learn_mass:
        params["mass"] = schedules.init_mass(target.dim)
    if config.backward == "mcd":
        params["score"] = score.init(
            k_score, 2 * target.dim, target.dim, config.steps, config.hidden, config.time_dim, config.blocks
        )
    return params


def log_weight(
    key: jax.Array, params: dict, target: Target, config: SamplerConfig
) -> tuple[jax.Array, jax.Array]:
    """Log importance weight and final position of one UHA-AIS / UHA-MCD particle.

    Exactly `K + 1` evaluations of `∇log γ`: one at `x_0` and one per leapfrog step.
    """
    pth = common.path(params, target, config)
    value_and_grad = common.value_and_grad(target)
    h = schedules.damping(params["damping"])
    mass = schedules.mass(params.get("mass"), target.dim)
    mass_sd = jnp.sqrt(mass)
    refresh_sd = jnp.sqrt(1.0 - h**2) * mass_sd
    log_refresh_sd = jnp.sum(jnp.log(refresh_sd))
    key_x, key_p, key_steps = jax.random.split(key, 3)

    x0 = pth.sample_initial(key_x)
    p0 = mass_sd * jax.random.normal(key_p, x0.shape)
    log_gamma0, grad0 = value_and_grad(x0)
    log_w0 = -pth.initial_log_density(x0) - jnp.sum(norm.logpdf(p0, 0.0, mass_sd))

    def step(carry, inputs):
        x, p, target_grad, _, log_w = carry
        k, delta, beta, step_key = inputs

        eps = jax.random.normal(step_key, x.shape)
        p_refreshed = h * p + refresh_sd * eps
        log_forward = jnp.sum(norm.logpdf(eps)) - log_refresh_sd
        f = p_refreshed
        if config.backward == "mcd":
            s = score.apply(params["score"], k, jnp.concatenate([x, p_refreshed]))
            f = f - 2.0 * jnp.log(h) * mass * s
        log_backward = jnp.sum(norm.logpdf(p, h * f, refresh_sd))

        def grad_fn(x_new):
            log_gamma_new, target_grad_new = value_and_grad(x_new)
            return pth.grad(beta, x_new, target_grad_new), (log_gamma_new, target_grad_new)

        x_new, p_new, _, (log_gamma_new, target_grad_new) = leapfrog(
            x, p_refreshed, pth.grad(beta, x, target_grad), delta, 1.0 / mass, grad_fn
        )
        return (x_new, p_new, target_grad_new, log_gamma_new, log_w + log_backward - log_forward), None

    inputs = (
        jnp.arange(1, config.steps + 1),
        pth.step_sizes,
        pth.betas[1:],
        jax.random.split(key_steps, config.steps),
    )
    x_final, p_final, _, log_gamma_final, log_w = common.scan_steps(
        step, (x0, p0, grad0, log_gamma0, log_w0), inputs, config.steps, config.remat
    )
    return log_w + log_gamma_final + jnp.sum(norm.logpdf(p_final, 0.0, mass_sd)), x_final
