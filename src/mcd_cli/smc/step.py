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
an `SMCKernel`: `init(key, num)` and `step(key, population) -> (population, StepInfo)`, step k
reading its `k`, `δ_k`, `β_{k−1}` and `β_k` (and, frozen, its planned resampling and refinement
parameters) at `population.steps = k − 1`; the loop scans it.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding

from mcd_cli.kernels.base import AnnealedPath, BackwardKernel, ForwardKernel, Step
from mcd_cli.smc import adaptation
from mcd_cli.smc.base import (
    advance, annealed_log_density, initial_population, maybe_refine, maybe_resample, no_refine, reweight,
)
from mcd_cli.smc.sharding import replicate, shard
from mcd_cli.smc.state import FixedTuning, Kernels, Population, Settings, SMCKernel, StepInfo


def build_move(
    forward: ForwardKernel, backward: BackwardKernel, path: AnnealedPath, resolved: Any, backward_params: Any,
    evaluate: Callable, context: Optional[jax.Array] = None, sharding: Optional[NamedSharding] = None,
) -> Callable:
    """`(key, population, k, δ_k, β_{k−1}, β_k) -> (population, ESS/N)`: every particle moved by
    the forward kernel (particle i with key i of `split(key, N)`), the move scored by the backward
    kernel, and the log weights given the incremental weight `log G_k` (the module's docstring).

    `context`: a datum's features, handed to the backward kernel with every transition (an
    amortised score network); None for an unconditional sampler.
    """
    log_gamma = annealed_log_density(forward, resolved, path)

    def move(key, pop: Population, k, delta, beta_prev, beta) -> tuple[Population, jax.Array]:
        num = pop.log_w.shape[0]
        move_keys = shard(jax.random.split(key, num), sharding)
        states, log_forward, transition = jax.vmap(
            lambda kk, s: forward.step(kk, s, Step(k, beta, delta), path, resolved, evaluate)
        )(move_keys, pop.states)
        if context is not None:
            transition = transition._replace(context=jnp.broadcast_to(context, (num,) + context.shape))
        log_backward = jax.vmap(lambda t: backward.log_density(backward_params, t))(transition)
        increment = log_gamma(beta, states) - log_gamma(beta_prev, pop.states) + log_backward - log_forward
        return reweight(pop._replace(states=shard(states, sharding)), replicate(increment, sharding), sharding)

    return move


def build_kernel(
    kernels: Kernels, params: Any, path: AnnealedPath, evaluate: Callable, dim: int, settings: Settings,
    adapt: bool = True, context: Optional[jax.Array] = None, sharding: Optional[NamedSharding] = None,
    frozen: Optional[FixedTuning] = None,
) -> SMCKernel:
    """The fixed schedule's `SMCKernel`: `init(key, num)` (`initial_population` with the forward
    kernel's states) and `step(key, population)`, step k = `population.steps + 1`: move, reweight,
    resample when the ESS is low (or planned), refine.

    Args:
        kernels: the forward and backward kernels, the refinement kernel (None: no moves) and the
            resampling function.
        params: the sampler's parameters (`annealing.SamplerParams`: its `forward` and `backward`).
        path: the annealed path (its K steps).
        evaluate: `x -> (log γ(x), ∇log γ(x))`.
        dim: the target's dimension.
        settings: `resample` (the ESS/N threshold), `refine_every_step` and the refinement's.
        adapt: adapt the refinement's step size and preconditioner from the particles.
        context: a datum's features for the backward kernel (`build_move`); None: unconditional.
        sharding: the particle axis over a mesh of devices (`sharding`); None: no constraint.
        frozen: an earlier run's `FixedTuning`: step k refines, and resamples, where it says, with
            its parameters `frozen.refine[k − 1]`, adapting nothing (the module's docstring); None:
            refine after each resampling.
    """
    forward = kernels.forward
    resolved = forward.prepare(params.forward, dim)
    refine = None
    if kernels.refine is not None:
        refine = adaptation.build_refine(kernels.refine, path, evaluate, settings, adapt and frozen is None, sharding)
    move = build_move(forward, kernels.backward, path, resolved, params.backward, evaluate, context, sharding)
    steps = path.step_sizes.shape[0]
    schedule = (jnp.arange(1, steps + 1), path.step_sizes, path.betas[:-1], path.betas[1:])

    def init(key, num: int) -> Population:
        return initial_population(key, num, path, evaluate, kernels.refine, dim, forward, resolved, sharding)

    def step(key, pop: Population) -> tuple[Population, StepInfo]:
        i = pop.steps
        k, delta, beta_prev, beta = (a[i] for a in schedule)
        planned = None
        if frozen is not None:
            pop, planned = pop._replace(refine=jax.tree.map(lambda a: a[i], frozen.refine)), frozen.resampled[i]
        k_move, k_resample, k_refine = jax.random.split(key, 3)
        pop, ess = move(k_move, pop, k, delta, beta_prev, beta)
        low = ess < settings.resample
        do_resample = (low if planned is None else low | planned) & (k < steps)
        pop = maybe_resample(pop, k_resample, do_resample, kernels.resample, sharding)
        if refine is None:
            pop, acceptance, used, _ = no_refine(pop)
        else:
            moves = do_resample if planned is None else planned
            do_refine = (jnp.asarray(True) if settings.refine_every_step else moves) & (k < steps)
            pop, acceptance, used, _ = maybe_refine(pop, k_refine, do_refine, beta, refine)
        return advance(pop, beta), StepInfo(beta, ess, do_resample, acceptance, used.step_size)

    return SMCKernel(init, step)
