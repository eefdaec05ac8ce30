"""The rich tables of a record: one estimate, a per-datum summary, a comparison, Bayes factors,
the bundled targets and a target's check."""

from __future__ import annotations

import math
from typing import Any, Iterable, Optional, Sequence

from rich import box
from rich.table import Table
from rich.text import Text

from mcd_cli.stats import PARETO_K_BAD
from mcd_cli.report.format import (
    _SE_METHOD, _STATUS_STYLE, fmt, fmt_log_z, fmt_pareto, fmt_status, method_name, moves_text, per_datum_smc_line,
    smc_line, sparkline,
)


Row = tuple[str, Any]  # (name, value) of a `_names_and_values` table; the value a str or a Text


def _names_and_values(title: str) -> Table:
    """An empty two-column table without a header: names in bold, values beside them."""
    table = Table(title=title, box=box.SIMPLE_HEAD, show_header=False, title_justify="left")
    table.add_column("", style="bold")
    table.add_column("")
    return table


def estimator_line(rec: dict) -> str:
    """What estimated: the annealing kernels and their K, or adaptive tempered SMC's moves and its
    number of temperatures (no kernels, nothing trained)."""
    if rec.get("sampler") is None:
        count = rec.get("temperatures")
        temperatures = "" if count is None else f"{count} temperature{'' if count == 1 else 's'}, "
        return f"{rec['label']}  adaptive tempered SMC: {temperatures}{moves_text(rec.get('moves'))}; nothing trained"
    text = f"{rec['label']}  sampler = {rec['sampler']}, backward = {rec['backward']}, K = {rec['steps']} steps"
    return text if rec.get("moves") is None else f"{text}; {moves_text(rec['moves'])}"


def estimate_table(rec: dict, curve: Sequence[float] = ()) -> Table:
    """The table of one estimate: a column of names and a column of values.

    Args:
        rec: the record (`RunRecord.as_dict()`).
        curve: the training ELBO per iteration (of the first repeat), drawn as a sparkline.
    """
    table = _names_and_values(f"{rec['label']} on {rec['target']} (d = {rec['dim']})")
    # Built in the table's order, so a record missing a field fails where it always did.
    rows = [*_verdict_rows(rec), *_what_rows(rec), *_estimate_rows(rec), *_weight_rows(rec)]
    rows += [*_training_rows(rec), *_curve_rows(curve), *_run_rows(rec)]
    for name, value in rows:
        table.add_row(name, value)
    return table


def _verdict_rows(rec: dict) -> list[Row]:
    """The verdict with its reasons, and the advice when it is not "ok"."""
    status = rec.get("status", "ok")
    verdict = fmt_status(status)
    if status != "ok":
        verdict.append(f"  {'; '.join(rec['reasons'])}", style="")
    rows: list[Row] = [("verdict", verdict)]
    if status != "ok":
        rows.append(("advice", rec["advice"]))
    return rows


def _what_rows(rec: dict) -> list[Row]:
    """The target with its parameters, and the estimator (`estimator_line`)."""
    params = ", ".join(f"{k}={v}" for k, v in rec["target_params"].items())
    return [
        ("target", f"{rec['target']}  d = {rec['dim']}" + (f"  ({params})" if params else "")),
        ("estimator", estimator_line(rec)),
    ]


def _estimate_rows(rec: dict) -> list[Row]:
    """log Ẑ with its standard error and how that was found, the standard errors' disagreement if
    any, and the known log Z with the error."""
    label = "log Ẑ" if rec["repeats"] == 1 else f"log Ẑ (mean of {rec['repeats']})"
    estimate = Text(fmt_log_z(rec["log_z"], rec["log_z_stderr"]), style="bold")
    method = _SE_METHOD.get(rec["log_z_stderr_method"], rec["log_z_stderr_method"])
    smc = rec.get("smc")
    if rec["log_z_stderr_method"] == "replicates" and rec["repeats"] == 1 and smc and smc.get("populations", 1) > 1:
        method = f"spread over the {smc['populations']} SMC populations"
    estimate.append(f"  ({method})", style="")
    rows: list[Row] = [(label, estimate)]
    if rec.get("stderr_disagree"):
        disagree = (
            f"disagree: spread over repeats {fmt(rec['replicate_stderr'])}, per-run delta "
            f"method {fmt(rec['delta_stderr'])}"
        )
        rows.append(("standard errors", Text(disagree, style="yellow")))
    if rec["reference_log_z"] is not None:
        rows.append(("known log Z", f"{fmt(rec['reference_log_z'])}  (error {rec['error']:+.3f})"))
    else:
        rows.append(("known log Z", "unknown"))
    return rows


def _weight_rows(rec: dict) -> list[Row]:
    """What the weights say: ELBO, ESS, Pareto k̂, the SMC summary and log Ẑ without SMC."""
    rows: list[Row] = [("ELBO", fmt(rec["elbo"]))]
    ess = rec["ess"]
    rows.append(("ESS", "—" if ess is None else f"{ess:.1f} of {rec['num_samples']}  (ESS/N = {rec['ess_per_sample']:.3f})"))
    if rec.get("pareto_tail", True):
        rows.append(("Pareto k̂", fmt_pareto(rec["pareto_k"])))
    else:
        rows.append(("Pareto k̂", Text("— (no tail: the largest weights are equal)", style="green")))
    if rec.get("smc"):
        rows.append(("SMC", smc_line(rec["smc"])))
    if rec.get("log_z_is") is not None:
        without = fmt_log_z(rec["log_z_is"], rec.get("log_z_is_stderr")) + "  (importance sampling, same kernels)"
        rows.append(("log Ẑ without SMC", without))
    return rows


def _training_text(rec: dict) -> str:
    """The training: the checkpoint it was loaded from, or its iterations (and why they stopped,
    with `--iterations auto`), batch, loss, learning rate, time and skipped updates."""
    if rec["loaded_from"]:
        return f"loaded from {rec['loaded_from']}"
    ran = rec.get("iterations_run", rec["iterations"])
    if rec.get("stop") == "plateau":
        reasons = set(rec.get("stop_reasons") or ())
        why = "ELBO plateaued" if reasons == {"plateau"} else "cap reached" if reasons == {"iterations"} else "plateau or cap"
        count = f"{ran} iterations (auto, at most {rec['iterations']}: {why})"
    else:
        count = f"{ran} iterations"
    training = (
        f"{count} × batch {rec['batch_size']}, {rec.get('loss', 'elbo')} loss, lr {rec['lr']:g}, "
        f"{rec['train_seconds']:.1f} s"
    )
    if (rec.get("config") or {}).get("train_with") == "smc":
        training += "; SMC in the loop (loss and ELBO summed over the segments between resamplings)"
    if rec["skipped_steps"] or rec["recoveries"]:
        training += f"  (skipped {rec['skipped_steps']}, recoveries {rec['recoveries']})"
    return training


def _start_text(rec: dict) -> str:
    """The start: the initialisation, the step sizes of the curvature run (and the AIS check's scaling) and its time."""
    start = rec.get("init_method") or rec.get("init")
    sizes = rec.get("initial_step_sizes")
    if sizes:
        start += f"; step sizes from the curvature run, {sizes['first']:.3g} → {sizes['last']:.3g} (min {sizes['min']:.3g})"
        scale = rec.get("initial_step_scale")
        if scale is not None and scale != 1.0:
            start += f", scaled by {scale:g} by the AIS check"
    if rec.get("start_seconds"):
        start += f", {rec['start_seconds']:.1f} s"
    return start


def _training_rows(rec: dict) -> list[Row]:
    """The start (unless the parameters were loaded), the training (unless nothing was trained) and
    the default policy's stages."""
    training, start = _training_text(rec), _start_text(rec)
    rows: list[Row] = []
    if not rec["loaded_from"]:
        rows.append(("start", start))
    if rec["loaded_from"] or rec["iterations"]:
        rows.append(("training", training))
    if rec.get("policy"):
        rows.append(("policy", policy_line(rec["policy"])))
    return rows


def _curve_rows(curve: Sequence[float]) -> list[Row]:
    """The training ELBO as a sparkline with the means of its first and last tenth (none without a
    finite value)."""
    finite_curve = [x for x in curve if math.isfinite(x)]
    if not finite_curve:
        return []
    tenth = max(1, len(finite_curve) // 10)
    first, last = finite_curve[:tenth], finite_curve[-tenth:]
    return [(
        "training ELBO",
        f"{sparkline(curve)}  {sum(first) / len(first):.3f} → {sum(last) / len(last):.3f} (first and last tenth)",
    )]


def _run_rows(rec: dict) -> list[Row]:
    """The estimation (samples, time, non-finite weights left out), the seed and the device."""
    estimation = f"{rec['num_samples']} samples, {rec['estimate_seconds']:.1f} s"
    if rec["nonfinite_weights"]:
        estimation += f"  ({rec['nonfinite_weights']} non-finite weights left out)"
    return [
        ("estimation", estimation),
        ("seed", str(rec["seed"]) + (f"  ({rec['repeats']} repeats)" if rec["repeats"] > 1 else "")),
        ("device", f"{rec['device']}, {rec['precision']}"),
    ]


def per_datum_table(rec: dict) -> Table:
    """The summary of a conditional target's per-datum estimates (the `"summary"` record)."""
    table = _names_and_values(f"{rec['label']} on {rec['target']} (d = {rec['dim']}), {rec['num_data']} data")
    counts = rec["counts"]
    verdicts = Text(f"{counts['ok']} ok", style=_STATUS_STYLE["ok"] if not rec["not_ok"] else "")
    for name in ("warn", "unreliable", "failed"):
        if counts[name]:
            verdicts.append(f", {counts[name]} {name}", style=_STATUS_STYLE.get(name, "bold red"))
    table.add_row("data", f"{rec['num_data']} (indices {rec['data_index'][0]}:{rec['data_index'][1]})")
    table.add_row("verdicts", verdicts)
    fitted = "amortised over the data" if rec["amortise"] else "a separate run per datum"
    smc = rec.get("smc")
    if smc is not None and smc["schedule"] == "adaptive":
        estimator = (
            f"{rec['label']}  adaptive tempered SMC from each datum's initial distribution: "
            f"{moves_text(rec.get('moves'))}; nothing trained"
        )
    else:
        estimator = (
            f"{rec['label']}  sampler = {rec['sampler']}, backward = {rec['backward']}, K = {rec['steps']} steps, {fitted}"
        )
    table.add_row("estimator", estimator)
    if smc is not None:
        table.add_row("SMC", per_datum_smc_line(smc))
    if rec.get("policy"):
        table.add_row("policy", policy_line(rec["policy"]))
    mean = Text(fmt(rec["mean_log_z"]), style="bold")
    if rec["num_estimated"] < rec["num_data"]:
        mean.append(f"  (over the {rec['num_estimated']} data with a finite estimate)", style="")
    table.add_row("mean log Ẑ", mean)
    table.add_row("  ± Monte Carlo", f"{fmt(rec['mc_stderr'])}  (√(Σ se_i²)/n: the sampling error, data fixed)")
    table.add_row("  ± over data", f"{fmt(rec['data_stderr'])}  (sd/√n: the spread of log p(x) over the data)")
    if rec["known_mean_log_z"] is not None:
        table.add_row(
            "known mean",
            f"{fmt(rec['known_mean_log_z'])}  (error {rec['mean_log_z'] - rec['known_mean_log_z']:+.3f})",
        )
    training = (
        f"{rec['iterations']} iterations × batch {rec['batch_size']} ({rec['data_batch']} data each), "
        f"lr {rec['lr']:g}, {rec['train_seconds']:.1f} s"
    )
    if rec["skipped_steps"] or rec["recoveries"]:
        training += f"  (skipped {rec['skipped_steps']}, recoveries {rec['recoveries']})"
    if smc is None or smc["schedule"] != "adaptive":
        table.add_row("training", training)
    table.add_row("estimation", f"{rec['num_samples']} samples per datum, {rec['estimate_seconds']:.1f} s")
    table.add_row("seed", str(rec["seed"]))
    table.add_row("device", f"{rec['device']}, {rec['precision']}")
    return table


def compare_table(records: Sequence[dict]) -> Table:
    """The paper's layout: one row per setting, log Ẑ as mean ± standard error over repeats."""
    first = records[0]
    repeats = first["repeats"]
    title = f"{first['target']} (d = {first['dim']})"
    if first["reference_log_z"] is not None:
        title += f", known log Z = {fmt(first['reference_log_z'])}"
    title += f"; {repeats} repeat{'s' if repeats != 1 else ''}, {first['num_samples']} samples"
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("estimator")
    table.add_column("K", justify="right")
    table.add_column("verdict")
    table.add_column("log Ẑ", justify="right")
    if first["reference_log_z"] is not None:
        table.add_column("error", justify="right")
    table.add_column("ELBO", justify="right")
    table.add_column("ESS/N", justify="right")
    table.add_column("k̂", justify="right")
    table.add_column("train s", justify="right")
    table.add_column("est. s", justify="right")
    for rec in records:
        row = [rec["label"], str(rec["steps"] or "—"), fmt_status(rec["status"]), fmt_log_z(rec["log_z"], rec["log_z_stderr"])]
        if first["reference_log_z"] is not None:
            row.append("—" if rec["error"] is None else f"{rec['error']:+.3f}")
        k = rec["pareto_k"]
        k_text = Text("—" if k is None else f"{k:.2f}", style="red" if k is None or k > PARETO_K_BAD else "")
        row += [
            fmt(rec["elbo"]),
            fmt(rec["ess_per_sample"]),
            k_text,
            f"{rec['train_seconds']:.1f}",
            f"{rec['estimate_seconds']:.1f}",
        ]
        table.add_row(*row)
    return table


def bayes_factor_table(records: Sequence[dict], result: Any) -> Table:
    """log Ẑ ± SE per model and the log Bayes factor of each against the best (`comparison.Comparison`).

    `log B` is `log Ẑ − log Ẑ(best)` with the standard errors added in quadrature; `2 ln B` and its
    name on Kass & Raftery's (1995) scale measure the evidence for the best model over each other.
    """
    first = records[0]
    repeats = first["repeats"]
    known = any(r["reference_log_z"] is not None for r in records)
    title = (
        f"{len(records)} models, {method_name(first)}, {repeats} "
        f"repeat{'s' if repeats != 1 else ''} × {first['num_samples']} samples, seed {first['seed']}; "
        f"best: {result.best_name}"
    )
    table = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    table.add_column("model", no_wrap=True)
    table.add_column("d", justify="right")
    table.add_column("verdict")
    table.add_column("log Ẑ", justify="right")
    if known:
        table.add_column("known log Z", justify="right")
    table.add_column("log B vs best", justify="right")
    table.add_column("2 ln B", justify="right")
    table.add_column("evidence for the best", no_wrap=True)
    table.add_column("time s", justify="right")
    for rec, f in zip(records, result.factors):
        if f.name == result.best_name:
            log_b, two, words = Text("best", style="bold"), "—", ""
        else:
            log_b = Text(fmt_log_z(f.log_bf, f.log_bf_stderr), style="yellow" if f.within_2se else "")
            two, words = fmt(f.two_ln_b, 2), f.strength + (" (within 2 SE)" if f.within_2se else "")
        row = [f.name, str(rec["dim"]), fmt_status(rec["status"]), fmt_log_z(rec["log_z"], rec["log_z_stderr"])]
        if known:
            row.append(fmt(rec["reference_log_z"]) if rec["reference_log_z"] is not None else "unknown")
        row += [log_b, two, words, f"{rec['train_seconds'] + rec['estimate_seconds']:.1f}"]
        table.add_row(*row)
    return table


def targets_table(rows: Iterable[dict]) -> Table:
    """The bundled targets: name, d, known log Z, description, path."""
    table = Table(title="Bundled targets", box=box.SIMPLE_HEAD, title_justify="left")
    for name, justify in (("name", "left"), ("d", "right"), ("log Z", "right"), ("description", "left"), ("path", "left")):
        table.add_column(name, justify=justify, overflow="fold")
    for row in rows:
        table.add_row(
            str(row["name"]),
            "—" if row.get("dim") is None else str(row["dim"]),
            fmt(row.get("log_z")) if row.get("log_z") is not None else "unknown",
            str(row.get("description") or ""),
            str(row.get("path") or ""),
        )
    return table


def check_table(target: Any, result: Any) -> Table:
    """The validation report of `targets.check`: one row per property, then problems and warnings."""
    n = result.num_points
    table = Table(
        title=f"check: {target.name} (d = {target.dim}), {n} points from the initial distribution",
        box=box.SIMPLE_HEAD,
        title_justify="left",
    )
    table.add_column("")
    table.add_column("check")
    table.add_column("result", overflow="fold")

    def row(ok: Optional[bool], name: str, detail: str) -> None:
        mark = {True: Text("✓", style="green"), False: Text("✗", style="bold red"), None: Text("!", style="yellow")}[ok]
        table.add_row(mark, name, detail)

    row(result.scalar_output, "output", "one scalar per point" if result.scalar_output else "not one scalar per point")
    row(
        result.num_nan == 0 and result.num_pos_inf == 0,
        "values",
        f"{result.num_finite} finite, {result.num_neg_inf} -inf, {result.num_nan} NaN, {result.num_pos_inf} +inf",
    )
    row(result.gradients_finite, "gradients", "finite wherever the density is" if result.gradients_finite else f"{result.num_bad_gradients} non-finite (or not computable)")
    row(result.jit_ok, "jax.jit", "compiles" if result.jit_ok else "fails")
    row(result.vmap_ok, "jax.vmap", "batches" if result.vmap_ok else "fails")
    if result.seconds_per_gradient is not None:
        compile_s = "" if result.compile_seconds is None else f"compile {result.compile_seconds:.2f} s, "
        row(True, "speed", f"{compile_s}{result.seconds_per_gradient * 1e6:.1f} µs per value and gradient")
    row(True if target.log_z is not None else None, "known log Z", fmt(target.log_z) if target.log_z is not None else "unknown")
    for problem in result.problems:
        row(False, "problem", problem)
    for warning in result.warnings:
        row(None, "warning", warning)
    return table



def _stage_verdict(stage: dict) -> str:
    """A stage's verdict: its status, or for a per-datum stage its data's verdicts counted."""
    if "counts" not in stage:
        return stage["status"]
    lo, hi = stage["data_index"]
    counts = ", ".join(f"{n} {name}" for name, n in stage["counts"].items() if n)
    return f"data {lo}:{hi}: {counts}"


def policy_line(policy: dict) -> str:
    """The default policy's stages in one line: each stage's role, size (particles per datum for a
    per-datum run), verdict and time, and why the run stopped when it stopped early.

    Example:
        >>> st = {"role": "pilot", "num_samples": 8192, "data_index": [0, 4], "counts": {"ok": 4, "warn": 0},
        ...       "seconds": 3.0, "method": "adaptive SMC"}
        >>> policy_line({"stages": [st], "seconds": 3.5, "stopped": "plan"})
        'pilot 8192 (data 0:4: 4 ok, 3.0 s); adaptive SMC; 3.5 s in all'
    """
    stages = [f"{st['role']} {st['num_samples']} ({_stage_verdict(st)}, {st['seconds']:.1f} s)" for st in policy["stages"]]
    last = policy["stages"][-1]
    effort = last["method"]
    line = f"{' → '.join(stages)}; {effort}; {policy['seconds']:.1f} s in all"
    if policy["stopped"] != "plan":
        line += f"; stopped: {policy['stopped']}, stage {policy['reported_stage'] + 1} reported"
    return line
