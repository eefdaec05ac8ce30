"""Settings of a run: the sampler (what is computed) and the training (how it is fitted).

Both are frozen, hashable dataclasses so that a `SamplerConfig` can be a static argument of `jax.jit`.
`PRESETS` holds named bundles of settings (`--preset` on the command line).
"""

from __future__ import annotations

import dataclasses
from typing import Optional


MAX_DEFAULT_HIDDEN = 512
INIT_METHODS = ("auto", "target", "laplace", "vi", "prior", "flow")
STEP_SIZE_RULES = ("pilot", "fixed")
STOP_RULES = ("plateau", "fixed")
# What training minimises (`TrainConfig.objective`): the names of `train.objectives.OBJECTIVES`.
OBJECTIVES = ("elbo", "logvar")
TRAIN_WITH = ("is", "smc")  # how training simulates its batch (`TrainConfig.train_with`)
# Multinomial first, the default: the single-run (genealogy) standard error is only valid with it.
RESAMPLING = ("multinomial", "systematic", "stratified")
REFINE_EVERY = ("resample", "step")
# How the refinement's step size and preconditioner are chosen (`SamplerConfig.refine_tuning`).
REFINE_TUNING = ("particles", "pilot")
# The annealing schedules β a run can take: `learn_schedule` (learned) or `adaptive`, else linear.
SCHEDULES = ("linear", "learned", "tempered", "adaptive")
# Where a learned schedule starts (`SamplerConfig.schedule_start`): linear, or where a run of
# adaptive tempered SMC put its temperatures (`run.start`).
SCHEDULE_STARTS = ("linear", "tempered")
COVARIANCES = ("diag", "full")  # of a Laplace initial distribution (`init_cov`)
# Settings of the estimation only (SMC): a sampler trained or saved without them may be estimated
# with them (`--load`, `--resume`).
ESTIMATION_FIELDS = (
    "resample", "resampling", "refine", "refine_steps", "leapfrog", "refine_every", "adaptive",
    "target_ess", "max_steps", "refine_tuning",
)


def hidden_for(dim: int) -> int:
    """The command line's default score-network width for a `dim`-dimensional target.

    The network's output spans at most `hidden` directions, so the width follows the dimension:
    the smallest multiple of 32 that is at least `dim`, at least 32 and at most 512.

    Example:
        >>> [hidden_for(d) for d in (2, 20, 33, 200, 5000)]
        [32, 32, 64, 224, 512]
    """
    return min(MAX_DEFAULT_HIDDEN, max(32, -(-dim // 32) * 32))


def _one_of(name: str, value: str, allowed) -> None:
    """Raises ValueError unless `value` is one of `allowed` (a field's choices)."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class SamplerConfig:
    """What the sampler is.

    Attributes:
        sampler: the forward kernel, a name in `kernels.FORWARD` ("ula" or "uha").
        backward: the backward kernel, a name in `kernels.BACKWARD` ("ais" or "mcd").
        steps: number of annealing steps K.
        hidden: width d_h of the score network (MCD only). The command line's default is
            `hidden_for(dim)`, which follows the target's dimension.
        time_dim: width d_t of the step-index embedding (MCD only).
        blocks: residual blocks of the score network (MCD only).
        learn_schedule: learn the annealing schedule β (else linear β_k = k/K).
        schedule_start: where a learned schedule starts: "linear", or "tempered" (where a run
            of adaptive tempered SMC put its temperatures, interpolated to the K steps; `run.start`).
        learn_mass: learn the diagonal mass matrix (UHA only).
        step_size: how the step sizes δ_k start: "pilot" (the name `--step-size auto` keeps in a record: per step,
            from the curvature along the path measured by a short curvature run:
            `path.step_sizes.curvature_step_sizes`) or "fixed"
            (`init_step_size` at every step). Either way they are then learned.
        init_step_size: step size every step starts from with `step_size="fixed"` (must be below
            `max_step_size`).
        max_step_size: upper bound of the learned step sizes (the paper's 0.25).
        init_damping: initial momentum damping h ∈ (0.01, 0.99) (UHA only).
        remat: rematerialise the scan over steps in nested segments (memory O(√K) when training).
        init: the initial distribution π0: "auto" (the target's own when it declares one, else
            VI from several starting points: `init.fit_initial`), "target" (the
            target's, declared or the N(0, I) fallback), "laplace" (a Gaussian at the mode),
            "vi" (a mean-field Gaussian fitted by the ELBO), "prior" (a NumPyro model's prior,
            mapped to the unconstrained space) or "flow" (auto's start, then a flow fitted by VI
            through which the target is sampled: `init.flow`); fitted once per run.
        init_cov: "diag" or "full" (Laplace only: a full covariance, applied by whitening the target).
        context_dim: size of the datum's features the score network is conditioned on (amortised
            MCD over the data of a conditional target); 0: unconditional.
        score_linear: MCD: add a per-step diagonal linear term to the score network's output,
            `Σ_j a_kj ⊙ z_j` over the input's blocks of the output's size (zero at the start, so
            the warm start is unchanged); the paper's network has none (`score.py`).
        learn_backward_variance: MCD: learn one factor per step on the backward kernel's variance
            (starting at 1, so the warm start is unchanged); the paper keeps the AIS reversal's
            (`kernels/mcd.py`).
        unroll: annealing steps fused per iteration of the compiled loop (`lax.scan(unroll=)`);
            the command line picks it by device (`run.auto_unroll`).
        resample: SMC: resample when ESS/N falls below this fraction (0: never, importance sampling).
        resampling: the resampling scheme, a name in `resampling.SCHEMES`.
        refine: the Metropolis-corrected move run on the population ("none", "mala" or "hmc").
        refine_steps: moves per refinement.
        leapfrog: leapfrog steps per HMC move.
        refine_every: "resample" (refine after each resampling) or "step" (after every step).
        refine_tuning: how the refinement's step size and preconditioner (and, with adaptive
            tempering, the temperatures) are chosen: "pilot" (the name a record keeps: adapted on a tuning population with
            its own key, then frozen for the estimating populations, which refine after its
            resampling steps and, with adaptive tempering, replay its temperatures: Ẑ exactly
            unbiased; `run.estimate.tuned_refinement`) or
            "particles" (adapted from each population's own particles as it runs: a bias in Ẑ).
        adaptive: adaptive tempering: β chosen from the particles, the refinement moves replace
            the forward kernels (needs `refine`).
        target_ess: adaptive tempering: the conditional ESS/N each step's β aims at.
        max_steps: adaptive tempering: the most steps before the run is declared failed.
    """

    sampler: str = "ula"
    backward: str = "mcd"
    steps: int = 64
    hidden: int = 32
    time_dim: int = 16
    blocks: int = 3
    learn_schedule: bool = False
    schedule_start: str = "linear"
    learn_mass: bool = True
    step_size: str = "fixed"
    init_step_size: float = 0.05
    max_step_size: float = 0.25
    init_damping: float = 0.9
    remat: bool = False
    init: str = "auto"
    init_cov: str = "diag"
    context_dim: int = 0
    score_linear: bool = False
    learn_backward_variance: bool = False
    unroll: int = 1
    resample: float = 0.0
    resampling: str = "multinomial"
    refine: str = "none"
    refine_steps: int = 1
    # HMC refinement runs in coordinates whitened by the particles' variance, where a quarter of the
    # Gaussian period, π/2, gives an independent draw: 3 steps of the adapted ε ≈ 0.45 come close.
    # 10 steps (εL ≈ 4.5, jittered over 2.3-6.9, around π and 2π, where a Gaussian move returns to
    # its start or its mirror image) left adaptive SMC on gauss_narrow at d = 200 13-19 nats high.
    leapfrog: int = 3
    refine_every: str = "resample"
    refine_tuning: str = "pilot"
    adaptive: bool = False
    target_ess: float = 0.5
    max_steps: int = 1000

    def __post_init__(self):
        from mcd_cli.kernels import registry  # the registry imports this module's users

        registry.estimator(self.sampler, self.backward)  # ValueError naming the choices
        if int(self.steps) < 1:
            raise ValueError(f"steps must be at least 1, got {self.steps}")
        if not 0.0 < self.init_step_size < self.max_step_size:
            raise ValueError(
                f"init_step_size must lie in (0, {self.max_step_size}), got {self.init_step_size}"
            )
        if not 0.01 < self.init_damping < 0.99:
            raise ValueError(f"init_damping must lie in (0.01, 0.99), got {self.init_damping}")
        _one_of("init", self.init, INIT_METHODS)
        _one_of("step_size", self.step_size, STEP_SIZE_RULES)
        if int(self.unroll) < 1:
            raise ValueError(f"unroll must be at least 1, got {self.unroll}")
        if self.init_cov not in COVARIANCES:
            raise ValueError(f"init_cov must be diag or full, got {self.init_cov!r}")
        if int(self.context_dim) < 0:
            raise ValueError(f"context_dim must be >= 0, got {self.context_dim}")
        for name in ("learn_schedule", "learn_mass", "remat", "score_linear", "learn_backward_variance", "adaptive"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        for name in ("hidden", "time_dim", "blocks", "refine_steps", "leapfrog", "max_steps"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if not 0.0 <= self.resample <= 1.0:
            raise ValueError(f"resample must lie in [0, 1] (an ESS fraction; 0: off), got {self.resample}")
        _one_of("resampling", self.resampling, RESAMPLING)
        if self.refine != "none" and self.refine not in registry.REFINE:
            raise ValueError(f"refine must be one of none, {', '.join(registry.REFINE)}, got {self.refine!r}")
        _one_of("refine_every", self.refine_every, REFINE_EVERY)
        _one_of("refine_tuning", self.refine_tuning, REFINE_TUNING)
        if not 0.0 < self.target_ess < 1.0:
            raise ValueError(f"target_ess must lie in (0, 1), got {self.target_ess}")
        if self.adaptive and self.refine == "none":
            raise ValueError(
                "refine must be mala or hmc with the adaptive schedule (its moves are the refinement "
                "kernel's); add --refine hmc"
            )
        _one_of("schedule_start", self.schedule_start, SCHEDULE_STARTS)
        if self.schedule_start == "tempered" and not self.learn_schedule:
            raise ValueError("a tempered schedule start needs a learned schedule (learn_schedule)")
        if self.adaptive and self.learn_schedule:
            raise ValueError("learn_schedule and the adaptive schedule exclude each other; choose one --schedule")

    @property
    def smc(self) -> bool:
        """Whether the estimate is made by SMC (resampling, refinement or adaptive tempering)."""
        return self.resample > 0.0 or self.refine != "none" or self.adaptive

    @property
    def method(self) -> str:
        """What estimates: "adaptive tempered SMC" (no annealing kernels run: the refinement moves
        carry the particles), "SMC" (the annealing kernels inside SMC) or "importance sampling"."""
        if self.adaptive:
            return "adaptive tempered SMC"
        return "SMC" if self.smc else "importance sampling"

    @property
    def moves(self) -> Optional[dict]:
        """The Metropolis-corrected moves SMC runs (`refine`), per temperature with adaptive tempering,
        else after each resampling (or step, `refine_every`); None without."""
        if self.refine == "none":
            return None
        every = "temperature" if self.adaptive else self.refine_every
        moves = {"kernel": self.refine, "moves": int(self.refine_steps), "every": every}
        return moves | ({"leapfrog": int(self.leapfrog)} if self.refine == "hmc" else {})

    @property
    def schedule(self) -> str:
        """`linear`, `learned`, `tempered` or `adaptive` (the `--schedule` value)."""
        if self.adaptive:
            return "adaptive"
        if self.learn_schedule:
            return "tempered" if self.schedule_start == "tempered" else "learned"
        return "linear"
    @property
    def label(self) -> str:
        """The estimator's name: the paper's ULA, UHA, ULA-MCD or UHA-MCD; `+SMC` when its kernels
        run inside SMC; `SMC-HMC` (or `SMC-MALA`) for adaptive tempered SMC."""
        from mcd_cli.kernels import registry

        if self.adaptive:
            return f"SMC-{self.refine.upper()}"
        label = registry.estimator(self.sampler, self.backward).label
        return label + "+SMC" if self.smc else label


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """How the sampler's parameters are fitted (an objective of the batch's log weights, with Adam).

    Attributes:
        iterations: number of optimiser updates (0 = no training); the cap with `stop="plateau"`.
        stop: "fixed" (run `iterations` updates) or "plateau" (stop earlier once the ELBO has
            stopped improving beyond its noise: `stopping.plateaued`).
        plateau_window: `W`, the window of the plateau rule (updates).
        chunk: updates per call to the device (`lax.scan`); the host syncs only between chunks.
        objective: what training minimises, a name in `objectives.OBJECTIVES` ("elbo": the negative
            ELBO; "logvar": the variance of the log weights).
        batch_size: particles per ELBO estimate.
        lr: Adam learning rate.
        clip_norm: gradients are clipped to this global norm.
        max_bad_steps: consecutive non-finite updates (each skipped) that trigger a recovery.
        max_recoveries: recoveries (restore last good parameters, halve the learning rate) before
            the run is declared diverged.
        snapshot_every: iterations between snapshots of known-good parameters used by recovery.
        batch_backward: score a learned backward kernel's K transitions in one batched call after
            the forward scan (False: inside the scan, step by step; the same values and gradients,
            slower on an accelerator; `annealing.log_weight`).
        train_with: how the batch is simulated in training: "is", independent particles (the
            paper's importance sampler), or "smc", one population resampled when its ESS/N falls
            below the sampler's `resample`, the objective summed over the segments between
            resamplings (`smc.segments`; needs `resample > 0`).
        max_seconds: training also stops at the end of the first chunk that ends after this many
            seconds of wall time (None: no time bound; the default policy's learning pilot sets it).
        min_updates: with `max_seconds`, training stops early, as too slow (`errors.TooSlow`), once
            its rate says it will not make this many updates by then (`train.stopping`).
    """

    iterations: int = 1000
    stop: str = "fixed"
    plateau_window: int = 100
    chunk: int = 50
    objective: str = "elbo"
    batch_size: int = 128
    lr: float = 1e-3
    clip_norm: float = 10.0
    max_bad_steps: int = 20
    max_recoveries: int = 5
    snapshot_every: int = 50
    batch_backward: bool = True
    train_with: str = "is"
    max_seconds: Optional[float] = None
    min_updates: Optional[int] = None

    def __post_init__(self):
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise ValueError(f"max_seconds must be a positive number of seconds, got {self.max_seconds}")
        if self.min_updates is not None and int(self.min_updates) < 1:
            raise ValueError(f"min_updates must be at least 1, got {self.min_updates}")
        _one_of("train_with", self.train_with, TRAIN_WITH)
        if int(self.iterations) < 0:
            raise ValueError(f"iterations must be >= 0, got {self.iterations}")
        _one_of("objective", self.objective, OBJECTIVES)
        _one_of("stop", self.stop, STOP_RULES)
        for name in ("plateau_window", "chunk"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if int(self.batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if not (self.lr > 0 and self.lr < float("inf")):
            raise ValueError(f"lr must be a positive finite number, got {self.lr}")
        if not self.clip_norm > 0:
            raise ValueError(f"clip_norm must be positive, got {self.clip_norm}")


# Named bundles of settings. "default" fits a 2-core CPU in about two minutes at d = 20;
# "paper" is the paper's appendix (d_h = 512, long training, importance sampling), meant for a GPU.
PRESETS: dict[str, dict] = {
    "default": {},
    "paper": {"hidden": 512, "iterations": 100_000, "batch_size": 128, "lr": 1e-3, "resample": 0.0},
}
