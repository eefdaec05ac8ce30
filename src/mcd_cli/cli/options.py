"""The options `estimate` and `compare` share, declared once, grouped into help panels.

Each option is an `Annotated` type; a command lists the ones it takes. Defaults are None
("the library's default", resolved in `cli.settings`) so that an explicit flag, a --config value
and a --preset can be told apart.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from mcd_cli.config import (
    INIT_METHODS, PRESETS, REFINE_EVERY, RESAMPLING, SamplerConfig, TrainConfig,
)
from mcd_cli.kernels import registry
from mcd_cli.run import ADAPTIVE_REFINE_STEPS, DEFAULT_SAMPLES, SMC_REFINE, SMC_REFINE_STEPS, SMC_RESAMPLE

TARGET, SAMPLER, TRAINING, OUTPUT, RUN = "Target", "Sampler", "Training", "Output", "Run control"
DEVICES = "Devices and clusters"
SMC = "Sequential Monte Carlo"

_S = SamplerConfig()
_T = TrainConfig()
DEFAULT_CHECKPOINT_EVERY = 100

Preset = enum.Enum("Preset", {name: name for name in PRESETS}, type=str)
# Choices from the kernel registry, fixed when the command line is built.
Sampler = enum.Enum("Sampler", {name: name for name in registry.FORWARD}, type=str)
Backward = enum.Enum("Backward", {name: name for name in registry.BACKWARD}, type=str)

TargetArg = Annotated[
    Optional[str],
    typer.Argument(
        help="A target: a .py or .yaml file, a bundled target's name (see `mcd targets`), or - to "
        "read a YAML target from stdin.",
        show_default=False,
    ),
]
ParamOpt = Annotated[
    Optional[list[str]],
    typer.Option(
        "--param", "-p", help="Target parameter key=value (repeatable), e.g. --param dim=50.",
        show_default=False, rich_help_panel=TARGET,
    ),
]
ModelOpt = Annotated[
    Optional[str],
    typer.Option(
        "--model", help="The NumPyro model function in a .py target file. (default: model)",
        show_default=False, rich_help_panel=TARGET,
    ),
]
DataOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--data",
        help="Named arrays (.npz, .csv with a header row, or .json) bound to the target's data "
        "arguments by name: a NumPyro model's keyword arguments, or a conditional target's data set "
        "(the array named data, or the only one; one datum per row).",
        show_default=False, rich_help_panel=TARGET,
    ),
]

DataIndexOpt = Annotated[
    Optional[str],
    typer.Option(
        "--data-index",
        help="Conditional targets: estimate only the data i:j (Python slice rules; i:, :j or one index). "
        "(default: all)",
        show_default=False, rich_help_panel=TARGET,
    ),
]
AmortiseOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--amortise/--separate",
        help="Conditional targets: train one sampler for all the data, its score network conditioned on "
        "the datum (amortise), or a separate run per datum. (default: the file's `amortise`, else separate)",
        show_default=False, rich_help_panel=TRAINING,
    ),
]

# Sampler ------------------------------------------------------------------------------------
HiddenOpt = Annotated[
    Optional[int],
    typer.Option(
        "--hidden",
        help="Width d_h of the score network (MCD); keep it at least the target's dimension. (default: "
        "the dimension rounded up to a multiple of 32, between 32 and 512)",
        show_default=False, rich_help_panel=SAMPLER,
    ),
]
LearnScheduleOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--learn-schedule/--fixed-schedule",
        help=f"Learn the annealing schedule β (else linear). (default: {'learn' if _S.learn_schedule else 'fixed'})",
        show_default=False, rich_help_panel=SAMPLER,
    ),
]
Loss = enum.Enum("Loss", {name: name for name in ("elbo", "logvar")}, type=str)
InitMethod = enum.Enum("InitMethod", {name: name for name in INIT_METHODS}, type=str)
InitOpt = Annotated[
    Optional[InitMethod],
    typer.Option(
        "--init",
        help="Initial distribution: auto (the target's own when it declares one, else vi), target (the "
        "target's own, or N(0, I)), laplace (a Gaussian at the mode), vi (a mean-field Gaussian fitted by "
        "the ELBO) or prior (a NumPyro model's prior). (default: auto)",
        show_default=False, rich_help_panel=SAMPLER,
    ),
]
InitCov = enum.Enum("InitCov", {"diag": "diag", "full": "full"}, type=str)
InitCovOpt = Annotated[
    Optional[InitCov],
    typer.Option(
        "--init-cov",
        help="With --init laplace: diag, or full (the target is whitened by the Laplace covariance). (default: diag)",
        show_default=False, rich_help_panel=SAMPLER,
    ),
]

Schedule = enum.Enum("Schedule", {name: name for name in ("linear", "learned", "adaptive")}, type=str)
ScheduleOpt = Annotated[
    Optional[Schedule],
    typer.Option(
        "--schedule",
        help="Annealing schedule β: linear (β_k = k/K), learned (trained with the kernels), or adaptive "
        "(tempered SMC: β chosen from the particles for --target-ess, moves by --refine; needs "
        "--refine mala|hmc, refuses --steps). --learn-schedule/--fixed-schedule are aliases of "
        "learned/linear. (default: linear)",
        show_default=False, rich_help_panel=SAMPLER,
    ),
]

# Sequential Monte Carlo ---------------------------------------------------------------------
ResampleOpt = Annotated[
    Optional[float],
    typer.Option(
        "--resample",
        help="Resample the particles when ESS/N falls below this fraction (0: never, plain importance "
        f"sampling, the paper's estimator). (default: {SMC_RESAMPLE:g}; 0 with --preset paper)",
        show_default=False, rich_help_panel=SMC,
    ),
]
Resampling = enum.Enum("Resampling", {name: name for name in RESAMPLING}, type=str)
ResamplingOpt = Annotated[
    Optional[Resampling],
    typer.Option(
        "--resampling",
        help="Resampling scheme: multinomial, systematic or stratified (lower variance, but no single-run "
        f"standard error). (default: {_S.resampling})",
        show_default=False, rich_help_panel=SMC,
    ),
]
Refine = enum.Enum("Refine", {name: name for name in ("none", *registry.REFINE)}, type=str)
RefineOpt = Annotated[
    Optional[Refine],
    typer.Option(
        "--refine",
        help="Metropolis-corrected move that refines the particles at each β: none, mala or hmc. "
        f"(default: {SMC_REFINE} when the run resamples or tempers adaptively, else none)",
        show_default=False, rich_help_panel=SMC,
    ),
]
RefineStepsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--refine-steps",
        help=f"Moves per refinement. (default: {SMC_REFINE_STEPS}; {ADAPTIVE_REFINE_STEPS} with --schedule adaptive)",
        show_default=False, rich_help_panel=SMC,
    ),
]
LeapfrogOpt = Annotated[
    Optional[int],
    typer.Option(
        "--leapfrog", help=f"Leapfrog steps per HMC move (--refine hmc). (default: {_S.leapfrog})",
        show_default=False, rich_help_panel=SMC,
    ),
]
RefineEvery = enum.Enum("RefineEvery", {name: name for name in REFINE_EVERY}, type=str)
RefineEveryOpt = Annotated[
    Optional[RefineEvery],
    typer.Option(
        "--refine-every",
        help="Refine after each resampling, or after every step. (default: resample; adaptive: every step)",
        show_default=False, rich_help_panel=SMC,
    ),
]
TargetEssOpt = Annotated[
    Optional[float],
    typer.Option(
        "--target-ess",
        help=f"--schedule adaptive: the conditional ESS/N each new β aims at. (default: {_S.target_ess:g})",
        show_default=False, rich_help_panel=SMC,
    ),
]
MaxStepsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--max-steps",
        help=f"--schedule adaptive: the most tempering steps before the run fails. (default: {_S.max_steps})",
        show_default=False, rich_help_panel=SMC,
    ),
]
ParticlesOpt = Annotated[
    Optional[int],
    typer.Option(
        "--particles",
        help="SMC population size: --samples particles run as independent populations of this size, "
        "merged by averaging Ẑ (bounds memory; 4 or more give a standard error from their spread). "
        "(default: --samples / 8 when that is at least 128 and 10 per dimension)",
        show_default=False, rich_help_panel=SMC,
    ),
]

StepSizeOpt = Annotated[
    Optional[str],
    typer.Option(
        "--step-size",
        help="Initial step sizes: auto (per step, from the curvature along the path, by a short pilot run; "
        f"capped at {_S.max_step_size:g}) or a number (every step). They are learned either way. (default: auto)",
        show_default=False, rich_help_panel=SAMPLER,
    ),
]
UnrollOpt = Annotated[
    Optional[int],
    typer.Option(
        "--unroll",
        help="Annealing steps fused per iteration of the compiled loop: faster on a GPU, longer to compile. "
        "(default: 1 on a CPU, 4 on a GPU)",
        show_default=False, rich_help_panel=SAMPLER,
    ),
]

# Training -----------------------------------------------------------------------------------
IterationsOpt = Annotated[
    Optional[str],
    typer.Option(
        "--iterations", "-n",
        help="Training iterations (0: no training), or auto: stop once the ELBO stops improving beyond its "
        f"noise, at most --max-iterations. (default: {'auto' if _T.stop == 'plateau' else _T.iterations})",
        show_default=False, rich_help_panel=TRAINING,
    ),
]
MaxIterationsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--max-iterations",
        help=f"The cap of --iterations auto. (default: {_T.iterations})",
        show_default=False, rich_help_panel=TRAINING,
    ),
]
LossOpt = Annotated[
    Optional[Loss],
    typer.Option(
        "--loss",
        help="Training objective: elbo (backpropagates through the trajectories) or logvar (variance of the "
        f"log weights on fixed trajectories; ULA kernels only). (default: {_T.objective})",
        show_default=False, rich_help_panel=TRAINING,
    ),
]
BatchOpt = Annotated[
    Optional[str],
    typer.Option(
        "--batch-size", "-b",
        help="Particles per training step, or auto: 128 on a CPU, 1024 on a GPU. (default: auto)",
        show_default=False, rich_help_panel=TRAINING,
    ),
]
LrOpt = Annotated[
    Optional[float],
    typer.Option("--lr", help=f"Adam learning rate. (default: {_T.lr:g})", show_default=False, rich_help_panel=TRAINING),
]
RematOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--remat/--no-remat",
        help="Recompute the trajectory in the backward pass: memory O(√K) instead of O(K), slower.",
        show_default=False, rich_help_panel=TRAINING,
    ),
]

# Run control --------------------------------------------------------------------------------
SamplesOpt = Annotated[
    Optional[int],
    typer.Option(
        "--samples", "-N", help=f"Importance samples for the estimate. (default: {DEFAULT_SAMPLES})",
        show_default=False, rich_help_panel=RUN,
    ),
]
SeedOpt = Annotated[
    Optional[int], typer.Option("--seed", help="Root random seed. (default: 0)", show_default=False, rich_help_panel=RUN)
]
RepeatsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--repeats", "-r", help="Independent runs (seeds); reports mean ± standard error. (default: 1)",
        show_default=False, rich_help_panel=RUN,
    ),
]
PresetOpt = Annotated[
    Optional[Preset],
    typer.Option(
        "--preset", help="Named settings: default (CPU, minutes) or paper (d_h = 512, long training; GPU).",
        show_default=False, rich_help_panel=RUN,
    ),
]
ConfigOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--config", "-c",
        help="YAML (or JSON) file of settings: option names, any sampler/training field, and 'target'; "
        "explicit flags win. A record's .config reproduces its run.",
        show_default=False, rich_help_panel=RUN,
    ),
]
X64Opt = Annotated[
    bool, typer.Option("--x64", help="Compute in float64 (slower; default float32).", rich_help_panel=RUN)
]
DryRunOpt = Annotated[
    bool,
    typer.Option(
        "--dry-run", help="Check the target, options, files and memory, then exit without running.",
        rich_help_panel=RUN,
    ),
]
ModelIndexOpt = Annotated[
    Optional[int],
    typer.Option(
        "--model-index",
        help="Derive the keys as model I of `mcd compare A B ...` does (root key fold_in(key(seed), I)), "
        "to reproduce that model alone. (default: none, root key key(seed))",
        show_default=False, rich_help_panel=RUN,
    ),
]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show the traceback when something fails.", rich_help_panel=RUN)]

# Devices and clusters -----------------------------------------------------------------------
DevicesOpt = Annotated[
    Optional[str],
    typer.Option(
        "--devices",
        help="Devices to shard the particles over: all, or N (the first N of each process); batch and "
        "chunk sizes are rounded up to a multiple of the device count. (default: all)",
        show_default=False, rich_help_panel=DEVICES,
    ),
]
DistributedOpt = Annotated[
    bool,
    typer.Option(
        "--distributed",
        help="Join a multi-process run through jax.distributed (detected under SLURM and Open MPI, or "
        "--coordinator/--num-processes/--process-id); process 0 writes the outputs.",
        rich_help_panel=DEVICES,
    ),
]
CoordinatorOpt = Annotated[
    Optional[str],
    typer.Option(
        "--coordinator", help="With --distributed: HOST:PORT where process 0 listens.", show_default=False,
        rich_help_panel=DEVICES,
    ),
]
NumProcessesOpt = Annotated[
    Optional[int],
    typer.Option(
        "--num-processes", help="With --distributed: how many processes take part.", show_default=False,
        rich_help_panel=DEVICES,
    ),
]
ProcessIdOpt = Annotated[
    Optional[int],
    typer.Option(
        "--process-id", help="With --distributed: this process's index, 0 … N−1.", show_default=False,
        rich_help_panel=DEVICES,
    ),
]

# Output -------------------------------------------------------------------------------------
JsonOpt = Annotated[
    bool, typer.Option("--json", help="Print only JSON (one object per line) on stdout.", rich_help_panel=OUTPUT)
]
OutputOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--output", "-o", help="Append one JSON line per run to this file (safe for concurrent jobs).",
        show_default=False, rich_help_panel=OUTPUT,
    ),
]
StrictOpt = Annotated[
    bool,
    typer.Option(
        "--strict",
        help="Exit with status 3 when an estimate's verdict is unreliable (after its record is written).",
        rich_help_panel=OUTPUT,
    ),
]
QuietOpt = Annotated[
    bool, typer.Option("--quiet", "-q", help="No progress bars or warnings on stderr.", rich_help_panel=OUTPUT)
]
PlotOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--plot",
        help="Write a figure of the run to this file (.png, .svg or .pdf; needs matplotlib: "
        "pip install 'mcd-cli[plot]').",
        show_default=False, rich_help_panel=OUTPUT,
    ),
]
