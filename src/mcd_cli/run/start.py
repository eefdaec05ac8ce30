"""How a run starts: the initial distribution, a tempered schedule's start, then the initial step sizes."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Optional

import jax
import numpy as np

from mcd_cli.runtime import compile_clock
from mcd_cli.path import annealing
from mcd_cli.config import SamplerConfig
from mcd_cli.errors import RunFailed
from mcd_cli.init import fit_initial
from mcd_cli.path.step_sizes import ais_step_scale, curvature_step_sizes
from mcd_cli.run.defaults import ADAPTIVE_SMC
from mcd_cli.run.plan import RunPlan, root_key
from mcd_cli.run.smc_kernels import compiled
from mcd_cli.init.tails import choose_tails, sided_tails
from mcd_cli.init.tails import describe as tails_suffix
from mcd_cli.targets.base import lifted
from mcd_cli.targets.transforms import apply_initial, heavy_tailed, transported

INIT_STREAM = 0x1D1  # fold_in(root key, INIT_STREAM): the key of the initial-distribution fit
CURVATURE_STREAM = 0x2D2  # fold_in(root key, CURVATURE_STREAM): the key of the curvature run (initial step sizes)
TAILS_STREAM = 0x1D2  # fold_in(root key, TAILS_STREAM): the key of the heavier-tail check (`init.tails`)
SCALE_STREAM = 0x2D3  # fold_in(root key, SCALE_STREAM): the key of the step sizes' AIS check (`ais_step_scale`)
TEMPER_STREAM = 0x2D4  # fold_in(root key, TEMPER_STREAM): the key of a tempered schedule's tempering run
FLOW_STREAM = 0x1D3  # fold_in(root key, FLOW_STREAM): the key of `--init flow`'s fit (`init.flow`)
# Particles of that tempering run: its temperatures follow the conditional ESS, a ratio that hardly moves
# with the number of particles once there are a few hundred.
TEMPER_PARTICLES = 512


@dataclasses.dataclass(frozen=True)
class Start:
    """How a run started: the initial distribution chosen and the initial step sizes."""

    target: Any  # the target with its initial distribution (whitened for a full covariance)
    method: str  # the initial distribution used: target, auto:target, auto:vi, laplace-diag, ...
    warnings: tuple[str, ...] = ()
    step_sizes: Optional[Any] = None  # δ_1 … δ_K from the curvature run (None: fixed or not needed)
    seconds: float = 0.0
    step_scale: Optional[float] = None  # the factor `ais_step_scale` applied to the curvature run's sizes
    betas: Optional[Any] = None  # β_0 … β_K where a tempered schedule starts (None: linear)
    compile_seconds: Optional[float] = None  # of `seconds`, those spent compiling (`runtime.compile_clock`)


def initial_target(
    target: Any, sconf: SamplerConfig, seed: int, model_index: Optional[int] = None
) -> tuple[Any, str, tuple[str, ...]]:
    """The target with the initial distribution `sconf.init` asks for, its method, and the fit's
    warnings; "auto" then gives the start heavier (Tukey-h) tails when they fit the target better
    (`mcd_cli.init.tails`: the target in `u` with `x = μ0 + σ0 ⊙ u exp(h u²/2)`, method `…+tails(h=…)`).
    "flow" is auto's start, then the target transported by a flow fitted from it (`transport`), then
    the same tail check in the flow's variables.
    """
    fitted, method, warnings = _initial_target(target, sconf, seed, model_index)
    if sconf.init == "flow":
        fitted, method, warnings = transport(fitted, method, warnings, seed, model_index)
    elif sconf.init != "auto":
        return fitted, method, warnings
    key = jax.random.fold_in(root_key(seed, model_index), TAILS_STREAM)
    choice = choose_tails(fitted, key)
    if not choice.h:
        return fitted, method, warnings
    upper, lower = sided_tails(choice, fitted.dim)
    return heavy_tailed(fitted, upper, lower), method + tails_suffix(choice), warnings


def transport(
    target: Any, method: str, warnings: tuple[str, ...], seed: int, model_index: Optional[int] = None
) -> tuple[Any, str, tuple[str, ...]]:
    """`target` (with its start) transported by a flow fitted from that start (`init.flow`, its own
    key), method `…+flow(elbo=…)`; the target as it was, with a warning, when the fit fails or does
    not raise the start's ELBO."""
    from mcd_cli.init.flow import choose_scale, fit_flow

    key = jax.random.fold_in(root_key(seed, model_index), FLOW_STREAM)
    try:
        fit = fit_flow(target, key)
    except ValueError as err:
        return target, method, (*warnings, f"flow: the fit failed ({err}); the start stays {method}")
    if not fit.elbo > fit.base_elbo:
        return target, method, (
            *warnings,
            f"flow: the fitted flow's ELBO {fit.elbo:.4g} is not above its start's {fit.base_elbo:.4g}; the start stays {method}",
        )
    # The flow's parameters are the transported target's constants: a compiled program's arguments.
    def build(constants):
        inner, params = constants
        return transported(target.rebuilt(inner), fit.transform_of(params), "transported by a fitted flow")

    moved = lifted(build, (target.constants, fit.params))
    scale, _ = choose_scale(moved, jax.random.fold_in(key, 1))
    moved = moved.with_initial(mean=np.zeros(moved.dim), scale=np.full(moved.dim, scale))
    return moved, f"{method}+flow(elbo={fit.elbo:.3g}, s={scale:g})", warnings


def _initial_target(
    target: Any, sconf: SamplerConfig, seed: int, model_index: Optional[int] = None
) -> tuple[Any, str, tuple[str, ...]]:
    """The target with the initial distribution `sconf.init` asks for, its method, and the fit's warnings.

    The fit is made once per run from its own key, so a run that `--load`s parameters fits the
    same distribution as the run that trained them. log Z is unchanged (a full-covariance fit
    whitens the target, adding `log|det L|` to its log density). "auto" keeps a declared initial
    distribution (`Target.initial_declared`) and otherwise fits one by VI
    (`mcd_cli.init.fit_initial`).
    """
    if sconf.init == "target":
        return target, "target", ()
    key = jax.random.fold_in(root_key(seed, model_index), INIT_STREAM)
    if sconf.init == "flow":  # auto's start, which `transport` then carries further
        sconf = dataclasses.replace(sconf, init="auto")
    if sconf.init == "auto" and target.initial_declared:
        return target, "auto:target", ()
    if sconf.init == "prior":
        from mcd_cli.targets.numpyro_model import prior_initial

        mean, scale = prior_initial(target, key)
        return target.with_initial(mean=mean, scale=scale), "prior", ()
    try:
        fit = fit_initial(
            target, key, sconf.init, cov=sconf.init_cov, explicit_initial=target.initial_declared
        )
    except ValueError as err:
        if sconf.init != "auto":
            raise RunFailed(f"--init {sconf.init} failed: {err}") from None
        # A target whose density is not finite where VI and then Laplace (`init.choose`) look cannot
        # be fitted; the run can still go on from the fallback, and training's own checks take over.
        return target, "auto:target-fallback", (
            f"auto: the start's fits failed ({err}); starting from the target's N(0, I) fallback",
        )
    method = fit.method
    if sconf.init == "auto":
        target, fit, method = _parametrisation(target, fit, key, sconf.init_cov)
    # A diagonal fit whitens the target by its scales, so the samplers' isotropic steps see unit
    # conditional scales (a diagonal preconditioner); a full one whitens by its Cholesky factor.
    return apply_initial(target, fit, precondition=True), method, tuple(fit.warnings)


def _parametrisation(target: Any, fit: Any, key: jax.Array, cov: str) -> tuple[Any, Any, str]:
    """A NumPyro model with hierarchical location-scale sites, in whichever parametrisation,
    centred as written or non-centred (`targets.noncentred`), its start fits better:
    the same fit in both, the higher ELBO kept (both bound the same log Z), method
    `…+noncentred(θ)`. Any other target, and a failed fit, leave `target` and `fit` as they are."""
    from mcd_cli.targets.noncentred import noncentred

    moved = noncentred(target)
    if moved is None:
        return target, fit, fit.method
    other, sites = moved
    try:
        other_fit = fit_initial(other, key, "auto", cov=cov, explicit_initial=False)
    except ValueError:
        return target, fit, fit.method
    if not other_fit.check.elbo > fit.check.elbo:
        return target, fit, fit.method
    return other, other_fit, f"{other_fit.method}+noncentred({','.join(sites)})"


def tempered_betas(target: Any, steps: int, key: jax.Array, num: int = TEMPER_PARTICLES) -> np.ndarray:
    """`β_0 … β_K` where one population of adaptive tempered SMC (the default policy's first effort,
    `ADAPTIVE_SMC`) put its temperatures `β_1 … β_M`, as a function of the step's fraction `j / M`,
    interpolated linearly at `k / K`. Fails (`RunFailed`) when that run does not reach β = 1."""
    sconf = SamplerConfig(**ADAPTIVE_SMC.sampler_fields())
    out = compiled(target, sconf, num)(annealing.init_params(key, target, sconf), key)
    m = int(out.steps)
    reached = np.concatenate([[0.0], np.asarray(out.trace.beta[:m], np.float64)])
    if not reached[-1] >= 1.0:
        raise RunFailed(
            f"--schedule tempered: the adaptive tempered SMC run reached β = {reached[-1]:.4g} in "
            f"{sconf.max_steps} temperatures; use --schedule learned or linear"
        )
    reached[-1] = 1.0
    betas = np.interp(np.arange(steps + 1) / steps, np.arange(m + 1) / m, reached)
    return np.maximum.accumulate(betas)


def start(plan: RunPlan, *, measure_steps: bool = True) -> Start:
    """The initial distribution, then (with `sconf.step_size == "pilot"`, `--step-size auto`, and
    `measure_steps`) the initial step sizes.

    The curvature run (`mcd_cli.path.step_sizes.curvature_step_sizes`, its own key) measures the curvature along the
    path from the chosen initial distribution to the target and sets δ_k = 0.5 / λ_k,
    capped at `max_step_size`; `ais_step_scale` (its own key) then halves the sizes while that buys
    the untrained ULA-AIS ELBO more than a nat (targets with kinks). Training starts from these
    sizes and goes on learning them. The path is linear, or, with `--schedule tempered` (and no
    `--load`), where one population of adaptive tempered SMC put its temperatures (`tempered_betas`,
    its own key), which the learned schedule then starts from.
    """
    t0, began = time.perf_counter(), compile_clock.now()
    target, method, warnings = initial_target(plan.target, plan.sconf, plan.seed, plan.model_index)
    step_sizes = scale = tempered = None
    root = root_key(plan.seed, plan.model_index)
    betas = np.linspace(0.0, 1.0, plan.sconf.steps + 1)
    if plan.sconf.schedule == "tempered" and plan.load is None:
        betas = tempered = tempered_betas(target, plan.sconf.steps, jax.random.fold_in(root, TEMPER_STREAM))
    if measure_steps and plan.sconf.step_size == "pilot":
        step_sizes = curvature_step_sizes(
            target, betas, key=jax.random.fold_in(root, CURVATURE_STREAM), max_step_size=plan.sconf.max_step_size
        )
        scale = ais_step_scale(target, step_sizes, plan.sconf, jax.random.fold_in(root, SCALE_STREAM))
        if scale != 1.0:
            step_sizes = step_sizes * scale
    seconds = time.perf_counter() - t0
    return Start(target, method, warnings, step_sizes, seconds, scale, tempered, compile_clock.compile_seconds(began))


