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
    frozen: Optional[Any] = None,
) -> smc.SMCOutput:
    """One SMC run of `num` particles of the configured sampler: `smc.run` with the configuration's
    kernels, settings and annealed path (the other arguments as there)."""
    kernels, settings = smc_kernels(sconf)
    path = annealing.annealed_path(params.path, target, sconf)
    return smc.run(key, params, path, target, num, kernels, settings, adapt, context, sharding, frozen)


@functools.lru_cache(maxsize=16)
def compiled(
    target: Target, sconf: SamplerConfig, num: int, adapt: bool = True, sharding: Optional[NamedSharding] = None
) -> Callable:
    """`run_smc` compiled for one target, configuration and population size: `(params, key[, frozen])
    -> SMCOutput`, `frozen` an earlier run's `SMCOutput.tuning`: the refinement's parameters and
    resampling steps of a fixed schedule (`smc.run_fixed`), or adaptive tempering's choices, replayed
    (`smc.run_replay`).

    With `sharding` (`num` a multiple of its device count) the population is split over its mesh
    and the output is replicated, so every process holds it.
    """

    def one(params, key, frozen=None):
        return smc.replicate(run_smc(key, params, target, sconf, num, adapt, sharding=sharding, frozen=frozen), sharding)

    return jax.jit(one)
