"""Unadjusted Langevin AIS and MCD (the paper's Algorithm 1), for one particle.

Forward kernel   `F_k(x_k | x_{k-1}) = N(x_k; x_{k-1} + δ_k ∇log γ_k(x_{k-1}), 2 δ_k I)`.
Backward kernel  `B_{k-1}(x_{k-1} | x_k) = N(x_{k-1}; x_k + δ_k ∇log γ_k(x_k) + 2 δ_k s̃_θ(k, x_k), 2 δ_k I)`
where `s̃_θ ≡ 0` gives the AIS reversal, and MCD learns `s̃_θ` (the paper's `s_θ = s̃_θ + ∇log γ_k`,
whose backward mean `x_k − δ ∇log γ_k + 2 δ s_θ` is the one above).

`log w = −log π0(x_0) + Σ_k [log B_{k-1} − log F_k] + log γ(x_K)`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.scipy.stats import norm

from mcd_cli import score
from mcd_cli.config import SamplerConfig
from mcd_cli.samplers import common
from mcd_cli.targets.base import Target


def init_params(key: jax.Array, target: Target, config: SamplerConfig) -> dict:
    """Learnable parameters: step sizes (+ schedule, initial) and, for MCD, the score network."""
    k_common, k_score = jax.random.split(key)
    params = common.init_common(k_common, target, config)
    if config.backward == "mcd":
        params["score"] = score.init(
            k_score, target.dim, target.dim, config.steps, config.hidden, config.time_dim, config.blocks
        )
    return params


def log_weight(
    key: jax.Array, params: dict, target: Target, config: SamplerConfig
) -> tuple[jax.Array, jax.Array]:
    """Log importance weight and final state of one ULA-AIS / ULA-MCD particle.

    Exactly `K + 1` evaluations of `∇log γ`: one at `x_0`, one per step at the new point, whose
    value and gradient are carried to the next step.
    """
    pth = common.path(params, target, config)
    value_and_grad = common.value_and_grad(target)
    key_init, key_steps = jax.random.split(key)

    x0 = pth.sample_initial(key_init)
    log_gamma0, grad0 = value_and_grad(x0)
    log_w0 = -pth.initial_log_density(x0)

    def step(carry, inputs):
        x, target_grad, _, log_w = carry
        k, delta, beta, step_key = inputs
        noise_scale = jnp.sqrt(2.0 * delta)

        eps = jax.random.normal(step_key, x.shape)
        x_new = x + delta * pth.grad(beta, x, target_grad) + noise_scale * eps
        # log F_k(x_new | x), written through the noise to avoid cancellation.
        log_forward = jnp.sum(norm.logpdf(eps)) - x.size * jnp.log(noise_scale)

        log_gamma_new, target_grad_new = value_and_grad(x_new)
        backward_mean = x_new + delta * pth.grad(beta, x_new, target_grad_new)
        if config.backward == "mcd":
            backward_mean = backward_mean + 2.0 * delta * score.apply(params["score"], k, x_new)
        log_backward = jnp.sum(norm.logpdf(x, backward_mean, noise_scale))

        return (x_new, target_grad_new, log_gamma_new, log_w + log_backward - log_forward), None

    inputs = (
        jnp.arange(1, config.steps + 1),
        pth.step_sizes,
        pth.betas[1:],
        jax.random.split(key_steps, config.steps),
    )
    x_final, _, log_gamma_final, log_w = common.scan_steps(
        step, (x0, grad0, log_gamma0, log_w0), inputs, config.steps, config.remat
    )
    return log_w + log_gamma_final, x_final
