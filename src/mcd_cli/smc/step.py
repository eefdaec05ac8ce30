"""One step of a fixed schedule: move every particle, reweight, resample when the ESS is low, refine.

After step k the log weights gain the incremental weight

    log G_k = log γ̃_k(s_k) − log γ̃_{k−1}(s_{k−1})
              + log B_{k−1}(s_{k−1} | s_k) − log F_k(s_k | s_{k−1}),

where `γ̃_k` is the annealed density of the whole particle state (UHA: `γ_k(x) N(p; 0, M)`), so
the product of the `G_k` telescopes to the importance weight of the per-particle loop
(`mcd_cli.path.annealing`). When the effective sample size falls below `resample · N` the population
is resampled: the running `log Ẑ` gains `logsumexp(log w) − log N` and the weights restart at
zero; each particle's time-0 ancestor (its "Eve" index) is carried along for the genealogy
variance (`stats.smc_estimate`). Resampling never happens after the last step, whose weights close
the estimate. The refinement moves at `β_k` then run after each resampling, or after every step.

Given `planned` (a step of an earlier run's resampling, `state.FixedTuning`), the population is
resampled and refined after the planned steps, and resampled without moves where its ESS alone
falls low. Refining where this population's own ESS fell low would choose its kernels from its own
weights, and that biases Ẑ: on brownian_motion with trained ULA-MCD kernels, populations of 512
gave E[Ẑ/Z] = 1.08 ± 0.02 (resampling at ESS 0.5, moves after each resampling) against 0.99 ±
0.02 with resampling and moves at every step and 0.99 ± 0.01 without moves (docs/method.md,
"Moves at planned steps"). The resampling alone may follow the ESS (αSMC: Whiteley, Lee &
Heine 2016).

`build_kernel` takes the kernels as values (BlackJAX's `smc.tempered.build_kernel`) and returns
`step(key, population, k, δ_k, β_{k−1}, β_k) -> (population, StepInfo)`; the loop scans it.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp
from jax.sharding import NamedSharding

from mcd_cli.kernels.base import AnnealedPath, BackwardKernel, ForwardKernel, RefineParams, Step
from mcd_cli.smc.adaptation import Refine
from mcd_cli.smc.sharding import on_every_device, replicate, shard
from mcd_cli.smc.state import Population, Resampler, Settings, StepInfo, ess_fraction, normalised, take


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


def no_refine(pop: Population, used: Any = None) -> tuple[Population, jax.Array, Any]:
    """No moves: the population unchanged, NaN acceptance, and NaN for the parameters used (shaped
    as `used`, a `RefineParams` of shapes; default: a step size only)."""
    nan = jnp.full((), jnp.nan, pop.log_w.dtype)
    if used is None:
        return pop, nan, RefineParams(nan, None)
    return pop, nan, jax.tree.map(lambda a: jnp.full(a.shape, jnp.nan, a.dtype), used)


def maybe_refine(
    pop: Population, key: jax.Array, when: jax.Array, beta: jax.Array, refine: Refine
) -> tuple[Population, jax.Array, RefineParams]:
    """`refine` at β when `when` is true, `no_refine` otherwise."""
    used = jax.eval_shape(lambda p: refine(p, key, beta)[2], pop)
    return jax.lax.cond(when, lambda p: refine(p, key, beta), lambda p: no_refine(p, used), pop)


def annealed_log_density(forward: ForwardKernel, resolved: Any, path: AnnealedPath) -> Callable:
    """`(β, states) -> log γ̃_β` of every particle's whole state: `log γ_β(x)` plus the forward
    kernel's own terms (UHA: `log N(p; 0, M)`)."""

    def extra(states):
        return jax.vmap(lambda s: forward.finish(s, resolved) - s.log_target)(states)

    def log_gamma(beta, states):
        x = states.position
        return beta * states.log_target + (1.0 - beta) * jax.vmap(path.initial_log_density)(x) + extra(states)

    return log_gamma


def build_init(forward: ForwardKernel, resolved: Any, path: AnnealedPath) -> Callable:
    """`(keys, x0, log γ(x0), ∇log γ(x0)) -> (states, log w_0)`: the forward kernel's initial states."""
    log_gamma = annealed_log_density(forward, resolved, path)

    def init_state(keys, x0, log_target0, target_grad0):
        kernel_keys = jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)
        states, log_w0 = jax.vmap(lambda k, x, v, g: forward.init(k, x, v, g, resolved))(
            kernel_keys, x0, log_target0, target_grad0
        )
        # log w_0 = [kernel's initial terms] − log π0(x_0) + log γ̃_0(s_0): zero for ULA and UHA.
        return states, log_w0 - jax.vmap(path.initial_log_density)(x0) + log_gamma(0.0, states)

    return init_state


def build_kernel(
    forward: ForwardKernel, backward: BackwardKernel, refine: Optional[Refine], resample: Resampler,
    path: AnnealedPath, resolved: Any, backward_params: Any, evaluate: Callable, settings: Settings,
    context: Optional[jax.Array] = None, sharding: Optional[NamedSharding] = None,
) -> Callable:
    """The fixed-schedule step `(key, population, k, δ_k, β_{k−1}, β_k[, planned]) -> (population,
    StepInfo)`; `planned` (a boolean): step k is one of the resampling steps the refinement is frozen
    at (see the module's docstring); None: refine after each resampling.

    Args:
        forward: the forward kernel, with its prepared parameters `resolved`.
        backward: the backward kernel, with its parameters `backward_params`.
        refine: the refinement (`adaptation.build_refine`), or None for no moves.
        resample: the resampling function.
        path: the annealed path (its K steps).
        resolved: `forward.prepare(params.forward, dim)`.
        backward_params: the backward kernel's parameters.
        evaluate: `x -> (log γ(x), ∇log γ(x))`.
        settings: `resample` (the ESS/N threshold) and `refine_every_step`.
        context: a datum's features, handed to the backward kernel with every transition (an
            amortised score network); None for an unconditional sampler.
        sharding: the particle axis over a mesh of devices (`sharding`); None: no constraint.
    """
    steps = path.step_sizes.shape[0]
    log_gamma = annealed_log_density(forward, resolved, path)

    def step(key, pop: Population, k, delta, beta_prev, beta, planned=None) -> tuple[Population, StepInfo]:
        num = pop.log_w.shape[0]
        k_move, k_resample, k_refine = jax.random.split(key, 3)
        move_keys = shard(jax.random.split(k_move, num), sharding)
        states, log_forward, transition = jax.vmap(
            lambda kk, s: forward.step(kk, s, Step(k, beta, delta), path, resolved, evaluate)
        )(move_keys, pop.states)
        if context is not None:
            transition = transition._replace(context=jnp.broadcast_to(context, (num,) + context.shape))
        log_backward = jax.vmap(lambda t: backward.log_density(backward_params, t))(transition)
        increment = log_gamma(beta, states) - log_gamma(beta_prev, pop.states) + log_backward - log_forward
        pop = pop._replace(states=shard(states, sharding), log_w=pop.log_w + replicate(increment, sharding))
        ess = on_every_device(ess_fraction, sharding)(pop.log_w)
        low = ess < settings.resample
        do_resample = (low if planned is None else low | planned) & (k < steps)
        pop = maybe_resample(pop, k_resample, do_resample, resample, sharding)
        if refine is None:
            pop, acceptance, used = no_refine(pop)
        else:
            moves = do_resample if planned is None else planned
            do_refine = (jnp.asarray(True) if settings.refine_every_step else moves) & (k < steps)
            pop, acceptance, used = maybe_refine(pop, k_refine, do_refine, beta, refine)
        return pop, StepInfo(beta, ess, do_resample, acceptance, used.step_size)

    return step
