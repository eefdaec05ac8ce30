"""Every command-line option, declared once, grouped into help panels.

`OPTIONS` maps a parameter name to its `Annotated` type, in the order the help lists them; a
command takes them by name through `takes` and receives their values as keyword arguments.
Defaults are None ("the library's default", resolved in `cli.settings`) so that an explicit flag,
a --config value and a --preset can be told apart; on/off switches default to off.

Every command takes --quiet and --debug, and --json when it prints a result, so that scripts can
pass the same flags to any command; an option of one name is the same option wherever it is taken
(`mcd compare` reads a few as lists: `cli.compare`). `tests/test_cli_consistency.py` walks them.

The choices come from the library's tables (the kernel registry, `objectives.OBJECTIVES`,
`config`) and the defaults a help text states from the library's own values, so the help cannot
drift from what runs.
"""

from __future__ import annotations

import enum
import inspect
import typing
from pathlib import Path
from typing import Annotated, Any, Callable, Collection, Iterable, Optional, TypeVar

import typer

from mcd_cli.config import (
    COVARIANCES, INIT_METHODS, MAX_DEFAULT_HIDDEN, PRESETS, REFINE_EVERY, REFINE_TUNING, RESAMPLING, SCHEDULES,
    TRAIN_WITH, SamplerConfig, TrainConfig, hidden_for,
)
from mcd_cli.kernels import registry
from mcd_cli.policy import DEFAULT_MAX_SE
from mcd_cli.train.objectives import OBJECTIVES
from mcd_cli.run import (
    ADAPTIVE_REFINE_STEPS, DEFAULT_POPULATIONS, DEFAULT_SAMPLES, MIN_DEFAULT_POPULATION, POPULATION_PER_DIM,
    SMC_REFINE, SMC_REFINE_STEPS, SMC_RESAMPLE, RunPlan, auto_batch_size, auto_unroll,
)
from mcd_cli.targets.numpyro_model import DEFAULT_MODEL

TARGET, SAMPLER, TRAINING, OUTPUT, RUN = "Target", "Sampler", "Training", "Output", "Run control"
DEVICES = "Devices and clusters"
SMC = "Sequential Monte Carlo"

_S = SamplerConfig()
_T = TrainConfig()
# The command line's own default: a library run saves no periodic checkpoints
# (`RunPlan.checkpoint_every` 0); --checkpoint DIR asks for one this often.
DEFAULT_CHECKPOINT_EVERY = 100


def choices(name: str, values: Iterable[str]) -> type[enum.Enum]:
    """A `str` Enum whose members are `values` (typer lists and checks them as the choices)."""
    return enum.Enum(name, {value: value for value in values}, type=str)


def either(values: Iterable[str]) -> str:
    """`a, b or c`: a list of choices in a help text.

    Example:
        >>> either(("none", "mala", "hmc"))
        'none, mala or hmc'
    """
    *rest, last = values
    return f"{', '.join(rest)} or {last}" if rest else last


def option(kind: Any, *decls: str, panel: str, help: str) -> Any:
    """The `Annotated` type of an option in the help panel `panel`, whose help text states its default.

    A plain `bool` is an on/off switch (default off); any other `kind` is optional (default None:
    not given), `Optional[bool]` being a pair of flags such as --remat/--no-remat.
    """
    info = typer.Option(*decls, help=help, show_default=False, rich_help_panel=panel)
    return Annotated[kind if kind is bool else Optional[kind], info]


Preset = choices("Preset", PRESETS)
Sampler = choices("Sampler", registry.FORWARD)
Backward = choices("Backward", registry.BACKWARD)
Refine = choices("Refine", ("none", *registry.REFINE))
Loss = choices("Loss", OBJECTIVES)
TrainWith = choices("TrainWith", TRAIN_WITH)
InitMethod = choices("InitMethod", INIT_METHODS)
InitCov = choices("InitCov", COVARIANCES)
Schedule = choices("Schedule", SCHEDULES)
Resampling = choices("Resampling", RESAMPLING)
RefineEvery = choices("RefineEvery", REFINE_EVERY)
RefineTuning = choices("RefineTuning", REFINE_TUNING)

_PAPER = PRESETS["paper"]
_SMALLEST_HIDDEN = hidden_for(1)
_SCHEDULE = "learned" if _S.learn_schedule else "linear"

OPTIONS: dict[str, Any] = {
    "target": Annotated[
        Optional[str],
        typer.Argument(
            help="A target: a .py or .yaml file, a bundled target's name (see `mcd targets`), or - to "
            "read a YAML target from stdin.",
            show_default=False,
        ),
    ],
    # Target -------------------------------------------------------------------------------------
    "param": option(
        list[str], "--param", "-p", panel=TARGET, help="Target parameter key=value (repeatable), e.g. --param dim=50."
    ),
    "model": option(
        str, "--model", panel=TARGET,
        help="The model in a .py target file: a NumPyro model function or a PyMC model object. "
        f"(default: {DEFAULT_MODEL})",
    ),
    "data": option(
        Path, "--data", panel=TARGET,
        help="Named arrays (.npz, .csv with a header row, or .json) bound to the target's data arguments by name: "
        "a NumPyro model's keyword arguments or a PyMC model's pm.Data containers, or a conditional target's "
        "data set (the array named data, or the only one; one datum per row).",
    ),
    "data_index": option(
        str, "--data-index", panel=TARGET,
        help="Conditional targets: estimate only the data i:j (Python slice rules; i:, :j or one index). "
        "(default: all)",
    ),
    # Sampler ------------------------------------------------------------------------------------
    "sampler": option(
        Sampler, "--sampler", "-s", panel=SAMPLER,
        help="Forward kernel of the paper's MCD: ula (Langevin) or uha (Hamiltonian). With it or --steps the run "
        "trains MCD kernels (--backward mcd unless given) and estimates with them inside SMC. "
        f"(default: {_S.sampler} when the method is fixed)",
    ),
    "backward": option(
        Backward, "--backward", "-B", panel=SAMPLER,
        help="Backward kernel: mcd (learned score) or ais (the forward kernel's reversal, untrained). "
        f"(default: {_S.backward} when the method is fixed)",
    ),
    "steps": option(
        int, "--steps", "-K", panel=SAMPLER,
        help=f"Annealing steps K of the forward kernels (--sampler). (default: {_S.steps} when the method is fixed)",
    ),
    "hidden": option(
        int, "--hidden", panel=SAMPLER,
        help="Width d_h of the score network (MCD); keep it at least the target's dimension. (default: the dimension "
        f"rounded up to a multiple of {_SMALLEST_HIDDEN}, between {_SMALLEST_HIDDEN} and {MAX_DEFAULT_HIDDEN})",
    ),
    "learn_schedule": option(
        Optional[bool], "--learn-schedule/--fixed-schedule", panel=SAMPLER,
        help=f"Learn the annealing schedule β (else linear). (default: {'learn' if _S.learn_schedule else 'fixed'})",
    ),
    "schedule": option(
        Schedule, "--schedule", panel=SAMPLER,
        help="Annealing schedule β: linear (β_k = k/K), learned (trained with the kernels, from linear), tempered "
        "(learned, starting where a run of adaptive tempered SMC put its temperatures), or adaptive (tempered "
        "SMC: β chosen from the particles for --target-ess, moves by --refine; needs --refine mala|hmc, refuses "
        f"--steps). --learn-schedule/--fixed-schedule are aliases of learned/linear. (default: {_SCHEDULE})",
    ),
    "init": option(
        InitMethod, "--init", panel=SAMPLER,
        help="Initial distribution: auto (the target's own when it declares one, else vi), target (the target's "
        "own, or N(0, I)), laplace (a Gaussian at the mode), vi (a mean-field Gaussian fitted by the ELBO), "
        "prior (a NumPyro or PyMC model's prior) or flow (auto's start, then an autoregressive flow fitted by VI, "
        "through which the target is sampled: for funnels, where one step size cannot suit every region; the "
        f"default policy turns it on when moves get stuck). (default: {_S.init})",
    ),
    "init_cov": option(
        InitCov, "--init-cov", panel=SAMPLER,
        help="With --init laplace: diag, or full (the target is whitened by the Laplace covariance). "
        f"(default: {_S.init_cov})",
    ),
    "step_size": option(
        str, "--step-size", panel=SAMPLER,
        help="Initial step sizes: auto (per step, from the curvature along the path, by a short curvature run; capped "
        f"at {_S.max_step_size:g}) or a number (every step). They are learned either way. (default: auto)",
    ),
    "unroll": option(
        int, "--unroll", panel=SAMPLER,
        help="Annealing steps fused per iteration of the compiled loop: faster on a GPU, longer to compile. "
        f"(default: {auto_unroll('cpu')} on a CPU, {auto_unroll('gpu')} on a GPU)",
    ),
    # Training -----------------------------------------------------------------------------------
    "iterations": option(
        str, "--iterations", "-n", panel=TRAINING,
        help="Training iterations (0: no training), or auto: stop once the ELBO stops improving beyond its noise, "
        f"at most --max-iterations. (default: {'auto' if _T.stop == 'plateau' else _T.iterations})",
    ),
    "max_iterations": option(
        int, "--max-iterations", panel=TRAINING, help=f"The cap of --iterations auto. (default: {_T.iterations})"
    ),
    "loss": option(
        Loss, "--loss", panel=TRAINING,
        help="Training objective: elbo (backpropagates through the trajectories) or logvar (variance of the log "
        f"weights on fixed trajectories; ULA kernels only). (default: {_T.objective})",
    ),
    "train_with": option(
        TrainWith, "--train-with", panel=TRAINING,
        help="How training simulates its batch: is (independent particles, the paper's importance sampler) or smc "
        "(one population resampled when its ESS/N falls below --resample, the loss summed over the segments between "
        f"resamplings, no gradient through a resampling; needs --resample > 0). (default: {_T.train_with})",
    ),
    "batch_size": option(
        str, "--batch-size", "-b", panel=TRAINING,
        help=f"Particles per training step, or auto: {auto_batch_size('cpu')} on a CPU, {auto_batch_size('gpu')} "
        "on a GPU. (default: auto)",
    ),
    "lr": option(float, "--lr", panel=TRAINING, help=f"Adam learning rate. (default: {_T.lr:g})"),
    "remat": option(
        Optional[bool], "--remat/--no-remat", panel=TRAINING,
        help="Recompute the trajectory in the backward pass: memory O(√K) instead of O(K), slower.",
    ),
    "amortise": option(
        Optional[bool], "--amortise/--separate", panel=TRAINING,
        help="Conditional targets: train one sampler for all the data, its score network conditioned on the datum "
        "(amortise), or a separate run per datum. Either fixes the method: no default policy. (default: the "
        "default policy, untrained; with a method option, the file's `amortise`, else separate)",
    ),
    "save": option(Path, "--save", panel=TRAINING, help="Save the trained parameters to this file (.npz)."),
    "load": option(Path, "--load", panel=TRAINING, help="Load trained parameters saved with --save and skip training."),
    "checkpoint": option(
        Path, "--checkpoint", panel=TRAINING,
        help="Save the training state in this directory every --checkpoint-every iterations (a conditional "
        "target also logs each finished datum there).",
    ),
    "checkpoint_every": option(
        int, "--checkpoint-every", panel=TRAINING,
        help=f"Iterations between checkpoints. (default: {DEFAULT_CHECKPOINT_EVERY})",
    ),
    "resume": option(
        bool, "--resume", panel=TRAINING,
        help="Continue from the checkpoint in --checkpoint DIR, if there is one (a conditional target skips the "
        "data already estimated).",
    ),
    # Sequential Monte Carlo ---------------------------------------------------------------------
    "resample": option(
        float, "--resample", panel=SMC,
        help="Resample the particles when ESS/N falls below this fraction (0: never, plain importance sampling, "
        f"the paper's estimator). (default: {SMC_RESAMPLE:g}; {_PAPER['resample']:g} with --preset paper)",
    ),
    "resampling": option(
        Resampling, "--resampling", panel=SMC,
        help=f"Resampling scheme: {either(RESAMPLING)} (lower variance, but no single-run standard error). "
        f"(default: {_S.resampling})",
    ),
    "refine": option(
        Refine, "--refine", panel=SMC,
        help=f"Metropolis-corrected move that refines the particles at each β: {either(Refine.__members__)}. "
        f"(default: {SMC_REFINE} when the run resamples or tempers adaptively, else none)",
    ),
    "refine_steps": option(
        int, "--refine-steps", panel=SMC,
        help=f"Moves per refinement. (default: {SMC_REFINE_STEPS}; {ADAPTIVE_REFINE_STEPS} with --schedule adaptive)",
    ),
    "leapfrog": option(
        int, "--leapfrog", panel=SMC, help=f"Leapfrog steps per HMC move (--refine hmc). (default: {_S.leapfrog})"
    ),
    "refine_every": option(
        RefineEvery, "--refine-every", panel=SMC,
        help=f"Refine after each resampling, or after every step. (default: {_S.refine_every}; adaptive: every step)",
    ),
    "refine_tuning": option(
        RefineTuning, "--refine-tuning", panel=SMC,
        help="How the refinement's step size and mass (and adaptive tempering's temperatures) are chosen: pilot "
        "(adapted on a tuning population with its own random numbers, then frozen with its resampling steps, the "
        "temperatures replayed: the estimate stays unbiased whatever the kernels) or particles (adapted from each population's own particles "
        f"as it runs: one population cheaper, biased). (default: {_S.refine_tuning})",
    ),
    "target_ess": option(
        float, "--target-ess", panel=SMC,
        help=f"--schedule adaptive: the conditional ESS/N each new β aims at. (default: {_S.target_ess:g})",
    ),
    "max_steps": option(
        int, "--max-steps", panel=SMC,
        help=f"--schedule adaptive: the most tempering steps before the run fails. (default: {_S.max_steps})",
    ),
    "particles": option(
        int, "--particles", panel=SMC,
        help="SMC population size: --samples particles run as independent populations of this size, merged by "
        "averaging Ẑ (bounds memory; 4 or more give a standard error from their spread). (default: --samples / "
        f"{DEFAULT_POPULATIONS} when that is at least {MIN_DEFAULT_POPULATION} and {POPULATION_PER_DIM} per dimension)",
    ),
    # Run control --------------------------------------------------------------------------------
    "samples": option(
        int, "--samples", "-N", panel=RUN, help=f"Importance samples for the estimate. (default: {DEFAULT_SAMPLES})"
    ),
    "seed": option(int, "--seed", panel=RUN, help=f"Root random seed. (default: {RunPlan.seed})"),
    "model_index": option(
        int, "--model-index", panel=RUN,
        help="Derive the keys as model I of `mcd compare A B ...` does (root key fold_in(key(seed), I)), to "
        "reproduce that model alone. (default: none, root key key(seed))",
    ),
    "stage": option(
        int, "--stage", panel=RUN,
        help="Derive the keys as stage S of the default policy does (a record's config names it), to reproduce "
        "that stage alone. (default: none)",
    ),
    "train_stage": option(
        int, "--train-stage", panel=RUN,
        help="With --stage: train with the keys of this stage, as a policy's final run reuses its pilot's trained "
        "kernels (a record's config names it). (default: --stage)",
    ),
    "repeats": option(
        int, "--repeats", "-r", panel=RUN,
        help=f"Independent runs (seeds); reports mean ± standard error. (default: {RunPlan.repeats})",
    ),
    "preset": option(
        Preset, "--preset", panel=RUN,
        help=f"Named settings: default (CPU, minutes) or paper (d_h = {_PAPER['hidden']}, long training; GPU).",
    ),
    "config": option(
        Path, "--config", "-c", panel=RUN,
        help="YAML (or JSON) file of settings: option names, any sampler/training field, and 'target'; explicit "
        "flags win. A record's .config reproduces its run.",
    ),
    # Output -------------------------------------------------------------------------------------
    "json": option(bool, "--json", panel=OUTPUT, help="Print only JSON (one object per line) on stdout."),
    "output": option(
        Path, "--output", "-o", panel=OUTPUT,
        help="Append one JSON line per run to this file (safe for concurrent jobs).",
    ),
    "plot": option(
        Path, "--plot", panel=OUTPUT,
        help="Write a figure of the run to this file (.png, .svg or .pdf; needs matplotlib: pip install "
        "'mcd-cli\\[plot]').",
    ),
    "posterior": option(
        Path, "--posterior", panel=OUTPUT,
        help="Write the final SMC populations as posterior draws to this file: .nc (ArviZ InferenceData; needs "
        "pip install 'mcd-cli\\[posterior]') or .npz (numpy). Each population, resampled to equal weights, is one "
        "chain, in the target's own variables (a NumPyro or PyMC model's constrained variables, else x); the "
        "estimate, its "
        "verdict and the settings are its attributes. Approximate draws: as good as the verdict. Needs SMC.",
    ),
    "strict": option(
        bool, "--strict", panel=OUTPUT,
        help="Exit with status 3 when an estimate's verdict is unreliable (after its record is written).",
    ),
    "quiet": option(
        bool, "--quiet", "-q", panel=OUTPUT,
        help="No progress bars or warnings on stderr (results and errors still print).",
    ),
    "x64": option(bool, "--x64", panel=RUN, help="Compute in float64 (slower; default float32)."),
    "dry_run": option(
        bool, "--dry-run", panel=RUN, help="Check the target, options, files and memory, then exit without running."
    ),
    # Devices and clusters -----------------------------------------------------------------------
    "devices": option(
        str, "--devices", panel=DEVICES,
        help="Devices to shard the particles over: all, or N (the first N of each process); batch and chunk sizes "
        "are rounded up to a multiple of the device count. (default: all)",
    ),
    "distributed": option(
        bool, "--distributed", panel=DEVICES,
        help="Join a multi-process run through jax.distributed (detected under SLURM and Open MPI, or "
        "--coordinator/--num-processes/--process-id); process 0 writes the outputs.",
    ),
    "coordinator": option(
        str, "--coordinator", panel=DEVICES, help="With --distributed: HOST:PORT where process 0 listens."
    ),
    "num_processes": option(
        int, "--num-processes", panel=DEVICES, help="With --distributed: how many processes take part."
    ),
    "process_id": option(
        int, "--process-id", panel=DEVICES, help="With --distributed: this process's index, 0 … N−1."
    ),
    "max_se": option(
        float, "--max-se", panel=RUN,
        help="The standard error (nats) the default policy sizes its final run for (at most 8 × --samples "
        "particles, or with --time-limit as many as the time left allows); with explicit method options it is not "
        f"used. (default: {DEFAULT_MAX_SE:g})",
    ),
    "time_limit": option(
        str, "--time-limit", panel=RUN,
        help="Wall time the default policy may take, e.g. 90s, 10m, 2h; it stops escalating when the next stage "
        "would not fit and reports the stages that finished; the final run grows towards --max-se as far as the "
        "time left allows. (default: none; the ladder's length bounds the run)",
    ),
    "learn": option(
        bool, "--learn", panel=RUN,
        help="With --time-limit: where adaptive SMC's pilots end short (not ok, or tails too heavy for its margin), "
        "spend half the time to spare learning MCD kernels, used when their pilot is ok. Off by default: on "
        "brownian_motion at ten minutes they were not measurably more accurate than adaptive SMC and less often ok "
        "(docs/method.md, \"The default policy\").",
    ),
    "debug": option(bool, "--debug", panel=RUN, help="Show the traceback when something fails."),
}


# Options that choose the estimation method: any of them given (by flag, --config or --preset) fixes
# the method and turns `mcd estimate`'s default policy off (`mcd_cli.policy`); sizes (--samples,
# --particles, --seed) do not. Naming the paper's kernels (--sampler, --steps) runs them, trained.
# Their help says so.
METHOD_OPTIONS = (
    "sampler", "steps", "backward", "iterations", "max_iterations", "resample", "refine", "refine_steps", "schedule", "learn_schedule",
    "target_ess", "load", "stage", "train_stage", "train_with", "refine_tuning",
)
_FIXES = "Giving it fixes the method: no default policy."
# Options of the kernels' training that the default policy, which trains nothing, has no use for:
# refused beside it (with --learn, whose learning pilot trains kernels, all but --save are used).
TRAINING_ONLY = ("hidden", "step_size", "unroll", "loss", "batch_size", "lr", "remat", "save")


def _says_it_fixes_the_method(name: str) -> None:
    info = typing.get_args(OPTIONS[name])[1]
    text = info.help
    cut = text.rfind(" (default:")
    info.help = f"{text[:cut]} {_FIXES}{text[cut:]}" if cut >= 0 else f"{text} {_FIXES}"


for _name in METHOD_OPTIONS:
    _says_it_fixes_the_method(_name)


def in_panel(panel: str) -> tuple[str, ...]:
    """The names of the options listed in the help panel `panel`."""
    return tuple(
        name for name, annotation in OPTIONS.items()
        if getattr(typing.get_args(annotation)[1], "rich_help_panel", None) == panel
    )


F = TypeVar("F", bound=Callable[..., Any])


def takes(*names: str, skip: Collection[str] = (), **replaced: Any) -> Callable[[F], F]:
    """Declares the options a command takes, by name.

    The signature typer reads becomes the command's other parameters (a `typer.Context`) followed
    by the options `names` (all of `OPTIONS` when none are named) less `skip`, in the order given,
    each with its `Annotated` type from `OPTIONS`, or from `replaced` where the command reads an
    option its own way. typer passes their values as keyword arguments: to parameters of the same
    name, or into the command's `**given`.

    Example:
        >>> @takes("json", "debug")
        ... def command(json, debug): ...
        >>> list(inspect.signature(command).parameters)
        ['json', 'debug']
    """
    table = {**OPTIONS, **replaced}
    chosen = [name for name in (names or OPTIONS) if name not in skip]

    def decorate(command: F) -> F:
        own = [
            p for p in inspect.signature(command, eval_str=True).parameters.values()
            if p.kind is not inspect.Parameter.VAR_KEYWORD and p.name not in chosen
        ]
        options = [_keyword(name, table[name]) for name in chosen]
        command.__signature__ = inspect.Signature(own + options)  # type: ignore[attr-defined]
        return command

    return decorate


def _keyword(name: str, kind: Any) -> inspect.Parameter:
    """A keyword parameter of the `Annotated` type `kind`, off by default for an on/off switch (a
    plain `bool`), else None: "not given"."""
    default = False if typing.get_args(kind)[0] is bool else None
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=default)
