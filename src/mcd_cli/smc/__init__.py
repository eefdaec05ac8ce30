"""Sequential Monte Carlo: the particles move through the annealing together, and are resampled.

The per-particle loop (`mcd_cli.path.annealing`) gives importance sampling; here one population of N
particles is stepped together, the kernels `vmap`ped over the particles inside, because resampling
couples them. As in BlackJAX, the kernels are values passed in (`Kernels`: a forward kernel, a
backward kernel, a refinement kernel or None, and a resampling function) together with a few
numbers (`Settings`); nothing here looks a kernel up by name (the run layer does:
`run.smc_kernels`).

Every kernel is built from its parts and is an `SMCKernel` (BlackJAX's contract): `init(key, num)
-> Population` and `step(key, population) -> (population, StepInfo)`, the `Population` the one
state (with its β and the steps taken) and `init_state` the one initial state.

Modules:
    state: `Kernels`, `Settings`, the `Population` between steps, the `SMCKernel`, one step's
        `StepInfo` (stacked: the `Trace`), the run's `SMCOutput`; normalised weights and ESS.
    base: the contract's shared machinery: the initial state (`init_state`, `initial_population`),
        reweighting, the resampling of a population, the refinement when asked.
    step: the fixed schedule's kernel (`build_kernel`): move, incremental weight, resampling when
        the ESS is low, refinement.
    tempering: adaptive tempering, β′ solved from the conditional ESS (`next_beta`), the adaptive
        kernel a wrapper around the tempered step (BlackJAX's `adaptive_tempered`), or replaying
        an earlier run's choices.
    adaptation: the Metropolis-corrected refinement moves and their step size and preconditioner,
        adapted from the particles.
    diagnostics: how much the moves moved the particles, and the stationarity test.
    sharding: one population over several devices, with global resampling.
    loop: `lax.scan` over a fixed schedule, `lax.while_loop` when adaptive; `run`. A fixed
        schedule's refinement may be frozen at an earlier run's per-step parameters and resampling
        steps (`run_fixed(frozen=)`, a `FixedTuning`).
    segments: training with SMC in the loop: a batch run as one population, its loss summed over
        the segments between resamplings, no gradient through a resampling.

Example:
    >>> import jax, jax.numpy as jnp
    >>> from mcd_cli.path import annealing
    >>> from mcd_cli.smc import resampling
    >>> from mcd_cli.config import SamplerConfig
    >>> from mcd_cli.kernels import ais, ula
    >>> from mcd_cli.targets import Target
    >>> target = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2)
    >>> config = SamplerConfig(backward="ais", steps=8, resample=0.5)
    >>> params = annealing.init_params(jax.random.key(0), target, config)
    >>> path = annealing.annealed_path(params.path, target, config)
    >>> kernels = Kernels(ula.KERNEL, ais.KERNEL, None, resampling.multinomial)
    >>> settings = Settings(resample=0.5, refine_steps=1, leapfrog=3, refine_every_step=False,
    ...                     adaptive=False, target_ess=0.5, max_steps=1000)
    >>> out = run(jax.random.key(1), params, path, target, 64, kernels, settings)
    >>> out.log_w.shape, out.trace.beta.shape
    ((64,), (8,))
"""

from mcd_cli.smc import adaptation, base, diagnostics, loop, segments, sharding, state, step, tempering
from mcd_cli.smc.adaptation import ADAPT_RATE, MIN_VARIANCE, build_refine, initial_refine_params, refine_population
from mcd_cli.smc.base import (
    advance, init_state, initial_population, maybe_refine, maybe_resample, no_refine, resample_population, reweight,
)
from mcd_cli.smc.diagnostics import (
    STATIONARITY_MOVES, STATIONARITY_TEMPERATURES, move_correlation, stationarity, stationarity_moves,
)
from mcd_cli.smc.loop import run, run_adaptive, run_fixed, run_replay, run_tempered
from mcd_cli.smc.sharding import on_every_device, replicate, shard
from mcd_cli.smc.state import (
    FixedTuning, Kernels, Population, Resampler, Settings, SMCKernel, SMCOutput, StepInfo, Tempering, Trace,
    ess_fraction, normalised, take,
)
from mcd_cli.smc.tempering import BISECTION_STEPS, ESS_ROUNDING, conditional_ess, next_beta

__all__ = [
    # modules
    "adaptation", "base", "diagnostics", "loop", "segments", "sharding", "state", "step", "tempering",
    # adaptation
    "ADAPT_RATE", "MIN_VARIANCE", "build_refine", "initial_refine_params", "refine_population",
    # base: the contract's machinery
    "advance", "init_state", "initial_population", "maybe_refine", "maybe_resample", "no_refine",
    "resample_population", "reweight",
    # diagnostics
    "STATIONARITY_MOVES", "STATIONARITY_TEMPERATURES", "move_correlation", "stationarity", "stationarity_moves",
    # loop
    "run", "run_adaptive", "run_fixed", "run_replay", "run_tempered",
    # sharding
    "on_every_device", "replicate", "shard",
    # state
    "FixedTuning", "Kernels", "Population", "Resampler", "Settings", "SMCKernel", "SMCOutput", "StepInfo",
    "Tempering", "Trace", "ess_fraction", "normalised", "take",
    # tempering
    "BISECTION_STEPS", "ESS_ROUNDING", "conditional_ess", "next_beta",
]
