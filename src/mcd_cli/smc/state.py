"""The values the population sampler passes around: its inputs (kernels, settings), the one state
between steps (`Population`), the kernel built from them (`SMCKernel`), one step's diagnostics and a
run's output; and the arithmetic of its weights.

Example:
    >>> import jax.numpy as jnp
    >>> log_w = jnp.array([0.0, 0.0, jnp.nan])
    >>> normalised(log_w).tolist(), round(float(ess_fraction(log_w)), 4)
    ([0.5, 0.5, 0.0], 0.6667)
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

from mcd_cli.kernels.base import BackwardKernel, ForwardKernel, RefineKernel, RefineParams

# `(key, normalised weights, num) -> ancestor indices` (`mcd_cli.smc.resampling`).
Resampler = Callable[[jax.Array, jax.Array, int], jax.Array]


class Kernels(NamedTuple):
    """What moves and selects the particles, as values.

    Attributes:
        forward: the forward kernel of a fixed schedule (None with adaptive tempering, whose moves
            are the refinement kernel's).
        backward: the backward kernel scoring the forward kernel's transitions (None likewise).
        refine: the Metropolis-corrected move run on the population (None: no refinement).
        resample: the resampling function.
    """

    forward: Optional[ForwardKernel]
    backward: Optional[BackwardKernel]
    refine: Optional[RefineKernel]
    resample: Resampler


class Settings(NamedTuple):
    """The sampler's numbers (hashable, so static under `jax.jit`).

    Attributes:
        resample: resample when ESS/N falls below this fraction (0: never).
        refine_steps: refinement moves per refinement.
        leapfrog: leapfrog steps per HMC move.
        refine_every_step: refine after every step (else after each resampling); adaptive
            tempering refines after every step whatever this says.
        adaptive: adaptive tempering (β chosen from the particles) instead of the fixed schedule.
        target_ess: adaptive tempering: the conditional ESS/N each step's β aims at.
        max_steps: adaptive tempering: the most steps (the trace's length).
    """

    resample: float
    refine_steps: int
    leapfrog: int
    refine_every_step: bool
    adaptive: bool
    target_ess: float
    max_steps: int


class Population(NamedTuple):
    """The particle system between steps: the one state of every SMC kernel (`SMCKernel`).

    Attributes:
        states: the kernel states, batched over particles (leading axis N).
        log_w: log weights since the last resampling, (N,).
        log_z: the log Ẑ accumulated at the resamplings so far.
        eve: each particle's time-0 ancestor, (N,) int32.
        resamplings: how many times the population was resampled.
        refine: the refinement kernel's step size and preconditioner.
        beta: β after the steps taken (0 at the start); None outside a run (a population built
            only to be refined or tested).
        steps: the steps taken, int32 (0 at the start; the index of the next step's key, schedule
            entry and trace slot); None likewise.
    """

    states: Any
    log_w: jax.Array
    log_z: jax.Array
    eve: jax.Array
    resamplings: jax.Array
    refine: RefineParams
    beta: Any = None
    steps: Any = None


class StepInfo(NamedTuple):
    """One step's diagnostics; stacked over steps they are a run's `Trace` (K steps for a fixed
    schedule, `max_steps` when adaptive, of which `SMCOutput.steps` are used)."""

    beta: jax.Array  # β_k after step k
    ess: jax.Array  # ESS / N after the reweighting, before any resampling
    resampled: jax.Array  # whether the population was resampled after step k
    acceptance: jax.Array  # mean acceptance of the refinement moves (NaN: none made)
    step_size: jax.Array  # the refinement step size used (NaN: none made)
    # adaptive: mean over coordinates of the particles' correlation across the step's moves
    # (`move_correlation`; NaN: none made); None on a fixed schedule
    correlation: Any = None
    # adaptive: the refinement's preconditioner as used (the particles' variance, (d,), or their
    # covariance factor, (d, d); NaN: no moves); None on a fixed schedule
    preconditioner: Any = None
    # adaptive: the refinement moves made at the step (int32; 0: none); None on a fixed schedule
    moves: Any = None


Trace = StepInfo  # a StepInfo whose fields are arrays over steps


class SMCKernel(NamedTuple):
    """An SMC kernel built from its parts (BlackJAX's `SamplingAlgorithm` of `smc.base`): the fixed
    schedule's (`step.build_kernel`), adaptive tempering's and a replay's (`tempering.build_kernel`).

    Attributes:
        init: `(key, num) -> Population`: `num` particles drawn from π0 at β = 0, step 0
            (`base.initial_population`).
        step: `(key, population) -> (population, StepInfo)`: the population's next step, which
            the loops (`loop`) scan or while-loop.
    """

    init: Callable[[jax.Array, int], Population]
    step: Callable[[jax.Array, Population], tuple[Population, StepInfo]]


class Tempering(NamedTuple):
    """What one adaptive tempering run chose, per step (arrays over `max_steps`, of which `steps`
    are used): what a later run replays with nothing chosen from its own particles
    (`loop.run_replay`), so that its Ẑ is exactly unbiased.

    Attributes:
        beta: β after each step.
        resampled: whether the population was resampled after each step.
        refine: the refinement's step size and preconditioner as used at each step (the
            particles' weighted variance, (max_steps, d), or their covariance factor,
            (max_steps, d, d): `adaptation.preconditioner`); NaN at a step without moves.
        steps: the steps taken.
        final: the refinement's parameters after the last step, where the stationarity test
            (`diagnostics.stationarity`) starts.
        moves: the refinement moves made at each step where the run measured how many to make
            (`adaptation.MOVE_STOP`), which a replay makes too; None: `settings.refine_steps`.
    """

    beta: jax.Array
    resampled: jax.Array
    refine: RefineParams
    steps: jax.Array
    final: RefineParams
    moves: Any = None


class FixedTuning(NamedTuple):
    """What one run on a fixed schedule chose, per step (arrays over the K steps): what a later run
    freezes (`loop.run_fixed(frozen=...)`), so that nothing in it depends on its own particles'
    weights but where its ESS asks for a resampling (which keeps Ẑ unbiased; Whiteley, Lee & Heine
    2016, αSMC).

    Attributes:
        refine: the refinement's parameters as the run's adaptation had them at each step: the step
            size in effect, and the particles' weighted variance after the step's reweighting as
            the preconditioner (a `RefineParams` stacked over the K steps).
        resampled: whether the run was resampled (and so refined) after each step: the later run
            refines after these steps and no others, and resamples there.
    """

    refine: RefineParams
    resampled: jax.Array


class SMCOutput(NamedTuple):
    """One SMC run: `log Ẑ = log_z + logsumexp(log_w) − log N`, and what its error needs."""

    log_z: jax.Array  # accumulated at the resamplings
    log_w: jax.Array  # final log weights since the last resampling, (N,)
    eve: jax.Array  # final particles' time-0 ancestors, (N,)
    resamplings: jax.Array
    steps: jax.Array  # steps taken (K; adaptive: the outcome)
    trace: Trace
    # `stationarity`: (mean change of log γ over `stationarity_moves` extra moves at β = 1, its z
    # score, the weight of the particles those moves left stuck); None without refinement moves
    drift: Any = None
    # the final particles' positions in the sampler's space, (N, d): with `log_w` they are the
    # population's weighted draws from the target (`run.draws` makes posterior draws of them)
    particles: Any = None
    # fixed schedule: the `FixedTuning` this run's adaptation chose (its refinement's parameters and
    # resampling steps), what a later run freezes (`loop.run_fixed(frozen=...)`); adaptive: the
    # `Tempering` it chose (`loop.run_replay`); None without refinement
    tuning: Any = None


def normalised(log_w: jax.Array) -> jax.Array:
    """Normalised weights `W = softmax(log w)`, NaN weights set to zero."""
    log_w = jnp.where(jnp.isnan(log_w), -jnp.inf, log_w)
    return jax.nn.softmax(log_w)


def ess_fraction(log_w: jax.Array) -> jax.Array:
    """`ESS / N = (Σ w)² / (N Σ w²)`, in log space (NaN weights count as zero)."""
    log_w = jnp.where(jnp.isnan(log_w), -jnp.inf, log_w)
    return jnp.exp(2.0 * logsumexp(log_w) - logsumexp(2.0 * log_w)) / log_w.shape[0]


def take(tree: Any, idx: jax.Array) -> Any:
    """The particles `idx` of every leaf of `tree` (leading axis N)."""
    return jax.tree.map(lambda a: a[idx], tree)
