"""How a run starts: the initial distribution, then the step sizes of the pilot."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Optional

import jax
import numpy as np

from mcd_cli import annealing
from mcd_cli.config import SamplerConfig
from mcd_cli.errors import RunFailed
from mcd_cli.run.plan import RunPlan, root_key

INIT_STREAM = 0x1D1  # fold_in(root key, INIT_STREAM): the key of the initial-distribution fit
PILOT_STREAM = 0x2D2  # fold_in(root key, PILOT_STREAM): the key of the step-size pilot
SCALE_STREAM = 0x2D3  # fold_in(root key, SCALE_STREAM): the key of the pilot's AIS check (`pilot_scale`)
SCALE_SAMPLES = 512  # particles of each untrained ULA-AIS run of the check
SCALE_GAIN = 1.0  # nats of ELBO a halving of the sizes must gain to be taken
SCALE_HALVINGS = 4  # the smallest factor the check can choose is 2**-SCALE_HALVINGS
@dataclasses.dataclass(frozen=True)
class Start:
    """How a run started: the initial distribution chosen and the pilot's step sizes."""

    target: Any  # the target with its initial distribution (whitened for a full covariance)
    method: str  # the initial distribution used: target, auto:target, auto:vi, laplace-diag, ...
    warnings: tuple[str, ...] = ()
    step_sizes: Optional[Any] = None  # δ_1 … δ_K from the pilot (None: fixed or not needed)
    seconds: float = 0.0
    step_scale: Optional[float] = None  # the factor `pilot_scale` applied to the pilot's sizes


def pilot_scale(
    target: Any,
    step_sizes: Any,
    sconf: SamplerConfig,
    key: jax.Array,
    *,
    samples: int = SCALE_SAMPLES,
    gain: float = SCALE_GAIN,
    halvings: int = SCALE_HALVINGS,
) -> float:
    """The factor c ∈ {1, ½, …, 2^-halvings} by which to scale the curvature pilot's step sizes.

    The pilot sees curvature only; a target with kinks (a Laplace density, an L1 penalty) has none
    away from them, so every δ_k goes to the cap, where ULA's departure from invariance is large.
    The untrained ULA-AIS ELBO (mean log weight, `samples` particles, the same key for every c, so
    the particles are paired) measures what the sizes cost: the check halves c while the ELBO
    gains more than `gain` nats and more than 3 standard errors of the paired difference. On a
    smooth target sizes below the stability limit only slow the path down, so halving loses ELBO
    and c stays 1 (the sizes are unchanged); on `laplace` c becomes ¼
    (`benchmarks/results/pilot_scale_cpu.json`). A non-finite ELBO counts as −∞; when no scale
    gives a finite one, c stays 1 and training's own checks take over.
    """
    config = SamplerConfig(
        sampler="ula", backward="ais", steps=sconf.steps, step_size="pilot", max_step_size=sconf.max_step_size,
        unroll=sconf.unroll,
    )
    sizes = np.asarray(step_sizes, dtype=np.float64)

    def log_weights(c: float) -> np.ndarray:
        params = annealing.init_params(jax.random.key(0), target, config, step_sizes=sizes * c)
        return annealing.sample_log_weights(key, params, target, config, num_samples=samples, chunk_size=samples)

    def elbo(w: np.ndarray) -> float:
        value = float(np.mean(w))
        return value if np.isfinite(value) else -math.inf

    c, current = 1.0, log_weights(1.0)
    for _ in range(halvings):
        halved = log_weights(c / 2)
        if elbo(current) == -math.inf:
            better = elbo(halved) > -math.inf
        else:
            diff = halved - current
            se = float(np.std(diff) / math.sqrt(diff.size)) if np.all(np.isfinite(diff)) else math.inf
            better = elbo(halved) - elbo(current) > max(gain, 3 * se)
        if not better:
            break
        c, current = c / 2, halved
    return c if elbo(current) > -math.inf else 1.0


def initial_target(
    target: Any, sconf: SamplerConfig, seed: int, model_index: Optional[int] = None
) -> tuple[Any, str, tuple[str, ...]]:
    """The target with the initial distribution `sconf.init` asks for, its method, and the fit's warnings.

    The fit is made once per run from its own key, so a run that `--load`s parameters fits the
    same distribution as the run that trained them. log Z is unchanged (a full-covariance fit
    whitens the target, adding `log|det L|` to its log density). "auto" keeps a declared initial
    distribution (`Target.initial_declared`) and otherwise fits one by VI
    (`initialization.fit_initial`).
    """
    if sconf.init == "target":
        return target, "target", ()
    key = jax.random.fold_in(root_key(seed, model_index), INIT_STREAM)
    if sconf.init == "auto" and target.initial_declared:
        return target, "auto:target", ()
    if sconf.init == "prior":
        from mcd_cli.targets.numpyro_model import prior_initial

        mean, scale = prior_initial(target, key)
        return target.with_initial(mean=mean, scale=scale), "prior", ()
    from mcd_cli import initialization

    try:
        fit = initialization.fit_initial(
            target, key, sconf.init, cov=sconf.init_cov, explicit_initial=target.initial_declared
        )
    except ValueError as err:
        if sconf.init != "auto":
            raise RunFailed(f"--init {sconf.init} failed: {err}") from None
        # A target whose density is not finite where the fit looks cannot be fitted; the run can
        # still go on from the fallback, and training's own checks take over.
        return target, "auto:target-fallback", (
            f"auto: the VI fit failed ({err}); starting from the target's N(0, I) fallback",
        )
    # A diagonal fit whitens the target by its scales, so the samplers' isotropic steps see unit
    # conditional scales (a diagonal preconditioner); a full one whitens by its Cholesky factor.
    return initialization.apply_initial(target, fit, precondition=True), fit.method, tuple(fit.warnings)


def start(plan: RunPlan, *, pilot: bool = True) -> Start:
    """The initial distribution, then (with `sconf.step_size == "pilot"` and `pilot`) the step sizes.

    The pilot (`initialization.pilot_step_sizes`, its own key) measures the curvature along the
    linear path from the chosen initial distribution to the target and sets δ_k = 0.5 / λ_k,
    capped at `max_step_size`; `pilot_scale` (its own key) then halves the sizes while that buys
    the untrained ULA-AIS ELBO more than a nat (targets with kinks). Training starts from these
    sizes and goes on learning them.
    """
    t0 = time.perf_counter()
    target, method, warnings = initial_target(plan.target, plan.sconf, plan.seed, plan.model_index)
    step_sizes = scale = None
    if pilot and plan.sconf.step_size == "pilot":
        import numpy as np

        from mcd_cli import initialization

        root = root_key(plan.seed, plan.model_index)
        betas = np.linspace(0.0, 1.0, plan.sconf.steps + 1)
        step_sizes = initialization.pilot_step_sizes(
            target, betas, key=jax.random.fold_in(root, PILOT_STREAM), max_step_size=plan.sconf.max_step_size
        )
        scale = pilot_scale(target, step_sizes, plan.sconf, jax.random.fold_in(root, SCALE_STREAM))
        if scale != 1.0:
            step_sizes = step_sizes * scale
    return Start(target, method, warnings, step_sizes, time.perf_counter() - t0, scale)


