"""The SMC contract (BlackJAX's `smc.base`): one state, one initial state, and the machinery every
step shares.

Every kernel of the population sampler is built from its parts (forward and backward kernels or
the refinement move, the resampling function, the settings) and is an `SMCKernel`:

    init(key, num) -> Population                       # num particles from π0, β = 0, step 0
    step(key, population) -> (population, StepInfo)    # the next step

The `Population` is the one state: besides the particles and their weights it carries β and the
steps taken, from which a step reads its schedule. The fixed schedule's kernel
(`step.build_kernel`) reads step k's β and δ from the annealed path; adaptive tempering's
(`tempering.build_kernel`) chooses β′ from the particles, then calls the tempered step; a replay
reads β′ from an earlier run's choices. Each reweights (`reweight`), resamples when asked
(`maybe_resample`), refines when asked (`maybe_refine`) and moves on (`advance`).

The one initial state is `init_state`: the forward kernel's states at x_0 (the fixed schedule), or,
without a forward kernel (adaptive tempering, whose moves are the refinement's), the position and
its cached target with zero log weights. `initial_population` draws x_0 and makes the population.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp
from jax.sharding import NamedSharding

from mcd_cli.kernels.base import AnnealedPath, ForwardKernel, RefineKernel, RefineParams
from mcd_cli.kernels.ula import ULAState
from mcd_cli.smc.adaptation import Refine, initial_refine_params
from mcd_cli.smc.sharding import on_every_device, replicate, shard
from mcd_cli.smc.state import Population, Resampler, ess_fraction, normalised, take


def annealed_log_density(forward: ForwardKernel, resolved: Any, path: AnnealedPath) -> Callable:
    """`(β, states) -> log γ̃_β` of every particle's whole state: `log γ_β(x)` plus the forward
    kernel's own terms (UHA: `log N(p; 0, M)`)."""

    def extra(states):
        return jax.vmap(lambda s: forward.finish(s, resolved) - s.log_target)(states)

    def log_gamma(beta, states):
        x = states.position
        return beta * states.log_target + (1.0 - beta) * jax.vmap(path.initial_log_density)(x) + extra(states)

    return log_gamma


def init_state(
    keys: jax.Array, x0: jax.Array, log_target0: jax.Array, target_grad0: jax.Array,
    forward: Optional[ForwardKernel] = None, resolved: Any = None, path: Optional[AnnealedPath] = None,
) -> tuple[Any, jax.Array]:
    """The particles' states at β = 0 and their log weights `log w_0`, from their keys, positions
    `x0`, `log γ(x0)` and `∇log γ(x0)`: the forward kernel's initial states (with its prepared
    parameters `resolved`, on `path`), or without a forward kernel the position and its cached
    target (`ULAState`, what the refinement moves) with zero log weights."""
    if forward is None:
        return ULAState(x0, log_target0, target_grad0), jnp.zeros_like(log_target0)
    log_gamma = annealed_log_density(forward, resolved, path)
    kernel_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
    states, log_w0 = jax.vmap(lambda k, x, v, g: forward.init(k, x, v, g, resolved))(
        kernel_keys, x0, log_target0, target_grad0
    )
    # log w_0 = [kernel's initial terms] − log π0(x_0) + log γ̃_0(s_0): zero for ULA and UHA.
    return states, log_w0 - jax.vmap(path.initial_log_density)(x0) + log_gamma(0.0, states)


def initial_population(
    key: jax.Array,
    num: int,
    path: AnnealedPath,
    evaluate: Callable,
    refine_kernel: Optional[RefineKernel],
    dim: int,
    forward: Optional[ForwardKernel] = None,
    resolved: Any = None,
    sharding: Optional[NamedSharding] = None,
) -> Population:
    """`num` particles drawn from π0 (key `i` of `split(key, num)` for particle i), their states
    from `init_state` (with `forward` and `resolved`, or without a forward kernel), each its own
    Eve, at β = 0 and step 0; the refinement's parameters start at `initial_refine_params`."""
    keys = shard(jax.random.split(key, num), sharding)
    x0 = jax.vmap(path.sample_initial)(keys)
    log_target0, target_grad0 = jax.vmap(evaluate)(x0)
    states, log_w0 = init_state(keys, x0, log_target0, target_grad0, forward, resolved, path)
    dtype = log_w0.dtype
    return Population(
        states=shard(states, sharding),
        log_w=replicate(log_w0, sharding),
        log_z=jnp.zeros((), dtype),
        eve=replicate(jnp.arange(num, dtype=jnp.int32), sharding),
        resamplings=jnp.zeros((), jnp.int32),
        refine=initial_refine_params(refine_kernel, dim, dtype),
        beta=jnp.zeros((), dtype),
        steps=jnp.zeros((), jnp.int32),
    )


def reweight(
    pop: Population, increment: jax.Array, sharding: Optional[NamedSharding] = None
) -> tuple[Population, jax.Array]:
    """The log weights gain a step's incremental weight: `(population, ESS/N after it)`."""
    pop = pop._replace(log_w=pop.log_w + increment)
    return pop, on_every_device(ess_fraction, sharding)(pop.log_w)


def resample_population(
    pop: Population, key: jax.Array, resampler: Resampler, sharding: Optional[NamedSharding] = None
) -> Population:
    """Resamples the particles: `log Ẑ` gains the log mean weight, the weights restart at zero.

    With `sharding` the weights are replicated, so every device draws the same ancestors from the
    same key, and the ancestors' states are gathered back into the sharded layout.
    """
    n = pop.log_w.shape[0]

    def draw(key, log_w):
        log_mean = logsumexp(jnp.where(jnp.isnan(log_w), -jnp.inf, log_w)) - math.log(n)
        return resampler(key, normalised(log_w), n), log_mean

    idx, log_mean = on_every_device(draw, sharding)(key, pop.log_w)
    return pop._replace(
        states=shard(take(pop.states, idx), sharding),
        log_w=jnp.zeros_like(pop.log_w),
        log_z=pop.log_z + log_mean,
        eve=pop.eve[idx],
        resamplings=pop.resamplings + 1,
    )


def maybe_resample(
    pop: Population, key: jax.Array, when: jax.Array, resampler: Resampler, sharding: Optional[NamedSharding]
) -> Population:
    """`resample_population` when `when` is true, the population unchanged otherwise."""
    return jax.lax.cond(when, lambda p: resample_population(p, key, resampler, sharding), lambda p: p, pop)


def no_refine(pop: Population, used: Any = None) -> tuple[Population, jax.Array, Any, jax.Array]:
    """No moves: the population unchanged, NaN acceptance, NaN for the parameters used (shaped
    as `used`, a `RefineParams` of shapes; default: a step size only) and 0 moves made."""
    nan = jnp.full((), jnp.nan, pop.log_w.dtype)
    none = jnp.zeros((), jnp.int32)
    if used is None:
        return pop, nan, RefineParams(nan, None), none
    return pop, nan, jax.tree.map(lambda a: jnp.full(a.shape, jnp.nan, a.dtype), used), none


def maybe_refine(
    pop: Population, key: jax.Array, when: jax.Array, beta: jax.Array, refine: Refine,
    moves: Optional[jax.Array] = None,
) -> tuple[Population, jax.Array, RefineParams, jax.Array]:
    """`refine` at β (making `moves` moves, where given) when `when` is true, `no_refine` otherwise."""
    used = jax.eval_shape(lambda p: refine(p, key, beta, moves)[2], pop)
    return jax.lax.cond(when, lambda p: refine(p, key, beta, moves), lambda p: no_refine(p, used), pop)


def advance(pop: Population, beta: jax.Array) -> Population:
    """The population after its step: at `beta`, one more step taken."""
    return pop._replace(beta=beta.astype(pop.beta.dtype), steps=pop.steps + 1)
