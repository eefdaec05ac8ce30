"""The population sampler's loops: `lax.scan` over a fixed schedule, `lax.while_loop` until
adaptive tempering reaches β = 1; then the stationarity test of the final population.

Keys: the run's key splits into (initial particles, steps); step k of a fixed schedule uses the
k-th of K keys split from the steps' key, an adaptive (or replayed) step `fold_in(steps' key, k)`,
and the stationarity test `fold_in(steps' key, K + 1)` (`max_steps + 1` when adaptive).

A replayed run (`run_replay`) goes through the temperatures, resamplings and refinement tuning an
earlier adaptive run chose (its `SMCOutput.tuning`, a `Tempering`), adapting nothing. A frozen run
on a fixed schedule (`run_fixed(frozen=)`) refines after the steps an earlier run resampled at,
with that run's parameters (a `FixedTuning`).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding

from mcd_cli.kernels.base import AnnealedPath, RefineKernel, RefineParams
from mcd_cli.smc import adaptation, step, tempering
from mcd_cli.smc.diagnostics import stationarity
from mcd_cli.smc.sharding import replicate, shard
from mcd_cli.smc.state import FixedTuning, Kernels, Population, Settings, SMCOutput, Tempering, Trace
from mcd_cli.targets.base import Target


def initial_population(
    key: jax.Array,
    path: AnnealedPath,
    evaluate: Callable,
    num: int,
    init_state: Callable,
    refine_kernel: Optional[RefineKernel],
    dim: int,
    sharding: Optional[NamedSharding] = None,
) -> Population:
    """`num` particles drawn from π0 (key `i` of `split(key, num)` for particle i), their states
    from `init_state(keys, x0, log γ(x0), ∇log γ(x0)) -> (states, log w_0)`, each its own Eve."""
    keys = shard(jax.random.split(key, num), sharding)
    x0 = jax.vmap(path.sample_initial)(keys)
    log_target0, target_grad0 = jax.vmap(evaluate)(x0)
    states, log_w0 = init_state(keys, x0, log_target0, target_grad0)
    dtype = log_w0.dtype
    return Population(
        states=shard(states, sharding),
        log_w=replicate(log_w0, sharding),
        log_z=jnp.zeros((), dtype),
        eve=replicate(jnp.arange(num, dtype=jnp.int32), sharding),
        resamplings=jnp.zeros((), jnp.int32),
        refine=adaptation.initial_refine_params(refine_kernel, dim, dtype),
    )


def run(
    key: jax.Array,
    params: Any,
    path: AnnealedPath,
    target: Target,
    num: int,
    kernels: Kernels,
    settings: Settings,
    adapt: bool = True,
    context: Optional[jax.Array] = None,
    sharding: Optional[NamedSharding] = None,
    frozen: Any = None,
) -> SMCOutput:
    """One SMC run of `num` particles on a fixed schedule, or adaptive (`settings.adaptive`).

    Args:
        key: PRNG key of the run.
        params: the sampler's parameters (`annealing.SamplerParams`: its `forward` and `backward`
            kernels' are used on a fixed schedule; ignored when adaptive).
        path: the annealed path (`annealing.annealed_path`): β and δ of a fixed schedule, and π0.
        target: the target.
        num: particles N.
        kernels: forward, backward (None when adaptive), refinement (None: no moves; needed when
            adaptive) and resampling.
        settings: the sampler's numbers.
        adapt: adapt the refinement's step size and preconditioner from the particles (off: the
            kernels are fixed, and Ẑ is exactly unbiased on a fixed schedule).
        context: a datum's features for an amortised score network (`amortised`), handed to the
            backward kernel with every transition; None for an unconditional sampler.
        sharding: the particle axis split over a mesh of devices (`devices.Layout.particles`; `num`
            a multiple of its device count), with global resampling; None: no constraint.
        frozen: on a fixed schedule, an earlier run's `FixedTuning` (its `SMCOutput.tuning`): its
            refinement parameters and resampling steps, used as they are (`run_fixed`); with
            adaptive tempering, an earlier run's `Tempering` (its `SMCOutput.tuning`),
            replayed (`run_replay`).
    """
    if settings.adaptive and frozen is not None:
        return run_replay(key, path, target, num, kernels, settings, frozen, sharding)
    if settings.adaptive:
        return run_adaptive(key, path, target, num, kernels, settings, adapt, sharding)
    return run_fixed(key, params, path, target, num, kernels, settings, adapt, context, sharding, frozen)


def run_fixed(
    key, params, path, target, num, kernels: Kernels, settings: Settings, adapt, context=None, sharding=None,
    frozen: Optional[FixedTuning] = None,
) -> SMCOutput:
    """`run` on the fixed schedule of `path`: K steps of `step.build_kernel` under `lax.scan`.

    `frozen` (a `FixedTuning`, e.g. an earlier run's `SMCOutput.tuning`): the refinement runs after
    the steps `frozen.resampled` marks, where the population is resampled too, with the parameters
    `frozen.refine[k − 1]` at step k, and adapts nothing (`adapt` is ignored); the population is
    also resampled, without moves, where its ESS falls below the threshold. So its kernels are
    fixed before the run draws a random number, and Ẑ is unbiased (`step`'s docstring).
    """
    forward = kernels.forward
    resolved = forward.prepare(params.forward, target.dim)
    evaluate = jax.value_and_grad(target.log_density)
    key_init, key_steps = jax.random.split(key)
    init_state = step.build_init(forward, resolved, path)
    pop = initial_population(key_init, path, evaluate, num, init_state, kernels.refine, target.dim, sharding)
    refine = None
    if kernels.refine is not None:
        adapt = adapt and frozen is None
        refine = adaptation.build_refine(kernels.refine, path, evaluate, settings, adapt, sharding)
    one_step = step.build_kernel(
        forward, kernels.backward, refine, kernels.resample, path, resolved, params.backward, evaluate,
        settings, context, sharding,
    )
    steps = path.step_sizes.shape[0]
    inputs = (
        jnp.arange(1, steps + 1),
        path.step_sizes,
        path.betas[:-1],
        path.betas[1:],
        frozen if frozen is not None else jnp.zeros((steps,)),
        jax.random.split(key_steps, steps),
    )

    def scanned(pop, xs):
        k, delta, beta_prev, beta, fixed, step_key = xs
        planned = None
        if frozen is not None:
            pop, planned = pop._replace(refine=fixed.refine), fixed.resampled
        # what an adapting refinement at step k would set the preconditioner to: the particles'
        # weighted variance after the step's reweighting (before its resampling, the same in law)
        pop, info = one_step(step_key, pop, k, delta, beta_prev, beta, planned)
        return pop, (info, pop.refine._replace(inv_mass=adaptation.weighted_variance(pop)))

    pop, (trace, params_used) = jax.lax.scan(scanned, pop, inputs)
    # the steps it refined after: its own resamplings, or the frozen run's
    refined = trace.resampled if frozen is None else frozen.resampled
    tuning = None if kernels.refine is None else FixedTuning(params_used, refined)
    drift = None
    if kernels.refine is not None:
        drift = stationarity(
            pop, jax.random.fold_in(key_steps, steps + 1), kernels.refine, path, evaluate, settings, sharding
        )
    steps = jnp.asarray(steps, jnp.int32)
    return SMCOutput(pop.log_z, pop.log_w, pop.eve, pop.resamplings, steps, trace, drift, pop.states.position, tuning)


def _trace(cap: int, pop: Population, kernel: RefineKernel, settings: Settings, adapt: bool) -> Trace:
    """An adaptive run's trace before its first step: NaN (no step) in arrays of `cap` steps, the
    preconditioner's in the shape its moves use (`adaptation.preconditioner`)."""
    dtype = pop.log_w.dtype
    nan = jnp.full((cap,), jnp.nan, dtype)
    shape = jax.eval_shape(lambda p: adaptation.preconditioner(p, kernel, settings, adapt), pop).shape
    return Trace(nan, nan, jnp.zeros((cap,), bool), nan, nan, nan, jnp.full((cap, *shape), jnp.nan, dtype))


def run_adaptive(key, path, target, num, kernels: Kernels, settings: Settings, adapt, sharding=None) -> SMCOutput:
    """`run` with adaptive tempering: `tempering.build_kernel` steps under `lax.while_loop` until
    β = 1 or `settings.max_steps`, the trace written into arrays of that length. Its `tuning` is
    the `Tempering` it chose: the β, resamplings, step sizes and preconditioners of its steps."""
    evaluate = jax.value_and_grad(target.log_density)
    key_init, key_steps = jax.random.split(key)
    pop = initial_population(key_init, path, evaluate, num, tempering.init_state, kernels.refine, target.dim, sharding)
    cap = settings.max_steps
    trace = _trace(cap, pop, kernels.refine, settings, adapt)
    refine = adaptation.build_refine(kernels.refine, path, evaluate, settings, adapt, sharding)
    one_step = tempering.build_kernel(refine, kernels.resample, path, settings, sharding)

    def cond(carry):
        _, beta, k, _ = carry
        return (beta < 1.0) & (k < cap)

    def body(carry):
        pop, beta, k, trace = carry
        pop, info = one_step(jax.random.fold_in(key_steps, k), pop, beta)
        trace = jax.tree.map(lambda t, v: t.at[k].set(v), trace, info)
        return pop, info.beta, k + 1, trace

    carry = (pop, jnp.zeros((), pop.log_w.dtype), jnp.zeros((), jnp.int32), trace)
    pop, beta, steps, trace = jax.lax.while_loop(cond, body, carry)
    drift = stationarity(
        pop, jax.random.fold_in(key_steps, cap + 1), kernels.refine, path, evaluate, settings, sharding
    )
    chosen = Tempering(trace.beta, trace.resampled, RefineParams(trace.step_size, trace.preconditioner), steps, pop.refine)
    return SMCOutput(pop.log_z, pop.log_w, pop.eve, pop.resamplings, steps, trace, drift, pop.states.position, chosen)


def run_replay(
    key, path, target, num, kernels: Kernels, settings: Settings, chosen: Tempering, sharding=None
) -> SMCOutput:
    """`run` through the temperatures an earlier adaptive run chose (`chosen`, its `tuning`):
    the same steps as `run_adaptive`'s, and the same keys, but each step's β, whether it
    resamples, and its refinement's step size and preconditioner are `chosen`'s, and nothing is
    adapted from this run's particles. Its kernels and schedule are fixed before it draws a random
    number, so its Ẑ is exactly unbiased (tempered SMC on a fixed schedule, Del Moral 2004), while
    the run that chose them, with its own key, kept adaptive tempering's economy of temperatures.
    Replaying a run's own choices with its own key is that run, bit for bit.
    """
    evaluate = jax.value_and_grad(target.log_density)
    key_init, key_steps = jax.random.split(key)
    pop = initial_population(key_init, path, evaluate, num, tempering.init_state, kernels.refine, target.dim, sharding)
    start = pop.refine
    if chosen.refine.inv_mass.ndim == 3:  # a covariance factor per step: start from the identity
        start = start._replace(inv_mass=jnp.diag(start.inv_mass))
    pop = pop._replace(refine=start)
    cap = settings.max_steps
    trace = _trace(cap, pop, kernels.refine, settings, False)
    refine = adaptation.build_refine(kernels.refine, path, evaluate, settings, False, sharding)
    tempered = tempering.build_tempered_kernel(refine, kernels.resample, settings, sharding)

    def cond(carry):
        _, _, k, _ = carry
        return k < chosen.steps

    def body(carry):
        pop, beta, k, trace = carry
        log_likelihood = tempering.log_likelihoods(pop, path, sharding)
        # the chosen tuning of a step that refines (β < 1; the last step makes no moves)
        refines = chosen.beta[k] < 1.0
        pop = pop._replace(refine=jax.tree.map(lambda c, p: jnp.where(refines, c[k], p), chosen.refine, pop.refine))
        pop, info = tempered(
            jax.random.fold_in(key_steps, k), pop, beta, chosen.beta[k], log_likelihood, chosen.resampled[k]
        )
        trace = jax.tree.map(lambda t, v: t.at[k].set(v), trace, info)
        return pop, info.beta, k + 1, trace

    carry = (pop, jnp.zeros((), pop.log_w.dtype), jnp.zeros((), jnp.int32), trace)
    pop, beta, steps, trace = jax.lax.while_loop(cond, body, carry)
    pop = pop._replace(refine=chosen.final)
    drift = stationarity(
        pop, jax.random.fold_in(key_steps, cap + 1), kernels.refine, path, evaluate, settings, sharding
    )
    return SMCOutput(pop.log_z, pop.log_w, pop.eve, pop.resamplings, steps, trace, drift, pop.states.position, chosen)
