"""Numbers, verdicts and warnings as text: the pieces every table and message uses."""

from __future__ import annotations

import json
import math
import statistics
import sys
from typing import Optional, Sequence

from rich.console import Console
from rich.text import Text

from mcd_cli.record import finite
from mcd_cli.stats import PARETO_K_BAD, PARETO_K_WARN


def to_json(record: dict) -> str:
    """One JSON line; refuses NaN/inf (records hold None instead)."""
    return json.dumps(record, allow_nan=False, separators=(", ", ": "))


# --------------------------------------------------------------------------------------------
# Formatting


def fmt(value: Optional[float], digits: int = 3) -> str:
    """A number for a table, or an em dash when it is unknown or not finite."""
    value = finite(value)
    return "—" if value is None else f"{value:.{digits}f}"


def fmt_log_z(log_z: Optional[float], stderr: Optional[float]) -> str:
    """`log Ẑ ± se`, or `log Ẑ` alone when there is no standard error that means anything."""
    if finite(log_z) is None:
        return "—"
    return fmt(log_z) if finite(stderr) is None else f"{fmt(log_z)} ± {fmt(stderr)}"


SPARK_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float], width: int = 48) -> str:
    """A one-line unicode sparkline of `values` in `width` cells (each the median of its span, so
    that one bad training batch does not flatten the rest; NaN skipped).

    Example:
        >>> sparkline([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
        '▁▂▃▄▅▆▇█'
        >>> sparkline([])
        ''
    """
    v = [float(x) for x in values]
    if not v:
        return ""
    width = max(1, min(width, len(v)))
    cells = []
    for i in range(width):
        span = [x for x in v[i * len(v) // width:(i + 1) * len(v) // width] if math.isfinite(x)]
        cells.append(statistics.median(span) if span else None)
    known = [c for c in cells if c is not None]
    if not known:
        return " " * width
    lo, hi = min(known), max(known)
    top = len(SPARK_BARS) - 1
    return "".join(
        " " if c is None else SPARK_BARS[0 if hi == lo else round((c - lo) / (hi - lo) * top)] for c in cells
    )


_STATUS_STYLE = {"ok": "bold green", "warn": "bold yellow", "unreliable": "bold red"}


def fmt_status(status: str) -> Text:
    """The verdict, in colour."""
    return Text(status.upper() if status == "unreliable" else status, style=_STATUS_STYLE.get(status, ""))


def fmt_pareto(k: Optional[float]) -> Text:
    """k̂: green up to 0.5, yellow up to 0.7, red above (or when no tail could be fitted)."""
    if finite(k) is None:
        return Text("— (no tail to fit)", style="bold red")
    if k > PARETO_K_BAD:
        return Text(f"{k:.2f}  > {PARETO_K_BAD}: the weights' tail is too heavy", style="bold red")
    if k > PARETO_K_WARN:
        return Text(f"{k:.2f}  > {PARETO_K_WARN}: converges slowly", style="yellow")
    return Text(f"{k:.2f}", style="green")


def method_name(rec: dict) -> str:
    """The estimator of a record in a few words: `ULA-MCD+SMC K=64`, or `SMC-HMC, 3 temperatures`
    for adaptive tempered SMC, which runs no annealing kernels.

    Example:
        >>> method_name({"label": "UHA-MCD+SMC", "steps": 64})
        'UHA-MCD+SMC K=64'
        >>> method_name({"label": "SMC-HMC", "steps": None, "temperatures": 1})
        'SMC-HMC, 1 temperature'
    """
    if rec.get("steps") is not None:
        return f"{rec['label']} K={rec['steps']}"
    count = rec.get("temperatures")
    return rec["label"] if count is None else f"{rec['label']}, {count} temperature{'' if count == 1 else 's'}"


def moves_text(moves: Optional[dict]) -> str:
    """`15 HMC moves of 3 leapfrog steps per temperature` from a record's `moves`.

    Example:
        >>> moves_text({"kernel": "hmc", "moves": 5, "every": "resample", "leapfrog": 3})
        '5 HMC moves of 3 leapfrog steps after each resampling'
    """
    if moves is None:
        return "no moves"
    text = f"{moves['moves']} {moves['kernel'].upper()} move{'' if moves['moves'] == 1 else 's'}"
    if moves.get("leapfrog") is not None:
        text += f" of {moves['leapfrog']} leapfrog step{'' if moves['leapfrog'] == 1 else 's'}"
    every = {"temperature": "per temperature", "resample": "after each resampling", "step": "after every step"}
    return f"{text} {every[moves['every']]}"


def warnings_for(rec: dict) -> list[str]:
    """Plain-text warnings about a record, one line each (shown on stderr)."""
    out = []
    where = method_name(rec)
    if rec.get("status") == "unreliable":
        out.append(
            f"warning: {where} is UNRELIABLE ({'; '.join(rec['reasons']) or 'see the diagnostics'}): "
            f"do not use this estimate; {rec['advice']}"
        )
    elif rec.get("status") == "warn":
        out.append(f"warning: {where}: {'; '.join(rec['reasons'])}; {rec['advice']}")
    for line in rec.get("init_warnings", ()):
        out.append(f"warning: initial distribution ({rec.get('init_method') or rec['init']}): {line}")
    if rec.get("nonfinite_weights"):
        out.append(
            f"warning: {rec['nonfinite_weights']} importance weights were NaN or +inf and were "
            "left out of the estimate"
        )
    if rec.get("recoveries"):
        out.append(
            f"warning: training recovered from divergence {rec['recoveries']} time(s) "
            f"({rec['skipped_steps']} updates skipped); the learning rate was halved each time"
        )
    return out


_SE_METHOD = {
    "delta": "delta method",
    "replicates": "spread over repeats",
    "smc-genealogy": "SMC genealogy",
    "none": "no valid standard error",
}


def smc_line(smc: dict) -> str:
    """The compact SMC line: schedule, steps, resamplings, final ESS/N, mean acceptance."""
    runs = len(smc["steps"])
    mean = lambda values: sum(values) / len(values)  # noqa: E731
    same = len(set(smc["steps"])) == 1
    steps = smc["steps"][0] if same else f"{mean(smc['steps']):.1f} (mean of {runs} runs)"
    count = "temperatures" if smc["schedule"] == "adaptive" else "K"
    text = (
        f"{smc['schedule']} schedule, {count} = {steps}, {mean(smc['resamplings']):.1f} resamplings "
        f"({smc['resampling']}, ESS/N < {smc['resample']:g}), final ESS/N {mean([e or 0.0 for e in smc['final_ess']]):.2f}"
    )
    if smc["refine"] != "none":
        accept = smc["mean_acceptance"]
        text += f", {smc['refine']} acceptance {accept:.2f}" if accept is not None else f", {smc['refine']}: no moves"
    if smc["populations"] > 1:
        text += f"; {smc['populations']} populations of {smc['particles']}"
    return text


def per_datum_smc_line(smc: dict) -> str:
    """The SMC line of a per-datum summary: settings and the means over the data."""
    def num(value, form):
        return "—" if value is None else format(value, form)

    text = (
        f"{smc['schedule']} schedule, mean K = {num(smc['mean_steps'], '.1f')}, "
        f"{num(smc['mean_resamplings'], '.1f')} resamplings ({smc['resampling']}, ESS/N < {smc['resample']:g}), "
        f"final ESS/N {num(smc['mean_final_ess'], '.2f')}"
    )
    if smc["refine"] != "none":
        text += f", {smc['refine']} acceptance {num(smc['mean_acceptance'], '.2f')}"
    if smc["populations"] > 1:
        text += f"; {smc['populations']} populations of {smc['particles']}"
    if smc.get("mean_log_z_is") is not None:
        text += f"; same kernels without SMC: mean log Ẑ {fmt(smc['mean_log_z_is'])}"
    return text + " (means over the data)"



# Consoles and progress


def stdout_console(width: int = 120) -> Console:
    """Console for results: `width` columns when stdout is a pipe or a file, so tables do not wrap."""
    if sys.stdout.isatty():
        return Console(soft_wrap=False)
    return Console(width=width, soft_wrap=False, force_terminal=False)


def stderr_console() -> Console:
    return Console(stderr=True, soft_wrap=True)

