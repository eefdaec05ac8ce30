"""Hamiltonian Monte Carlo: a refinement kernel that leaves `γ_k` invariant.

Momentum `p ~ N(0, M)` with the diagonal mass `M = C⁻¹` (`C = RefineParams.inv_mass`, the
particles' variance), `L` leapfrog steps of size `ε` on `H(x, p) = −log γ_k(x) + ½ pᵀ C p`, then
a Metropolis test on `H`. The step size of each move is jittered, `ε · u` with `u ~ U(0.5, 1.5)`
drawn independently of the state (a mixture of invariant kernels is invariant): with a well-fitted
preconditioner a fixed `εL` near a multiple of the Gaussian period 2π would bring every particle
back to where it started. `JITTER_LOW` = a makes `u` log-uniform on [a, 1.5] instead, whose small
steps move particles in a narrow region (a funnel's neck) where the body's step size is refused: 9
times the acceptance in a 2-d funnel's neck (tests/test_smc.py), but on brownian_motion, whose
observation scale has a neck, no change in the error over 35 seeds, so it is off (docs/method.md,
"The step-size jitter"). `L` target gradients per move; the value and gradient at the current
point are cached in the particle's state. Its incremental importance weight is 1.

A dense preconditioner (`RefineParams.inv_mass` of shape (d, d): the lower Cholesky factor `F` of
`C = F Fᵀ`, `smc.adaptation.dense_factor`) is the mass `M = C⁻¹`, run in the momentum `q = Fᵀ p ~
N(0, I)`: `q ← q + ½ε Fᵀ∇log γ_k`, `x ← x + ε F q`, kinetic energy `½|q|²`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mcd_cli.kernels.base import AnnealedPath, Evaluate, RefineKernel, RefineParams, annealed_log_density
from mcd_cli.kernels.mala import accept
from mcd_cli.kernels.uha import leapfrog as leapfrog_step

# The step-size jitter: None, `u` uniform on [0.5, 1.5] (the default); a number a, `u` log-uniform
# on [a, JITTER_HIGH] (measured, not kept: docs/method.md; `calibration.py --hmc-jitter a`).
JITTER_LOW: float | None = None
JITTER_HIGH = 1.5


def jitter(key, dtype):
    """The factor `u` of one move's step size `ε · u`, drawn independently of the state."""
    if JITTER_LOW is None:
        return jax.random.uniform(key, (), dtype, 0.5, 1.5)
    return jnp.exp(jax.random.uniform(key, (), dtype, jnp.log(JITTER_LOW), jnp.log(JITTER_HIGH)))


def step(key, state, beta, path: AnnealedPath, evaluate: Evaluate, params: RefineParams, leapfrog: int):
    """One HMC move (`leapfrog` steps) of one particle at `beta`: `(state, acceptance probability)`."""
    key_p, key_u, key_eps = jax.random.split(key, 3)
    x, c = state.position, params.inv_mass
    eps = params.step_size * jitter(key_eps, x.dtype)
    if c.ndim == 2:
        return _dense_step(key_p, key_u, state, beta, path, evaluate, c, eps, leapfrog)
    p0 = jax.random.normal(key_p, x.shape, x.dtype) / jnp.sqrt(c)

    def grad_fn(x_new):
        log_target_new, target_grad_new = evaluate(x_new)
        return path.grad(beta, x_new, target_grad_new), (log_target_new, target_grad_new)

    def one(carry, _):
        x, p, grad, _aux = carry
        x, p, grad, aux = leapfrog_step(x, p, grad, eps, c, grad_fn)
        return (x, p, grad, aux), None

    start = (x, p0, path.grad(beta, x, state.target_grad), (state.log_target, state.target_grad))
    (x_new, p_new, _, (log_target_new, target_grad_new)), _ = jax.lax.scan(one, start, None, length=leapfrog)
    log_ratio = (
        annealed_log_density(path, beta, x_new, log_target_new)
        - 0.5 * jnp.sum(c * p_new**2)
        - annealed_log_density(path, beta, x, state.log_target)
        + 0.5 * jnp.sum(c * p0**2)
    )
    return accept(key_u, state, log_ratio, x_new, log_target_new, target_grad_new)


def _dense_step(key_p, key_u, state, beta, path: AnnealedPath, evaluate: Evaluate, factor, eps, leapfrog: int):
    """`step` with the dense preconditioner `C = F Fᵀ` (`factor` F, lower triangular), in the
    whitened momentum `q = Fᵀ p`: the same leapfrog map as the diagonal one's in the coordinates
    `F⁻¹x`, so volume preserving and reversible."""
    x = state.position
    q0 = jax.random.normal(key_p, x.shape, x.dtype)

    def one(carry, _):
        x, q, grad, _aux = carry
        q = q + 0.5 * eps * (factor.T @ grad)
        x = x + eps * (factor @ q)
        log_target_new, target_grad_new = evaluate(x)
        grad = path.grad(beta, x, target_grad_new)
        q = q + 0.5 * eps * (factor.T @ grad)
        return (x, q, grad, (log_target_new, target_grad_new)), None

    start = (x, q0, path.grad(beta, x, state.target_grad), (state.log_target, state.target_grad))
    (x_new, q_new, _, (log_target_new, target_grad_new)), _ = jax.lax.scan(one, start, None, length=leapfrog)
    log_ratio = (
        annealed_log_density(path, beta, x_new, log_target_new)
        - 0.5 * jnp.sum(q_new**2)
        - annealed_log_density(path, beta, x, state.log_target)
        + 0.5 * jnp.sum(q0**2)
    )
    return accept(key_u, state, log_ratio, x_new, log_target_new, target_grad_new)


KERNEL = RefineKernel(name="hmc", target_acceptance=0.7, step=step, gradients=lambda leapfrog: leapfrog)
