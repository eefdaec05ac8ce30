"""Refinement: Metropolis-corrected moves of the whole population at β, tuned from the particles.

The moves (`kernels.mala`, `kernels.hmc`) leave `γ_β` invariant, so their incremental weight is 1.
Between steps their diagonal preconditioner is set to the particles' weighted variance and their
step size moves towards the kernel's target acceptance rate (`refine_population` with `adapt`).
Choices made from the particles add a small bias to Ẑ; without `adapt` the kernels are fixed and
Ẑ is exactly unbiased on a fixed schedule (docs/method.md).

Example:
    >>> from mcd_cli.kernels import hmc
    >>> float(initial_refine_params(hmc.KERNEL, 16, jnp.float32).step_size)
    0.5
"""

from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding

from mcd_cli.kernels.base import AnnealedPath, RefineKernel, RefineParams
from mcd_cli.smc.sharding import shard
from mcd_cli.smc.state import Population, Settings, normalised

# Step-size adaptation: ε ← ε · exp(ADAPT_RATE · (acceptance − target)), bounded per step.
ADAPT_RATE = 2.0
MIN_VARIANCE = 1e-8

# `(population, key, β) -> (population, acceptance, step size used)`: a refinement at β.
Refine = Callable[[Population, jax.Array, jax.Array], tuple[Population, jax.Array, jax.Array]]


def initial_refine_params(kernel: Optional[RefineKernel], dim: int, dtype) -> RefineParams:
    """Starting step size: `d^{-1/3}` for MALA-like moves (and without a kernel), `d^{-1/4}` for HMC
    (their optimal scalings); unit preconditioner."""
    power = 1.0 / 3.0 if kernel is None or kernel.gradients(2) == 1 else 0.25
    return RefineParams(jnp.asarray(dim ** (-power), dtype), jnp.ones((dim,), dtype))


def weighted_variance(pop: Population) -> jax.Array:
    """The particles' weighted variance per coordinate (at least `MIN_VARIANCE`): the preconditioner."""
    x = pop.states.position
    w = normalised(pop.log_w)[:, None]
    mean = jnp.sum(w * x, axis=0)
    return jnp.maximum(jnp.sum(w * (x - mean) ** 2, axis=0), MIN_VARIANCE)


def refine_population(
    pop: Population,
    key: jax.Array,
    beta: jax.Array,
    kernel: RefineKernel,
    path: AnnealedPath,
    evaluate: Callable,
    settings: Settings,
    adapt: bool,
    sharding: Optional[NamedSharding] = None,
) -> tuple[Population, jax.Array, jax.Array]:
    """`settings.refine_steps` Metropolis moves of every particle at β: `(population, acceptance, ε used)`.

    Before the moves the preconditioner is set to the particles' weighted variance; after them the
    step size moves towards the kernel's target acceptance (when `adapt`). Both are means over the
    whole population, also when `sharding` splits it over devices.
    """
    params = pop.refine
    if adapt:
        params = params._replace(inv_mass=weighted_variance(pop))

    def one_move(states, move_key):
        keys = shard(jax.random.split(move_key, pop.log_w.shape[0]), sharding)
        states, accept = jax.vmap(
            lambda k, s: kernel.step(k, s, beta, path, evaluate, params, settings.leapfrog)
        )(keys, states)
        return shard(states, sharding), jnp.mean(accept)

    states, accepts = jax.lax.scan(one_move, pop.states, jax.random.split(key, settings.refine_steps))
    acceptance = jnp.mean(accepts)
    used = params.step_size
    if adapt:
        factor = jnp.exp(jnp.clip(ADAPT_RATE * (acceptance - kernel.target_acceptance), -1.0, 1.0))
        params = params._replace(step_size=params.step_size * factor)
    return pop._replace(states=states, refine=params), acceptance, used


def build_refine(
    kernel: RefineKernel, path: AnnealedPath, evaluate: Callable, settings: Settings, adapt: bool,
    sharding: Optional[NamedSharding] = None,
) -> Refine:
    """The refinement as a value `(population, key, β) -> (population, acceptance, ε used)`.

    `refine_population` is looked up in this module when the refinement runs, so a study may swap
    it for a variant (benchmarks/results/estimators.md, module refine_adaptation).
    """
    def refine(pop: Population, key: jax.Array, beta: jax.Array):
        return refine_population(pop, key, beta, kernel, path, evaluate, settings, adapt, sharding)

    return refine
