"""`mcd compare`: a grid of estimators on one target, or the Bayes factors of several models.

`mcd compare TARGET --sampler ula,uha ...` runs every combination of the list-valued options on one
target and prints one table in the paper's layout. `mcd compare A B [C ...]` estimates every target
with the same settings (or from `--load A.npz,B.npz`), model i with the root key
`fold_in(key(seed), i)`, and prints log Ẑ per model with the Bayes factors of `mcd_cli.stats.comparison`.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from mcd_cli import record as record_, report, run
from mcd_cli.stats import comparison
from mcd_cli.cli import output as out
from mcd_cli.cli import settings
from mcd_cli.targets.conditional import ConditionalTarget
from mcd_cli.cli.app import app
from mcd_cli.policy import Policy, execute as execute_policy
from mcd_cli.cli.options import SAMPLER, SMC, TRAINING, in_panel, option, takes
from mcd_cli.config import SamplerConfig
from mcd_cli.runtime.devices import is_primary
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


def _grid_axis(*decls: str, what: str, e_g: str) -> Any:
    """A comma-separated list of one `SamplerConfig` field's values: an axis of the grid."""
    default = getattr(SamplerConfig, decls[0].lstrip("-"))
    return option(str, *decls, panel=SAMPLER, help=f"Comma-separated {what}, e.g. {e_g}. (default: {default})")


# compare reads these options its own way: several targets, and lists to make a grid of.
_LISTS = {
    "target": Annotated[
        Optional[list[str]],
        typer.Argument(
            help="One target (a grid of estimators), or several (a .py or .yaml file, a bundled name): "
            "the Bayes factors of the models.",
            metavar="TARGET",
            show_default=False,
        ),
    ],
    "sampler": _grid_axis("--sampler", "-s", what="forward kernels", e_g=",".join(registry.FORWARD)),
    "backward": _grid_axis("--backward", "-B", what="backward kernels", e_g=",".join(registry.BACKWARD)),
    "steps": _grid_axis("--steps", "-K", what="step counts", e_g="64,256"),
    "load": option(
        str, "--load", panel=TRAINING,
        help="With several targets: comma-separated parameter files saved with `mcd estimate --save`, one per "
        "target in order; training is skipped.",
    ),
}
# The options of one run that a grid or a comparison does not take: conditional targets, the SMC
# method (a grid keeps the library's importance sampling; models run the default policy unless an
# option fixes the method), saving and resuming, the keys of one model or stage, posterior draws.
_NOT_TAKEN = (
    "data_index", "schedule", "amortise", "save", "checkpoint", "checkpoint_every", "resume", "model_index", "stage",
    "train_stage", "posterior",
    *in_panel(SMC),
)


@app.command()
@takes(skip=_NOT_TAKEN, **_LISTS)
def compare(ctx: typer.Context, **given: Any) -> None:
    """Run a grid of estimators on one TARGET, or compare several models by their Bayes factors.

    Examples: mcd compare gmm8 --sampler ula,uha --backward ais,mcd --steps 64,256 --repeats 3;
    mcd compare model_a.py model_b.py --backward ais --iterations 0
    """
    values = settings.resolve(ctx, given)
    targets = _targets(values.get("target"))
    if len(targets) > 1:
        _compare_models(targets, values)
        return
    values["target"] = targets[0] if targets else None
    steering = settings.policy_options(given)
    if steering:
        raise UsageError(
            f"--{steering[0].replace('_', '-')} steers the default policy of `mcd compare A B ...`; a grid of "
            "estimators on one target runs exactly the settings given"
        )
    if values.get("load") is not None:
        raise UsageError(
            "--load in compare needs several targets (one file per target); for one target use "
            "mcd estimate TARGET --load FILE"
        )
    forwards = _split(values.get("sampler"), "sampler", _kernel_name(registry.FORWARD), ", ".join(registry.FORWARD))
    backwards = _split(values.get("backward"), "backward", _kernel_name(registry.BACKWARD), ", ".join(registry.BACKWARD))
    steps_list = _split(values.get("steps"), "steps", _steps_value, "positive integers")
    settings.positive(values, "batch_size", "samples", "repeats", "hidden")
    with settings.precision(bool(values["x64"])):
        loaded = settings.load_target(values.get("target"), values["param"], values.get("model"), values.get("data"))
        if isinstance(loaded.target, ConditionalTarget):
            raise UsageError(
                f"'{loaded.target.name}' is a conditional target (one log Z per datum), which compare does not "
                "take; run `mcd estimate` once per setting (see benchmarks/run.py vae for a table)"
            )
        plans = []
        for s in forwards:
            for b in backwards:
                for k in steps_list:
                    cell = {**values, "sampler": s, "backward": b, "steps": k}
                    sconf, tconf = settings.build_configs(cell, loaded.target.dim)
                    plans.append(settings.run_plan(loaded, sconf, tconf, values))
        records = _run_all(plans, values)
        if records is None:
            return
        if not values.get("json") and is_primary():
            report.stdout_console().print(report.compare_table(records))
        out.warn_after(records, values)
        out.plot_compare(values, records)
        out.strict(values, records)


def _run_all(
    plans: list[run.RunPlan], values: dict, kind: Optional[str] = None, policy: Optional[Policy] = None,
) -> Optional[list[dict]]:
    """Validates every plan, then runs them in turn (nothing with --dry-run: None), each by the
    default `policy` where one is given: each record, of `kind` where given, is appended to --output
    and, with --json, printed as it comes."""
    available = run.available_memory()
    for plan in plans:
        run.validate(plan, available=available)
    out.check_plot(values)
    out.warn_before(plans, values)
    if values["dry_run"]:
        out.dry_run(plans, values, policy)
        return None
    records = []
    with out.progress(values) as progress, settings.sigterm_as_interrupt():
        for plan in plans:
            result = run.execute(plan, progress) if policy is None else execute_policy(plan, policy, progress)
            record = (result if kind is None else dataclasses.replace(result, kind=kind)).as_dict()
            out.append(values, record)
            if values.get("json") and is_primary():
                print(report.to_json(record), flush=True)
            records.append(record)
    return records


def _share(policy: Optional[Policy], models: int) -> Optional[Policy]:
    """Each model's policy: the same standard error to reach, an equal share of --time-limit."""
    if policy is None or policy.time_limit is None:
        return policy
    return dataclasses.replace(policy, time_limit=policy.time_limit / models)


def _targets(value: Any) -> list[str]:
    """The TARGET arguments (or the --config file's `target`: one name or a list)."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


_LIST_OPTIONS = ("sampler", "backward", "steps")


def _model_names(targets: list[str]) -> list[str]:
    """Short names for the models: the file stem (or bundled name), made unique by position."""
    stems = [Path(t).stem if t != "-" else "stdin" for t in targets]
    return [s if stems.count(s) == 1 else f"{s}#{i}" for i, s in enumerate(stems)]


def _compare_models(targets: list[str], values: dict) -> None:
    """`mcd compare A B [C ...]`: every model with the same settings, then its Bayes factors. With no
    option that fixes the method, each model runs the default policy (`mcd_cli.policy`), as `mcd
    estimate` does, with its own keys (`model_index`)."""
    for name in _LIST_OPTIONS:
        value = values.get(name)
        if value is not None and "," in str(value):
            raise UsageError(
                f"--{name} {value}: several targets are compared with one setting; give one value, "
                "or compare estimators on one target at a time"
            )
    if "-" in targets:
        raise UsageError("'-' (a target on stdin) cannot be one of several targets; save the YAML to a file and name the file")
    loads: list[Optional[Path]] = [None] * len(targets)
    if values.get("load") is not None:
        files = [f.strip() for f in str(values["load"]).split(",") if f.strip()]
        if len(files) != len(targets):
            raise UsageError(
                f"--load has {len(files)} file(s) for {len(targets)} targets; give one file per target, "
                "in order: --load A.npz,B.npz"
            )
        loads = [Path(f) for f in files]
    kernels = {"sampler": registry.FORWARD, "backward": registry.BACKWARD}
    for name, table in kernels.items():
        if values.get(name) is not None and values[name] not in table:
            raise UsageError(f"--{name}: {values[name]!r} is not one of {', '.join(table)}")
    if values.get("steps") is not None:
        values["steps"] = _split(values["steps"], "steps", _steps_value, "positive integers")[0]
    settings.positive(values, "batch_size", "samples", "repeats", "hidden")
    names = _model_names(targets)
    with settings.precision(bool(values["x64"])):
        plans = []
        for i, (spec, load) in enumerate(zip(targets, loads)):
            cell = dict(values)
            loaded = settings.load_target(spec, values["param"], values.get("model"), values.get("data"))
            saved = None
            if load is not None:
                saved = run.read_saved(load, loaded.target)
                for name in settings.SAMPLER_FIELDS:
                    if values.get(name) is None:
                        cell[name] = getattr(saved.sconf, name)
            sconf, tconf = settings.build_configs(cell, loaded.target.dim)
            plan = settings.run_plan(loaded, sconf, tconf, cell, load=load, saved=saved)
            plans.append(dataclasses.replace(plan, model_index=i))
        records = _run_all(plans, values, kind="model", policy=_share(values.get("policy"), len(targets)))
    if records is None:
        return
    result = comparison.from_records(records, names)
    summary = record_.comparison_record(result, records, records[0]["seed"])
    out.append(values, summary)
    if values.get("json") and is_primary():
        print(report.to_json(summary), flush=True)
    elif is_primary():
        report.stdout_console(width=150).print(report.bayes_factor_table(records, result))
    out.warn_after(records, values)
    if not values.get("quiet") and is_primary():
        for line in result.warnings:
            print(f"warning: {line}", file=sys.stderr)
    out.plot_compare(values, records, names, result)
    out.strict(values, records)
