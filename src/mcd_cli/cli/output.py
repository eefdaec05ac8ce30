"""Where results go: tables or JSON on stdout, warnings on stderr, JSON lines appended to --output.

In a multi-process run (--distributed) every process computes the same records and only process 0
(`devices.is_primary`) shows or writes them.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

from mcd_cli import report
from mcd_cli.runtime import devices
from mcd_cli.io import files
from mcd_cli.errors import FileFailed, RunFailed, Unreliable, UsageError, os_advice
from mcd_cli.run import RunPlan, memory_needed, plan_warnings, format_bytes


def progress(values: dict) -> report.ProgressDisplay:
    """Progress bars on stderr when it is a terminal and neither --quiet nor --json was given."""
    return report.ProgressDisplay(
        enabled=sys.stderr.isatty() and not values.get("quiet") and not values.get("json") and devices.is_primary()
    )


def emit(records: list[dict], values: dict, table: Any) -> None:
    """The table (or the JSON lines) on stdout, then each record's warnings on stderr."""
    if not devices.is_primary():
        return
    if values.get("json"):
        for rec in records:
            print(report.to_json(rec), flush=True)
    else:
        report.stdout_console().print(table)
    warn_after(records, values)


def warn_after(records: list[dict], values: dict) -> None:
    if not values.get("quiet") and devices.is_primary():
        for rec in records:
            for warning in report.warnings_for(rec):
                print(warning, file=sys.stderr)


def strict(values: dict, records: list[dict]) -> None:
    """Under --strict, exit with status 3 when any record's verdict is unreliable (already written);
    exit 130 when Ctrl-C stopped a policy run between or during its stages (its finished stages were
    reported and written)."""
    if any((r.get("policy") or {}).get("stopped") == "interrupted" for r in records):
        print("interrupted: the stages that had finished are reported (policy.stopped: interrupted)", file=sys.stderr)
        raise typer.Exit(130)
    bad = [r for r in records if r.get("status") == "unreliable"]
    if values.get("strict") and bad:
        names = ", ".join(report.method_name(r) for r in bad)
        raise Unreliable(f"unreliable estimate under --strict ({names}): {bad[0]['advice']}")


def warn_before(plans: list[RunPlan], values: dict) -> None:
    """Warnings known from the settings alone, on stderr before any work (each line once)."""
    if values.get("quiet") or not devices.is_primary():
        return
    for line in dict.fromkeys(w for plan in plans for w in plan_warnings(plan)):
        print(line, file=sys.stderr)


def append(values: dict, rec: dict) -> None:
    """Appends the record to --output: one line, all or nothing (`files.append_line`).

    When the line cannot be written (a full disk, a quota, an I/O error) the file is left as it was,
    the record goes to stdout — or to stderr when stdout carries --json lines — so the result is
    not lost, and the run fails with one line naming the file (exit status 1).
    """
    path = values.get("output")
    if path is None or not devices.is_primary():
        return
    line = report.to_json(rec)
    try:
        cut = files.append_line(path, line)
    except OSError as err:
        rescue, where = (sys.stderr, "stderr") if values.get("json") else (sys.stdout, "stdout")
        print(line, file=rescue, flush=True)
        raise FileFailed(
            path, "append to --output", err,
            f"the file is unchanged and the record is on {where}; {os_advice(err)}, then append that line to it",
        ) from None
    if cut:
        print(
            f"warning: '{path}' ended in a partial line ({cut} bytes, left by a writer killed mid-write); "
            "it was cut back to the last whole line before appending",
            file=sys.stderr,
        )


def check_plot(values: dict) -> None:
    """With --plot: the file can be written and matplotlib is there (before any work starts)."""
    if values.get("plot") is not None:
        from mcd_cli.report import plot

        plot.check_path(values["plot"])
        plot.require()


def plot_estimate(values: dict, rec: dict, result: Any) -> None:
    """With --plot: the figure of one run (`plot.estimate_figure`), then a line on stderr."""
    if values.get("plot") is None or not devices.is_primary():
        return
    from mcd_cli.report import plot

    weights = result.weights[0] if result.weights else None
    plot.save(plot.estimate_figure(rec, result.elbo_history, weights), values["plot"])
    if not values.get("quiet"):
        print(f"figure written to {values['plot']}", file=sys.stderr)


def check_posterior(values: dict, plan: RunPlan, policy: Any = None) -> None:
    """With --posterior: the run makes SMC populations, and the file can be written (.nc: ArviZ is
    there), before any work starts."""
    path = values.get("posterior")
    if path is None:
        return
    from mcd_cli.report import posterior

    posterior.check_path(path)
    if policy is None and not plan.sconf.smc:
        raise UsageError(
            "--posterior draws from SMC populations, but --resample 0 makes this run plain importance sampling; "
            "use SMC (--resample 0.5, --schedule adaptive, or no method options for the default policy)"
        )


def write_posterior(values: dict, rec: dict, result: Any) -> None:
    """With --posterior: the reported run's posterior draws (`posterior.write`), then a line on
    stderr. A file that cannot be written fails the command with one line; the estimate was
    already printed and recorded."""
    path = values.get("posterior")
    if path is None or not devices.is_primary():
        return
    from mcd_cli.report import posterior

    if result.draws is None:
        raise RunFailed("--posterior: the reported run kept no SMC population to draw from")
    try:
        posterior.write(path, result.draws, rec)
    except OSError as err:
        raise FileFailed(
            path, "write --posterior file", err, f"the estimate was still printed and recorded; {os_advice(err)}"
        ) from None
    if not values.get("quiet"):
        chains, draws = next(iter(result.draws.values())).shape[:2]
        print(
            f"posterior draws written to {path}: {chains} chains × {draws} draws of {', '.join(result.draws)} "
            f"(verdict {rec['status']})",
            file=sys.stderr,
        )


def plot_compare(values: dict, records: list[dict], names: Any = None, comparison: Any = None) -> None:
    """With --plot: log Ẑ ± SE per setting or per model (`plot.compare_figure`)."""
    if values.get("plot") is None or not devices.is_primary():
        return
    from mcd_cli.report import plot

    plot.save(plot.compare_figure(records, names, comparison), values["plot"])
    if not values.get("quiet"):
        print(f"figure written to {values['plot']}", file=sys.stderr)


def dry_run(plans: list[RunPlan], values: dict, policy: Any = None) -> None:
    """What would run, and about how much memory it needs."""
    import dataclasses

    if not devices.is_primary():
        return
    rows = []
    for plan in plans:
        need = memory_needed(plan)
        rows.append(
            {
                "dry_run": True,
                "target": plan.target.name,
                "dim": plan.target.dim,
                "sampler_config": dataclasses.asdict(plan.sconf),
                "train_config": dataclasses.asdict(plan.tconf),
                "num_samples": plan.num_samples,
                "seed": plan.seed,
                "repeats": plan.repeats,
                "memory_bytes": int(max(need["training"], need["estimation"]) + need["parameters"] + need["host"]),
            }
        )
    if values.get("json"):
        for row in rows:
            print(json.dumps(row))
        return
    for plan, row in zip(plans, rows):
        print(f"ok: {_would_run(plan, policy)}; about {format_bytes(row['memory_bytes'])} of memory")


def _would_run(plan: RunPlan, policy: Any = None) -> str:
    """What `plan` would run, in one line: the default policy's first stage and its bound, adaptive
    tempered SMC's moves, or the annealing kernels with their K and training."""
    where = f"on {plan.target.name} (d = {plan.target.dim})"
    if policy is not None:
        from mcd_cli.policy import PILOT_POPULATIONS, first_effort

        effort = first_effort(plan)
        bound = f"within {policy.time_limit:g} s" if policy.time_limit is not None else f"at most {policy.max_pilots} pilots"
        return (
            f"the default policy {where}: pilots of {effort.describe()} ({PILOT_POPULATIONS} populations each, "
            f"{bound}) choose the effort, then a final run of at least {plan.num_samples} samples sized for an SE of "
            f"at most {policy.max_se:g}; "
            + ("MCD kernels learned in the time to spare where the pilots end short" if policy.learn else "no training")
        )
    runs = f"{plan.num_samples} samples, {plan.repeats} repeat(s)"
    if plan.sconf.adaptive:
        return f"{plan.sconf.label} {where}: adaptive tempered SMC, {report.moves_text(plan.sconf.moves)}, {runs}"
    return (
        f"{plan.sconf.label} K={plan.sconf.steps} {where}, {plan.tconf.iterations} iterations × batch "
        f"{plan.tconf.batch_size}, {runs}"
    )
