"""Figures of a run and of a comparison, written with matplotlib (`pip install 'mcd-cli[plot]'`).

matplotlib is optional: this module imports it only inside `require`, which the command line calls
before any work starts, so that a missing extra is one line (exit 2), not a failed run at the end.
Like `report`, the figures are drawn from records (`RunRecord.as_dict()`, docs/json.md) and from
the run's bounded summaries (the training curve, `stats.WeightSummary`); nothing is computed here
but the curve's block medians and the fitted tail's expected counts (`WeightSummary.tail_counts`).

- `estimate_figure(rec, curves, weights)`: the training ELBO against iteration with its running
  level (block medians); the histogram of the log weights with the fitted Pareto tail, its cutoff and k̂; and,
  when the record has an `smc` section, its ESS, β and acceptance rate against step.
- `compare_figure(records, names)`: log Ẑ ± one standard error per setting or per model.

Example:
    >>> centres, medians, size = block_medians([1.0, 9.0, 2.0, 3.0, float("nan"), 5.0], blocks=2)
    >>> centres.tolist(), medians.tolist(), size
    ([2.0, 5.0], [2.0, 4.0], 3)
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from mcd_cli.errors import UsageError
from mcd_cli.report.format import method_name

FORMATS = (".png", ".svg", ".pdf")
SMC_PANELS = (("ess", "ESS"), ("beta", "β"), ("acceptance", "acceptance rate"))


def check_path(path: Path) -> None:
    """Usage error unless `path` names a .png, .svg or .pdf file that can be written."""
    from mcd_cli.io import files

    if Path(path).suffix.lower() not in FORMATS:
        raise UsageError(f"--plot '{path}': give a file ending in .png, .svg or .pdf")
    files.ensure_writable(Path(path), "--plot file")


def require() -> Any:
    """`matplotlib.pyplot` with a non-interactive backend, or a one-line UsageError naming the extra."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib; install it with: pip install 'mcd-cli[plot]'") from None
    return plt


def block_medians(values: Sequence[float], blocks: int = 50) -> tuple[np.ndarray, np.ndarray, int]:
    """The curve's running level: the median of each block of `len(values) // blocks` iterations.

    A median, not a mean: one training batch with a far-off particle drags its batch's ELBO down by
    many nats, and a moving mean would show each such batch as a step. NaN (skipped updates) are
    left out; blocks keep the cost and the figure bounded however long the training.

    Returns:
        `(centres, medians, size)`: each block's centre (1-based iteration), its median, the block size.
    """
    v = np.asarray(values, dtype=np.float64)
    size = max(1, v.size // blocks)
    count = v.size // size
    tail = v[: count * size].reshape(count, size)
    with np.errstate(all="ignore"):
        medians = np.array([np.median(row[np.isfinite(row)]) if np.isfinite(row).any() else np.nan for row in tail])
    centres = np.arange(count) * size + (size + 1) / 2
    return centres, medians, size


def _title(rec: dict) -> str:
    se = rec.get("log_z_stderr")
    log_z = "—" if rec.get("log_z") is None else f"{rec['log_z']:.3f}" + ("" if se is None else f" ± {se:.3f}")
    return f"{rec['label']} on {rec['target']} (d = {rec['dim']}): log Ẑ = {log_z}, verdict {rec['status']}"


def _training_panel(ax: Any, curves: Sequence[Sequence[float]]) -> None:
    curves = [np.asarray(c, dtype=np.float64) for c in curves if len(c)]
    ax.set_title("training")
    if not curves:
        ax.text(0.5, 0.5, "no training in this run", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    for r, curve in enumerate(curves):
        steps = np.arange(1, curve.size + 1)
        ax.plot(steps, curve, color=f"C{r}", alpha=0.25, linewidth=0.7, label="per iteration" if r == 0 else None)
        centres, medians, size = block_medians(curve)
        label = f"median of every {size}" + (f", repeat {r + 1}" if len(curves) > 1 else "")
        ax.plot(centres, medians, color=f"C{r}", linewidth=1.6, label=label)
    finite = np.concatenate([c[np.isfinite(c)] for c in curves])
    if finite.size:
        lo, hi = np.percentile(finite, [2, 100])
        pad = 0.05 * (hi - lo or 1.0)
        ax.set_ylim(lo - pad, hi + pad)
    ax.set_xlabel("iteration")
    ax.set_ylabel("training ELBO (mean log w)")
    ax.legend(loc="lower right", fontsize="small")


def _weights_panel(ax: Any, weights: Any, rec: dict) -> None:
    if weights is None:
        ax.set_title("log importance weights")
        ax.text(0.5, 0.5, "no weights recorded", ha="center", va="center", transform=ax.transAxes)
        return
    edges = np.asarray(weights.edges)
    counts = np.asarray(weights.counts)
    shown = f"{weights.num_samples} weights"
    left_out = [f"{n} {what}" for n, what in ((weights.num_below, "below the range"), (weights.num_zero, "zero")) if n]
    if left_out:
        shown += f" ({', '.join(left_out)}: not shown)"
    ax.stairs(counts, edges, fill=True, color="C0", alpha=0.45, label=shown)
    fitted = weights.tail_counts(edges)
    if weights.log_cutoff is not None and fitted.sum() > 0:
        ax.stairs(fitted, edges, color="C3", linewidth=1.6, label=f"fitted Pareto tail ({len(weights.tail)} largest)")
        ax.axvline(weights.log_cutoff, color="C3", linestyle=":", linewidth=1.0, label="tail cutoff")
    if rec.get("log_z") is not None:
        ax.axvline(rec["log_z"], color="k", linestyle="--", linewidth=1.0, label="log Ẑ")
    k = weights.pareto_k
    k_text = "k̂: no tail to fit" if not math.isfinite(k) else f"k̂ = {k:.2f}"
    colour = "C2" if math.isfinite(k) and k <= 0.5 else ("C1" if math.isfinite(k) and k <= 0.7 else "C3")
    if k == -math.inf:
        k_text, colour = "k̂: no tail (largest weights equal)", "C2"
    ax.set_title(f"log importance weights;  {k_text}", color=colour)
    ax.set_yscale("log")
    _, top = ax.get_ylim()
    ax.set_ylim(0.5, top * 8)  # headroom for the legend
    ax.set_xlabel("log w")
    ax.set_ylabel("count")
    ax.legend(loc="upper left", fontsize="small", ncols=2)


def _smc_panels(fig: Any, grid: Any, row: int, smc: dict) -> None:
    keys = [(key, label) for key, label in SMC_PANELS if smc.get(key) is not None and len(smc[key])]
    for i, (key, label) in enumerate(keys):
        ax = fig.add_subplot(grid[row + i // 2, i % 2])
        values = np.asarray(smc[key], dtype=np.float64)
        ax.plot(np.arange(values.size), values, marker=".", color=f"C{4 + i}")
        ax.set_title(f"SMC: {label}")
        ax.set_xlabel("step")
        ax.set_ylabel(label)
        if key == "acceptance":
            ax.set_ylim(0.0, 1.0)


def estimate_figure(rec: dict, curves: Sequence[Sequence[float]] = (), weights: Any = None) -> Any:
    """The figure of one run.

    Args:
        rec: the run's record (`RunRecord.as_dict()`); an `smc` section with per-step lists
            `ess`, `beta` and `acceptance` adds a panel for each of them.
        curves: the training ELBO of every iteration, one sequence per repeat (`RunRecord.elbo_history`).
        weights: a `stats.WeightSummary` of the log weights (the first repeat's), or None.

    Returns:
        A matplotlib Figure (save it with `save`).
    """
    plt = require()
    smc = rec.get("smc") or {}
    smc_count = sum(1 for key, _ in SMC_PANELS if smc.get(key) is not None and len(smc[key]))
    rows = 1 + (smc_count + 1) // 2
    fig = plt.figure(figsize=(11, 4.2 * rows), layout="constrained")
    grid = fig.add_gridspec(rows, 2)
    _training_panel(fig.add_subplot(grid[0, 0]), curves)
    _weights_panel(fig.add_subplot(grid[0, 1]), weights, rec)
    if smc_count:
        _smc_panels(fig, grid, 1, smc)
    fig.suptitle(_title(rec))
    return fig


def compare_figure(
    records: Sequence[dict], names: Optional[Sequence[str]] = None, comparison: Any = None
) -> Any:
    """log Ẑ ± one standard error per setting (a grid of estimators) or per model (Bayes factors).

    Args:
        records: the records, one per row.
        names: the row labels; by default each record's estimator and K.
        comparison: a `comparison.Comparison` of the records (models): each row is annotated
            with its log Bayes factor against the best.

    Estimates without a valid standard error (verdict unreliable) are drawn hollow, without a bar.
    """
    plt = require()
    names = list(names) if names is not None else [method_name(r) for r in records]
    fig, ax = plt.subplots(figsize=(8, 1.6 + 0.6 * len(records)), layout="constrained")
    y = np.arange(len(records))[::-1]
    colours = {"ok": "C2", "warn": "C1", "unreliable": "C3"}
    for yi, rec in zip(y, records):
        colour = colours.get(rec["status"], "C0")
        se = rec.get("log_z_stderr")
        if se is None:
            ax.plot(rec["log_z"], yi, "o", mfc="none", color=colour)
        else:
            ax.errorbar(rec["log_z"], yi, xerr=se, fmt="o", color=colour, capsize=4)
    references = [r.get("reference_log_z") for r in records]
    if len(set(references)) == 1 and references[0] is not None:
        ax.axvline(references[0], color="k", linestyle="--", linewidth=1.0, label="known log Z")
        ax.legend(loc="best", fontsize="small")
    elif any(ref is not None for ref in references):
        known = [(ref, yi) for ref, yi in zip(references, y) if ref is not None]
        ax.plot([k for k, _ in known], [yi for _, yi in known], "x", color="k", markersize=9, label="known log Z")
        ax.legend(loc="best", fontsize="small")
    if comparison is not None:
        for yi, f in zip(y, comparison.factors):
            text = "best" if f.name == comparison.best_name else (
                f"log B = {f.log_bf:.2f}" + ("" if f.log_bf_stderr is None else f" ± {f.log_bf_stderr:.2f}")
            )
            ax.annotate(text, (f.log_z, yi), xytext=(0, 9), textcoords="offset points", ha="center", fontsize="small")
        ax.set_title(f"log Ẑ per model; log Bayes factor against the best ({comparison.best_name})")
    else:
        ax.set_title(f"log Ẑ per setting on {records[0]['target']}")
    ax.set_yticks(y, names)
    ax.set_xlabel("log Ẑ ± 1 standard error (hollow: unreliable, no valid standard error)")
    ax.set_ylim(-0.7, len(records) - 0.1)
    lo, hi = ax.get_xlim()
    ax.set_xlim(lo - 0.08 * (hi - lo), hi + 0.08 * (hi - lo))
    ax.grid(axis="x", alpha=0.3)
    return fig


def save(fig: Any, path: Path) -> None:
    """Writes the figure to `path` (format from its suffix) atomically, and closes it: a full disk
    leaves no partial figure behind (`files.atomic_write_bytes`)."""
    import io

    from mcd_cli.io import files

    plt = require()
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format=Path(path).suffix.lower().lstrip("."), dpi=120)
    finally:
        plt.close(fig)
    files.atomic_write_bytes(Path(path), buffer.getvalue())
