"""The Metropolis-adjusted Langevin move (MALA): a refinement kernel that leaves `γ_k` invariant.

Preconditioned by the diagonal `C` (`RefineParams.inv_mass`, the particles' variance): propose
`x' = x + ε C ∇log γ_k(x) + √(2ε) C^{1/2} ξ` and accept with probability
`min(1, γ_k(x') q(x | x') / (γ_k(x) q(x' | x)))`, `q` the Gaussian proposal. One target
gradient per move (at the proposal); the value and gradient at the current point are cached in
the particle's state. Its incremental importance weight is 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mcd_cli.kernels.base import AnnealedPath, Evaluate, RefineKernel, RefineParams, annealed_log_density


def step(key, state, beta, path: AnnealedPath, evaluate: Evaluate, params: RefineParams, leapfrog: int):
    """One MALA move of one particle at inverse temperature `beta`: `(state, acceptance probability)`."""
    del leapfrog
    key_xi, key_u = jax.random.split(key)
    x, eps, c = state.position, params.step_size, params.inv_mass
    grad = path.grad(beta, x, state.target_grad)
    mean = x + eps * c * grad
    x_new = mean + jnp.sqrt(2.0 * eps * c) * jax.random.normal(key_xi, x.shape, x.dtype)
    log_target_new, target_grad_new = evaluate(x_new)
    grad_new = path.grad(beta, x_new, target_grad_new)
    mean_back = x_new + eps * c * grad_new
    log_q_forward = -jnp.sum((x_new - mean) ** 2 / c) / (4.0 * eps)
    log_q_back = -jnp.sum((x - mean_back) ** 2 / c) / (4.0 * eps)
    log_ratio = (
        annealed_log_density(path, beta, x_new, log_target_new)
        - annealed_log_density(path, beta, x, state.log_target)
        + log_q_back
        - log_q_forward
    )
    return accept(key_u, state, log_ratio, x_new, log_target_new, target_grad_new)


def accept(key, state, log_ratio, x_new, log_target_new, target_grad_new):
    """The Metropolis decision: the new state (cached value and gradient) or the old one."""
    log_ratio = jnp.where(jnp.isnan(log_ratio), -jnp.inf, log_ratio)
    prob = jnp.exp(jnp.minimum(log_ratio, 0.0))
    take = jnp.log(jax.random.uniform(key, (), prob.dtype)) < log_ratio
    new = state._replace(position=x_new, log_target=log_target_new, target_grad=target_grad_new)
    return jax.tree.map(lambda a, b: jnp.where(take, a, b), new, state), prob


KERNEL = RefineKernel(name="mala", target_acceptance=0.57, step=step, gradients=lambda leapfrog: 1)
