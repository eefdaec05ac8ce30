"""The population sampler's loops: `lax.scan` over a fixed schedule, `lax.while_loop` until
adaptive tempering reaches β = 1; then the stationarity test of the final population.

Every loop runs an `SMCKernel` (`base`): `pop = kernel.init(key, num)`, then `pop, info =
kernel.step(key, pop)` once per step; the fixed schedule's from `step.build_kernel`, adaptive
tempering's and a replay's from `tempering.build_kernel`.

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
from mcd_cli.smc.diagnostics import measured_moves, stationarity
from mcd_cli.smc.state import FixedTuning, Kernels, Population, Settings, SMCKernel, SMCOutput, Tempering, Trace
from mcd_cli.targets.base import Target


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
    evaluate = jax.value_and_grad(target.log_density)
    kernel = step.build_kernel(kernels, params, path, evaluate, target.dim, settings, adapt, context, sharding, frozen)
    key_init, key_steps = jax.random.split(key)
    pop = kernel.init(key_init, num)
    steps = path.step_sizes.shape[0]

    def scanned(pop, xs):
        step_key, i = xs
        # `pop.steps` is i already (0 at the start, one more per step); set from the scan's own
        # index, the compiled loop has one induction variable, not two equal ones (a second one
        # changed XLA's fusions, and so the rounding, of a population sharded over devices).
        pop, info = kernel.step(step_key, pop._replace(steps=i))
        # what an adapting refinement at step k would set the preconditioner to: the particles'
        # weighted variance after the step's reweighting (before its resampling, the same in law)
        return pop, (info, pop.refine._replace(inv_mass=adaptation.weighted_variance(pop)))

    xs = (jax.random.split(key_steps, steps), jnp.arange(steps, dtype=jnp.int32))
    pop, (trace, params_used) = jax.lax.scan(scanned, pop, xs)
    # the steps it refined after: its own resamplings, or the frozen run's
    refined = trace.resampled if frozen is None else frozen.resampled
    tuning = None if kernels.refine is None else FixedTuning(params_used, refined)
    drift = None
    if kernels.refine is not None:
        drift = stationarity(
            pop, jax.random.fold_in(key_steps, steps + 1), kernels.refine, path, evaluate, settings, sharding
        )
    return SMCOutput(pop.log_z, pop.log_w, pop.eve, pop.resamplings, pop.steps, trace, drift, pop.states.position, tuning)


def _trace(cap: int, pop: Population, kernel: RefineKernel, settings: Settings, adapt: bool) -> Trace:
    """An adaptive run's trace before its first step: NaN (no step) in arrays of `cap` steps, the
    preconditioner's in the shape its moves use (`adaptation.preconditioner`)."""
    dtype = pop.log_w.dtype
    nan = jnp.full((cap,), jnp.nan, dtype)
    shape = jax.eval_shape(lambda p: adaptation.preconditioner(p, kernel, settings, adapt), pop).shape
    return Trace(
        nan, nan, jnp.zeros((cap,), bool), nan, nan, nan, jnp.full((cap, *shape), jnp.nan, dtype),
        jnp.zeros((cap,), jnp.int32),
    )


def run_tempered(
    kernel: SMCKernel, pop: Population, key_steps: jax.Array, trace: Trace, cond: Callable[[Population], jax.Array]
) -> tuple[Population, Trace]:
    """`kernel.step` under `lax.while_loop` while `cond(population)`, step k keyed `fold_in(key_steps,
    k)` and its `StepInfo` written into slot k of `trace`: the final population and the trace."""

    def body(carry):
        pop, trace = carry
        k = pop.steps
        pop, info = kernel.step(jax.random.fold_in(key_steps, k), pop)
        return pop, jax.tree.map(lambda t, v: t.at[k].set(v), trace, info)

    return jax.lax.while_loop(lambda carry: cond(carry[0]), body, (pop, trace))


def run_adaptive(key, path, target, num, kernels: Kernels, settings: Settings, adapt, sharding=None) -> SMCOutput:
    """`run` with adaptive tempering: `tempering.build_kernel` steps under `lax.while_loop` until
    β = 1 or `settings.max_steps`, the trace written into arrays of that length. Its `tuning` is
    the `Tempering` it chose: the β, resamplings, step sizes and preconditioners of its steps."""
    evaluate = jax.value_and_grad(target.log_density)
    kernel = tempering.build_kernel(kernels, path, evaluate, target.dim, settings, adapt, sharding)
    key_init, key_steps = jax.random.split(key)
    pop = kernel.init(key_init, num)
    cap = settings.max_steps
    trace = _trace(cap, pop, kernels.refine, settings, adapt)
    pop, trace = run_tempered(kernel, pop, key_steps, trace, lambda p: (p.beta < 1.0) & (p.steps < cap))
    steps = pop.steps
    # where the run measured its moves, a replay makes them, and the stationarity test counts them
    measured = trace.moves if adaptation.measures_moves(settings, adapt) else None
    most = None if measured is None else measured_moves(measured, trace.beta, steps)
    drift = stationarity(
        pop, jax.random.fold_in(key_steps, cap + 1), kernels.refine, path, evaluate, settings, sharding, most
    )
    chosen = Tempering(
        trace.beta, trace.resampled, RefineParams(trace.step_size, trace.preconditioner), steps, pop.refine, measured
    )
    return SMCOutput(pop.log_z, pop.log_w, pop.eve, pop.resamplings, steps, trace, drift, pop.states.position, chosen)


def run_replay(
    key, path, target, num, kernels: Kernels, settings: Settings, chosen: Tempering, sharding=None
) -> SMCOutput:
    """`run` through the temperatures an earlier adaptive run chose (`chosen`, its `tuning`):
    the same steps as `run_adaptive`'s, and the same keys, but each step's β, whether it
    resamples, and its refinement's step size and preconditioner are `chosen`'s, and nothing is
    adapted from this run's particles (`tempering.build_kernel(chosen=)`). Its kernels and schedule
    are fixed before it draws a random number, so its Ẑ is exactly unbiased (tempered SMC on a
    fixed schedule, Del Moral 2004), while the run that chose them, with its own key, kept adaptive
    tempering's economy of temperatures. Replaying a run's own choices with its own key is that
    run, bit for bit.
    """
    evaluate = jax.value_and_grad(target.log_density)
    kernel = tempering.build_kernel(kernels, path, evaluate, target.dim, settings, False, sharding, chosen)
    key_init, key_steps = jax.random.split(key)
    pop = kernel.init(key_init, num)
    cap = settings.max_steps
    trace = _trace(cap, pop, kernels.refine, settings, False)
    pop, trace = run_tempered(kernel, pop, key_steps, trace, lambda p: p.steps < chosen.steps)
    pop = pop._replace(refine=chosen.final)
    most = None if chosen.moves is None else measured_moves(chosen.moves, chosen.beta, chosen.steps)
    drift = stationarity(
        pop, jax.random.fold_in(key_steps, cap + 1), kernels.refine, path, evaluate, settings, sharding, most
    )
    return SMCOutput(pop.log_z, pop.log_w, pop.eve, pop.resamplings, pop.steps, trace, drift, pop.states.position, chosen)
