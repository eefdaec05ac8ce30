"""The population sampler of a `SamplerConfig`: its kernels looked up by name, and the run.

`mcd_cli.smc` takes kernels as values and builds its `SMCKernel` from them (`init(key, num)`,
`step(key, population) -> (population, info)`: `smc.step.build_kernel` on a fixed schedule,
`smc.tempering.build_kernel` when adaptive), which `smc.run` loops; this is where the names of the
configuration (`--sampler`, `--backward`, `--refine`, `--resampling`) become those values.

Example:
    >>> from mcd_cli.config import SamplerConfig
    >>> kernels, settings = smc_kernels(SamplerConfig(backward="ais", resample=0.5, refine="hmc"))
    >>> kernels.forward.name, kernels.refine.name, settings.resample, stationarity_moves(SamplerConfig())
    ('ula', 'hmc', 0.5, 20)
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Optional

import jax
from jax.sharding import NamedSharding

from mcd_cli import smc
from mcd_cli.path import annealing
from mcd_cli.smc import resampling
from mcd_cli.config import SamplerConfig
from mcd_cli.kernels import registry
from mcd_cli.targets.base import Target


def smc_kernels(sconf: SamplerConfig) -> tuple[smc.Kernels, smc.Settings]:
    """The configured kernels and the sampler's numbers. Adaptive tempering has no forward or
    backward kernel (its moves are the refinement's); `refine="none"` is no refinement kernel."""
    if sconf.adaptive:
        forward = backward = None
    else:
        est = registry.estimator(sconf.sampler, sconf.backward)
        forward, backward = est.forward, est.backward
    refine = registry.refine(sconf.refine) if sconf.refine != "none" else None
    kernels = smc.Kernels(forward, backward, refine, resampling.scheme(sconf.resampling))
    settings = smc.Settings(
        resample=sconf.resample,
        refine_steps=sconf.refine_steps,
        leapfrog=sconf.leapfrog,
        refine_every_step=sconf.refine_every == "step",
        adaptive=sconf.adaptive,
        target_ess=sconf.target_ess,
        max_steps=sconf.max_steps,
    )
    return kernels, settings


def stationarity_moves(sconf: SamplerConfig) -> int:
    """Extra moves of the stationarity test of a run of `sconf` (`smc.stationarity_moves`)."""
    return smc.stationarity_moves(sconf.refine_steps)


def run_smc(
    key: jax.Array, params: annealing.SamplerParams, target: Target, sconf: SamplerConfig, num: int,
    adapt: bool = True, context: Optional[jax.Array] = None, sharding: Optional[NamedSharding] = None,
    frozen: Optional[Any] = None, aims: Optional[tuple[Any, Any]] = None,
) -> smc.SMCOutput:
    """One SMC run of `num` particles of the configured sampler: `smc.run` with the configuration's
    kernels, settings and annealed path (the other arguments as there). `aims`: adaptive
    tempering's `(target_ess, resample)`, numbers or traced values, in place of `sconf`'s."""
    kernels, settings = smc_kernels(sconf)
    if aims is not None:
        settings = settings._replace(target_ess=aims[0], resample=aims[1])
    path = annealing.annealed_path(params.path, target, sconf)
    return smc.run(key, params, path, target, num, kernels, settings, adapt, context, sharding, frozen)


def program_config(sconf: SamplerConfig) -> SamplerConfig:
    """The configuration a compiled program is built from: `sconf` with adaptive tempering's aims
    (`target_ess`, `resample`, which the program takes as arguments) and the choice of who tunes the
    refinement (`refine_tuning`, the caller's) set to the defaults, so that the default policy's
    efforts that differ only in them (most raises of a pilot, and its final run) share one program:
    one trace, lowering and compilation instead of one per stage (docs/benchmarks.md, "Where a
    default run's time goes"). A fixed schedule's configuration is returned as it is."""
    if not sconf.adaptive:
        return sconf
    default = SamplerConfig()
    return dataclasses.replace(
        sconf, target_ess=default.target_ess, resample=default.resample, refine_tuning=default.refine_tuning
    )


def compiled(
    target: Target, sconf: SamplerConfig, num: int, adapt: bool = True, sharding: Optional[NamedSharding] = None
) -> Callable:
    """`run_smc` compiled for one target, configuration and population size: `(params, key[, frozen])
    -> SMCOutput`, `frozen` an earlier run's `SMCOutput.tuning`: the refinement's parameters and
    resampling steps of a fixed schedule (`smc.run_fixed`), or adaptive tempering's choices, replayed
    (`smc.run_replay`).

    With `sharding` (`num` a multiple of its device count) the population is split over its mesh
    and the output is replicated, so every process holds it. Adaptive tempering's aims are the
    program's arguments (`program_config`): configurations that differ only in them share it. So
    are the target's `constants` (a fitted start's mean and scales): the program is the same for
    every seed, and a later run loads it from the persistent compilation cache.
    """
    program = _program(target, program_config(sconf), num, adapt, sharding)
    aims = (float(sconf.target_ess), float(sconf.resample)) if sconf.adaptive else None
    if aims is None and target.constants is None:
        return program

    def run(params, key, frozen=None):
        return program(params, key, frozen, aims, target.constants)

    return run


@functools.lru_cache(maxsize=16)
def _program(
    target: Target, sconf: SamplerConfig, num: int, adapt: bool, sharding: Optional[NamedSharding]
) -> Callable:
    """`compiled`'s jitted program of `(params, key, frozen=None, aims=None, constants=None)`: the run
    on `target.rebuilt(constants)` (the target's own `constants`, passed as arguments)."""

    def one(params, key, frozen=None, aims=None, constants=None):
        own = target.rebuilt(constants)
        return smc.replicate(
            run_smc(key, params, own, sconf, num, adapt, sharding=sharding, frozen=frozen, aims=aims), sharding
        )

    return jax.jit(one)
