"""`mcd estimate`: fit the estimator to a target, then estimate log Z."""

from __future__ import annotations

import sys
from typing import Any

import typer

from mcd_cli import record, report, run
from mcd_cli.policy import execute as execute_policy, perdatum as policy_perdatum
from mcd_cli.run import perdatum
from mcd_cli.run import ADAPTIVE_REFINE_STEPS
from mcd_cli.errors import Unreliable, UsageError
from mcd_cli.targets.conditional import ConditionalTarget
from mcd_cli.cli import output as out
from mcd_cli.cli import settings
from mcd_cli.cli.app import app
from mcd_cli.cli.options import takes


@app.command()
@takes()
def estimate(ctx: typer.Context, **given: Any) -> None:
    """Fit the estimator to TARGET, then estimate log Z.

    Example: mcd estimate gmm8 --steps 64 --sampler uha --json
    """
    values = settings.resolve(ctx, given)
    with settings.precision(bool(values["x64"])):
        loaded = settings.load_target(values.get("target"), values["param"], values.get("model"), values.get("data"))
        if isinstance(loaded.target, ConditionalTarget):
            _per_datum(ctx, loaded, values)
            return
        if values.get("data_index") is not None or values.get("amortise") is not None:
            flag = "--data-index" if values.get("data_index") is not None else "--amortise/--separate"
            raise UsageError(
                f"{flag} applies to conditional targets (log_density(z, x) with a data set), and "
                f"'{loaded.target.name}' is not one; drop it"
            )
        plan = _plan(values, loaded)
        run.validate(plan)
        policy = values.get("policy")
        out.check_plot(values)
        out.check_posterior(values, plan, policy)
        out.warn_before([plan], values)
        if values["dry_run"]:
            out.dry_run([plan], values, policy)
            return
        with out.progress(values) as progress, settings.sigterm_as_interrupt():
            result = run.execute(plan, progress) if policy is None else execute_policy(plan, policy, progress)
        record = result.as_dict()
        out.append(values, record)
        curve = result.elbo_history[0] if result.elbo_history else ()
        out.emit([record], values, report.estimate_table(record, curve))
        out.plot_estimate(values, record, result)
        out.write_posterior(values, record, result)
        out.strict(values, [record])


def _schedule(values: dict) -> None:
    """`--schedule` onto the config fields: learned/linear set `learn_schedule` (whose flags are its
    aliases), adaptive sets `adaptive`; a contradiction, or --steps with adaptive, is refused."""
    schedule = values.get("schedule")
    if schedule is None:
        return
    learn = values.get("learn_schedule")
    if schedule in ("linear", "learned", "tempered"):
        if learn is not None and learn != (schedule != "linear"):
            flag = "--learn-schedule" if learn else "--fixed-schedule"
            raise UsageError(f"--schedule {schedule} contradicts {flag}; keep one")
        values["learn_schedule"] = schedule != "linear"
        if schedule == "tempered":
            values["schedule_start"] = "tempered"
        return
    if learn:
        raise UsageError("--schedule adaptive contradicts --learn-schedule; keep one")
    if values.get("steps") is not None:
        raise UsageError(
            "--steps does not apply to --schedule adaptive (the number of steps is an outcome, capped "
            "by --max-steps); drop --steps"
        )
    values["adaptive"] = True
    if values.get("refine_steps") is None:
        values["refine_steps"] = ADAPTIVE_REFINE_STEPS


def _plan(values: dict, loaded: settings.LoadedTarget) -> run.RunPlan:
    settings.positive(
        values, "steps", "batch_size", "samples", "repeats", "hidden", "refine_steps", "leapfrog", "max_steps"
    )
    _schedule(values)
    settings.adaptive_kernels(values)
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
        particles=values.get("particles"),
        draws=values.get("posterior") is not None,
    )


_NOT_PER_DATUM = {
    "load": "--load", "save": "--save", "plot": "--plot", "train_stage": "--train-stage", "posterior": "--posterior",
}


def _per_datum(ctx: typer.Context, loaded: settings.LoadedTarget, values: dict) -> None:
    """A conditional target: one JSON line per datum (stdout with --json, and --output), then the summary."""
    plan, policy = _per_datum_plan(ctx, loaded, values)
    sconf, tconf = plan.sconf, plan.tconf
    if policy is None and sconf.adaptive and tconf.iterations > 0 and not values.get("quiet"):
        print(
            f"warning: --schedule adaptive moves the particles with --refine {sconf.refine} only: the "
            f"{tconf.iterations} training iterations are skipped (--iterations 0 says so)",
            file=sys.stderr,
        )
    if values["dry_run"]:
        print(_per_datum_dry_run(plan, policy))
        return

    def on_datum(datum: record.DatumRecord) -> None:
        rec = datum.as_dict()
        out.append(values, rec)
        if values.get("json"):
            print(report.to_json(rec), flush=True)

    with out.progress(values) as progress, settings.sigterm_as_interrupt():
        if policy is None:
            summary = perdatum.execute(plan, on_datum, progress).as_dict()
        else:
            summary = policy_perdatum.execute(plan, policy, on_datum, progress).as_dict()
    out.append(values, summary)
    if values.get("json"):
        print(report.to_json(summary), flush=True)
    else:
        report.stdout_console().print(report.per_datum_table(summary))
    if values.get("strict") and summary["counts"]["unreliable"] + summary["counts"]["failed"]:
        raise Unreliable(
            f"unreliable estimates under --strict: {summary['counts']['unreliable'] + summary['counts']['failed']} "
            f"of {summary['num_data']} data; train longer (--iterations) or use more steps (--steps)"
        )


def _per_datum_plan(ctx: typer.Context, loaded: settings.LoadedTarget, values: dict) -> tuple:
    """The `PerDatumPlan` of a conditional target and the default policy (None: an option fixed the
    method), checked: options a per-datum run cannot take are refused with one line."""
    settings.positive(values, "steps", "batch_size", "samples", "hidden", "refine_steps", "leapfrog", "max_steps")
    _schedule(values)
    settings.adaptive_kernels(values)
    for name, flag in _NOT_PER_DATUM.items():
        if values.get(name) is not None:
            raise UsageError(f"{flag} is not available for a conditional target (one estimate per datum); drop it")
    if (values.get("repeats") or 1) > 1:
        raise UsageError("--repeats is not available for a conditional target; each datum is one estimate, use --seed")
    target = loaded.target
    if values.get("data_index") is not None:
        target = target.select(*perdatum.parse_index(values["data_index"], target.num_data))
    amortise = target.amortise if values.get("amortise") is None else bool(values["amortise"])
    if amortise and values.get("context_dim") is None:
        values["context_dim"] = target.context_dim
    # The policy's adaptive SMC tunes the moves' step size from the particles, so --step-size auto
    # asks for nothing it lacks.
    policy = values.get("policy")
    if values.get("step_size") == "pilot":
        if settings._explicit(ctx, "step_size") and policy is None:
            raise UsageError(
                "--step-size auto fits one target by a curvature run; a conditional target's step sizes start at "
                "--step-size NUMBER and are learned over the data: give a number"
            )
        values["step_size"] = "fixed"
    sconf, tconf = settings.build_configs(values, target.dim)
    plan = perdatum.PerDatumPlan(
        target=target, sconf=sconf, tconf=tconf, amortise=amortise,
        num_samples=values.get("samples") or run.DEFAULT_SAMPLES, seed=values.get("seed") or 0,
        x64=bool(values["x64"]), target_spec=loaded.spec, target_args=loaded.args,
        target_data=str(loaded.data) if loaded.data is not None else None, particles=values.get("particles"),
        checkpoint_dir=values.get("checkpoint"), checkpoint_every=settings.checkpoint_every(values),
        resume=bool(values.get("resume")), stage=values.get("stage"),
    )
    perdatum.validate(plan)
    if policy is not None:
        policy_perdatum.validate(policy)
    return plan, policy


def _per_datum_dry_run(plan: perdatum.PerDatumPlan, policy) -> str:
    """What a per-datum run would do, in one line."""
    target, sconf, tconf = plan.target, plan.sconf, plan.tconf
    if policy is not None:
        return (
            f"ok: the default policy on {target.name} (d = {target.dim}), {target.num_data} data: pilots of "
            f"adaptive SMC on the first {min(perdatum.PILOT_DATA, target.num_data)} data choose the effort, then "
            f"every datum is estimated with at least {plan.num_samples} samples, no training"
        )
    if sconf.adaptive:
        fitting = "adaptive tempering, no training"
    else:
        fitting = (
            f"K={sconf.steps}, {'amortised' if plan.amortise else 'a separate run per datum'}, "
            f"{tconf.iterations} iterations × batch {tconf.batch_size}"
        )
    return (
        f"ok: {sconf.label} on {target.name} (d = {target.dim}), {target.num_data} data, {fitting}, "
        f"{plan.num_samples} samples per datum" + (f" in populations of {plan.population}" if sconf.smc else "")
    )
