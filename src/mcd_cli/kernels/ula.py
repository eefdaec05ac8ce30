"""The unadjusted Langevin forward kernel (the paper's Algorithm 1), for one particle.

`F_k(x_k | x_{k-1}) = N(x_k; x_{k-1} + δ_k ∇log γ_k(x_{k-1}), 2 δ_k I)`, and its reversal
`N(x_{k-1}; x_k + δ_k ∇log γ_k(x_k), 2 δ_k I)`, which a backward kernel may correct by
`2 δ_k s(k, x_k)` (MCD; the paper's `s_θ = s̃_θ + ∇log γ_k`, whose backward mean
`x_k − δ ∇log γ_k + 2 δ s_θ` is the same).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.stats import norm

from mcd_cli.kernels.base import ForwardKernel, Transition


class ULAState(NamedTuple):
    position: jax.Array
    log_target: jax.Array  # log γ(x), cached
    target_grad: jax.Array  # ∇log γ(x), cached


def init_params(key, dim, config):
    """ULA has no parameters of its own (its step sizes belong to the path)."""
    return ()


def prepare(params, dim):
    return ()


def init(key, x0, log_target0, target_grad0, resolved):
    return ULAState(x0, log_target0, target_grad0), jnp.zeros((), x0.dtype)


def step(key, state, step, path, resolved, evaluate):
    """One Langevin move; `log F` is written through the noise to avoid cancellation."""
    x, _, target_grad = state
    delta = step.step_size
    noise_scale = jnp.sqrt(2.0 * delta)
    eps = jax.random.normal(key, x.shape)
    drift = x + delta * path.grad(step.beta, x, target_grad)
    x_new = drift + noise_scale * eps
    if step.detach:
        # The density of the fixed new point: same value, but a derivative in the parameters at
        # fixed (x, x_new) rather than along the reparameterised move.
        x_new = jax.lax.stop_gradient(x_new)
        eps = (x_new - drift) / noise_scale
    log_forward = jnp.sum(norm.logpdf(eps)) - x.size * jnp.log(noise_scale)
    log_target_new, target_grad_new = evaluate(x_new)
    transition = Transition(
        index=step.index,
        reverse=x,
        mean=x_new + delta * path.grad(step.beta, x_new, target_grad_new),
        scale=noise_scale,
        score_input=x_new,
        score_scale=2.0 * delta,
    )
    return ULAState(x_new, log_target_new, target_grad_new), log_forward, transition


def finish(state, resolved):
    return state.log_target


# Positional in the order of `ForwardKernel`'s fields; ULA has a density at fixed points (detachable).
KERNEL = ForwardKernel("ula", "ULA", init_params, prepare, init, step, finish, lambda dim: dim, lambda dim: dim, True)
