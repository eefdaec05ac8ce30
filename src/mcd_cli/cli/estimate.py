"""`mcd estimate`: fit the estimator to a target, then estimate log Z."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mcd_cli import report, run
from mcd_cli.cli import output as out
from mcd_cli.cli import settings
from mcd_cli.cli.app import app
from mcd_cli.cli.options import (
    SAMPLER,
    Backward,
    BatchOpt,
    ConfigOpt,
    DebugOpt,
    DevicesOpt,
    DistributedOpt,
    CoordinatorOpt,
    NumProcessesOpt,
    ProcessIdOpt,
    DryRunOpt,
    HiddenOpt,
    InitCovOpt,
    InitOpt,
    IterationsOpt,
    JsonOpt,
    LearnScheduleOpt,
    LossOpt,
    LrOpt,
    MaxIterationsOpt,
    OutputOpt,
    ParamOpt,
    ModelOpt,
    ModelIndexOpt,
    DataOpt,
    PlotOpt,
    PresetOpt,
    QuietOpt,
    RematOpt,
    RepeatsOpt,
    Sampler,
    SamplesOpt,
    SeedOpt,
    StepSizeOpt,
    StrictOpt,
    TargetArg,
    UnrollOpt,
    X64Opt,
    DEFAULT_CHECKPOINT_EVERY,
    TRAINING,
    _S,
)


@app.command()
def estimate(
    ctx: typer.Context,
    target: TargetArg = None,
    param: ParamOpt = None,
    model: ModelOpt = None,
    data: DataOpt = None,
    sampler: Annotated[
        Optional[Sampler],
        typer.Option(
            "--sampler", "-s", help=f"Forward kernel: ula (Langevin) or uha (Hamiltonian). (default: {_S.sampler})",
            show_default=False, rich_help_panel=SAMPLER,
        ),
    ] = None,
    backward: Annotated[
        Optional[Backward],
        typer.Option(
            "--backward", "-B", help=f"Backward kernel: mcd (learned score) or ais. (default: {_S.backward})",
            show_default=False, rich_help_panel=SAMPLER,
        ),
    ] = None,
    steps: Annotated[
        Optional[int],
        typer.Option("--steps", "-K", help=f"Annealing steps K. (default: {_S.steps})", show_default=False, rich_help_panel=SAMPLER),
    ] = None,
    hidden: HiddenOpt = None,
    learn_schedule: LearnScheduleOpt = None,
    init: InitOpt = None,
    init_cov: InitCovOpt = None,
    step_size: StepSizeOpt = None,
    unroll: UnrollOpt = None,
    iterations: IterationsOpt = None,
    max_iterations: MaxIterationsOpt = None,
    loss: LossOpt = None,
    batch_size: BatchOpt = None,
    lr: LrOpt = None,
    remat: RematOpt = None,
    save: Annotated[
        Optional[Path],
        typer.Option("--save", help="Save the trained parameters to this file (.npz).", show_default=False, rich_help_panel=TRAINING),
    ] = None,
    load: Annotated[
        Optional[Path],
        typer.Option(
            "--load", help="Load trained parameters saved with --save and skip training.", show_default=False,
            rich_help_panel=TRAINING,
        ),
    ] = None,
    checkpoint: Annotated[
        Optional[Path],
        typer.Option(
            "--checkpoint", help="Save the training state in this directory every --checkpoint-every iterations.",
            show_default=False, rich_help_panel=TRAINING,
        ),
    ] = None,
    checkpoint_every: Annotated[
        Optional[int],
        typer.Option(
            "--checkpoint-every", help=f"Iterations between checkpoints. (default: {DEFAULT_CHECKPOINT_EVERY})",
            show_default=False, rich_help_panel=TRAINING,
        ),
    ] = None,
    resume: Annotated[
        bool,
        typer.Option("--resume", help="Continue from the checkpoint in --checkpoint DIR, if there is one.", rich_help_panel=TRAINING),
    ] = False,
    samples: SamplesOpt = None,
    seed: SeedOpt = None,
    model_index: ModelIndexOpt = None,
    repeats: RepeatsOpt = None,
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
    output: OutputOpt = None,
    plot: PlotOpt = None,
    strict: StrictOpt = False,
    quiet: QuietOpt = False,
    x64: X64Opt = False,
    dry_run: DryRunOpt = False,
    devices: DevicesOpt = None,
    distributed: DistributedOpt = False,
    coordinator: CoordinatorOpt = None,
    num_processes: NumProcessesOpt = None,
    process_id: ProcessIdOpt = None,
    debug: DebugOpt = False,
) -> None:
    """Fit the estimator to TARGET, then estimate log Z.

    Example: mcd estimate gmm8 --steps 64 --sampler uha --json
    """
    given = dict(locals())
    given.pop("ctx")
    values = settings.resolve(ctx, given)
    with settings.precision(bool(values["x64"])):
        plan = _plan(values)
        run.validate(plan)
        out.check_plot(values)
        out.warn_before([plan], values)
        if values["dry_run"]:
            out.dry_run([plan], values)
            return
        with out.progress(values) as progress, settings.sigterm_as_interrupt():
            result = run.execute(plan, progress)
        record = result.as_dict()
        out.append(values, record)
        curve = result.elbo_history[0] if result.elbo_history else ()
        out.emit([record], values, report.estimate_table(record, curve))
        out.plot_estimate(values, record, result)
        out.strict(values, [record])


def _plan(values: dict) -> run.RunPlan:
    settings.positive(values, "steps", "batch_size", "samples", "repeats", "hidden")
    loaded = settings.load_target(values.get("target"), values["param"], values.get("model"), values.get("data"))
    saved = None
    if values.get("load") is not None:
        saved = run.read_saved(values["load"], loaded.target)
        for name in settings.SAMPLER_FIELDS:
            if values.get(name) is None:
                values[name] = getattr(saved.sconf, name)
    sconf, tconf = settings.build_configs(values, loaded.target.dim)
    return settings.run_plan(
        loaded,
        sconf,
        tconf,
        values,
        load=values.get("load"),
        saved=saved,
        save=values.get("save"),
        checkpoint_dir=values.get("checkpoint"),
        checkpoint_every=settings.checkpoint_every(values),
        resume=bool(values.get("resume")),
    )
