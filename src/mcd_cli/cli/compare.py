"""`mcd compare`: a grid of estimators on one target, in one table of the paper's layout."""

from __future__ import annotations

from typing import Annotated, Any, Callable, Optional

import typer

from mcd_cli import report, run
from mcd_cli.cli import output as out
from mcd_cli.cli import settings
from mcd_cli.cli.app import app
from mcd_cli.cli.options import (
    SAMPLER,
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
    LrOpt,
    OutputOpt,
    ParamOpt,
    ModelOpt,
    DataOpt,
    PresetOpt,
    QuietOpt,
    RematOpt,
    RepeatsOpt,
    SamplesOpt,
    SeedOpt,
    StrictOpt,
    TargetArg,
    X64Opt,
    _S,
)
from mcd_cli.devices import is_primary
from mcd_cli.errors import UsageError
from mcd_cli.kernels import registry


def _split(value: Any, name: str, convert: Callable[[str], Any], choices: str) -> list:
    if value is None:
        return [None]
    items = [v.strip() for v in str(value).split(",") if v.strip()]
    if not items:
        example = "64,256" if name == "steps" else ",".join(list(choices.split(", "))[:2])
        raise UsageError(f"--{name} needs at least one value, e.g. --{name} {example}")
    out_ = []
    for item in items:
        try:
            out_.append(convert(item))
        except ValueError:
            raise UsageError(f"--{name}: {item!r} is not one of {choices}; give a comma-separated list") from None
    return list(dict.fromkeys(out_))


def _steps_value(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _kernel_name(table: dict) -> Callable[[str], str]:
    def convert(text: str) -> str:
        if text not in table:
            raise ValueError(text)
        return text

    return convert


@app.command()
def compare(
    ctx: typer.Context,
    target: TargetArg = None,
    param: ParamOpt = None,
    model: ModelOpt = None,
    data: DataOpt = None,
    sampler: Annotated[
        Optional[str],
        typer.Option(
            "--sampler", "-s", help=f"Comma-separated forward kernels, e.g. {','.join(registry.FORWARD)}. (default: {_S.sampler})",
            show_default=False, rich_help_panel=SAMPLER,
        ),
    ] = None,
    backward: Annotated[
        Optional[str],
        typer.Option(
            "--backward", "-B", help=f"Comma-separated backward kernels, e.g. {','.join(registry.BACKWARD)}. (default: {_S.backward})",
            show_default=False, rich_help_panel=SAMPLER,
        ),
    ] = None,
    steps: Annotated[
        Optional[str],
        typer.Option(
            "--steps", "-K", help=f"Comma-separated step counts, e.g. 64,256. (default: {_S.steps})",
            show_default=False, rich_help_panel=SAMPLER,
        ),
    ] = None,
    hidden: HiddenOpt = None,
    learn_schedule: LearnScheduleOpt = None,
    init: InitOpt = None,
    init_cov: InitCovOpt = None,
    iterations: IterationsOpt = None,
    batch_size: BatchOpt = None,
    lr: LrOpt = None,
    remat: RematOpt = None,
    samples: SamplesOpt = None,
    seed: SeedOpt = None,
    repeats: RepeatsOpt = None,
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
    output: OutputOpt = None,
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
    """Run a grid of estimators on TARGET and print one table in the paper's layout.

    Example: mcd compare gmm8 --sampler ula,uha --backward ais,mcd --steps 64,256 --repeats 3
    """
    given = dict(locals())
    given.pop("ctx")
    values = settings.resolve(ctx, given)
    forwards = _split(values.get("sampler"), "sampler", _kernel_name(registry.FORWARD), ", ".join(registry.FORWARD))
    backwards = _split(values.get("backward"), "backward", _kernel_name(registry.BACKWARD), ", ".join(registry.BACKWARD))
    steps_list = _split(values.get("steps"), "steps", _steps_value, "positive integers")
    settings.positive(values, "batch_size", "samples", "repeats", "hidden")
    with settings.precision(bool(values["x64"])):
        loaded = settings.load_target(values.get("target"), values["param"], values.get("model"), values.get("data"))
        plans = []
        for s in forwards:
            for b in backwards:
                for k in steps_list:
                    cell = {**values, "sampler": s, "backward": b, "steps": k}
                    sconf, tconf = settings.build_configs(cell, loaded.target.dim)
                    plans.append(settings.run_plan(loaded, sconf, tconf, values))
        available = run.available_memory()
        for plan in plans:
            run.validate(plan, available=available)
        out.warn_before(plans, values)
        if values["dry_run"]:
            out.dry_run(plans, values)
            return
        records = []
        primary = is_primary()
        with out.progress(values) as progress, settings.sigterm_as_interrupt():
            for plan in plans:
                record = run.execute(plan, progress).as_dict()
                out.append(values, record)
                if values.get("json") and primary:
                    print(report.to_json(record), flush=True)
                records.append(record)
        if not values.get("json") and primary:
            report.stdout_console().print(report.compare_table(records))
        out.warn_after(records, values)
        out.strict(values, records)
