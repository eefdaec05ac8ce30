"""The unadjusted Hamiltonian forward kernel (the paper's Algorithm 2, refreshment (1 − h²) M).

State `(x, p)` with diagonal mass `M` and damping `h`, both learned parameters of this kernel.
At step k:

- refresh `p̃_k ~ N(h p_{k-1}, (1 − h²) M)` (this is `F_k`; the leapfrog map is deterministic and
  volume preserving, so it adds nothing to the weight);
- move `(x_k, p_k) = Φ_k(x_{k-1}, p̃_k)`, one leapfrog step on `γ_k`, no momentum flip.

The reversal scored by the backward kernel is `N(p_{k-1}; h p̃_k, (1 − h²) M)`; MCD shifts its mean
by `−2 log(h) h M s(k, x_{k-1}, p̃_k)` (the paper's `f = p̃ − 2 log(h) [M s_θ + p̃]` with the warm
start `s_θ = s̃_θ − M⁻¹ p`). The momentum's density enters at both ends: `−log N(p_0; 0, M)` and
`+log N(p_K; 0, M)`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax.scipy.stats import norm

from mcd_cli.kernels.base import ForwardKernel, Transition


def _logit(p: float) -> float:
    return math.log(p) - math.log1p(-p)


def init_damping(init: float) -> dict:
    """Damping parameter `u` with `0.98 σ(u) + 0.01 = init`."""
    return {"u": jnp.full((), _logit((init - 0.01) / 0.98), dtype=jnp.zeros(()).dtype)}


def damping_of(params: dict) -> jax.Array:
    """Momentum damping `h = 0.98 σ(u) + 0.01 ∈ (0.01, 0.99)`."""
    return 0.98 * jax.nn.sigmoid(params["u"]) + 0.01


def init_mass(dim: int) -> dict:
    """Diagonal mass matrix starting at the identity."""
    return {"log_m": jnp.zeros((dim,))}


def mass_of(params: dict | None, dim: int) -> jax.Array:
    """Diagonal of the mass matrix `M`, shape `(dim,)`; the identity when not learned."""
    if params is None:
        return jnp.ones((dim,))
    return jnp.exp(params["log_m"])


class UHAParams(NamedTuple):
    damping: dict  # h = 0.98 σ(u) + 0.01
    mass: Optional[dict]  # diagonal M = exp(m); None: the identity, not learned


class UHAResolved(NamedTuple):
    damping: jax.Array  # h
    mass: jax.Array  # diag M
    mass_sd: jax.Array  # √M
    refresh_sd: jax.Array  # √((1 − h²) M)
    log_refresh_sd: jax.Array  # Σ log refresh_sd
    score_scale: jax.Array  # −2 log(h) h M: how a learned correction enters the reversal's mean


class UHAState(NamedTuple):
    position: jax.Array
    momentum: jax.Array
    log_target: jax.Array
    target_grad: jax.Array


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


def init_params(key, dim, config) -> UHAParams:
    """Damping from `config.init_damping`; a learned diagonal mass starting at I if `learn_mass`."""
    return UHAParams(
        damping=init_damping(config.init_damping),
        mass=init_mass(dim) if config.learn_mass else None,
    )


def prepare(params: UHAParams, dim: int) -> UHAResolved:
    h = damping_of(params.damping)
    mass = mass_of(params.mass, dim)
    mass_sd = jnp.sqrt(mass)
    refresh_sd = jnp.sqrt(1.0 - h**2) * mass_sd
    return UHAResolved(
        h, mass, mass_sd, refresh_sd, jnp.sum(jnp.log(refresh_sd)), -2.0 * jnp.log(h) * h * mass
    )


def init(key, x0, log_target0, target_grad0, r: UHAResolved):
    """`p_0 ~ N(0, M)`; the weight starts with `−log N(p_0; 0, M)`."""
    p0 = r.mass_sd * jax.random.normal(key, x0.shape)
    return UHAState(x0, p0, log_target0, target_grad0), -jnp.sum(norm.logpdf(p0, 0.0, r.mass_sd))


def step(key, state: UHAState, step, path, r: UHAResolved, evaluate):
    """Partial refreshment, then one leapfrog step (one target evaluation, at the new position)."""
    x, p, _, target_grad = state
    eps = jax.random.normal(key, x.shape)
    p_refreshed = r.damping * p + r.refresh_sd * eps
    log_forward = jnp.sum(norm.logpdf(eps)) - r.log_refresh_sd
    transition = Transition(
        index=step.index,
        reverse=p,
        mean=r.damping * p_refreshed,
        scale=r.refresh_sd,
        score_input=jnp.concatenate([x, p_refreshed]),
        score_scale=r.score_scale,
    )

    def grad_fn(x_new):
        log_target_new, target_grad_new = evaluate(x_new)
        return path.grad(step.beta, x_new, target_grad_new), (log_target_new, target_grad_new)

    x_new, p_new, _, (log_target_new, target_grad_new) = leapfrog(
        x, p_refreshed, path.grad(step.beta, x, target_grad), step.step_size, 1.0 / r.mass, grad_fn
    )
    return UHAState(x_new, p_new, log_target_new, target_grad_new), log_forward, transition


def finish(state: UHAState, r: UHAResolved):
    return state.log_target + jnp.sum(norm.logpdf(state.momentum, 0.0, r.mass_sd))


# Positional in the order of `ForwardKernel`'s fields: the score sees (x, p̃); the state holds x and p.
KERNEL = ForwardKernel("uha", "UHA", init_params, prepare, init, step, finish, lambda dim: 2 * dim, lambda dim: 2 * dim)
