"""A bounded summary of the log weights, enough to draw them: a histogram and the fitted tail.

A run keeps this instead of its N weights (`plot` draws it); its size does not grow with N beyond
the PSIS tail (`M ≤ 3√N` weights).

Example:
    >>> s = summarize_weights(np.random.default_rng(0).normal(size=4096))
    >>> sum(s.counts), len(s.tail), round(s.pareto_k, 1)
    (4096, 192, 0.1)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np
import scipy.stats

from mcd_cli.stats.psis import PARETO_MIN_TAIL, _gpd_fit_log, _log1mexp, pareto_k, tail_length

HISTOGRAM_BINS = 60
HISTOGRAM_SPAN = 4.0


@dataclasses.dataclass(frozen=True)
class WeightSummary:
    """A bounded summary of N log weights, enough to draw them: a histogram and the fitted tail.

    Its size does not grow with N beyond the PSIS tail (`M ≤ 3√N` weights), so a run keeps it
    instead of the weights.

    Attributes:
        edges, counts: a histogram of the finite log weights (`HISTOGRAM_BINS` bins), from
            `max(min, median − HISTOGRAM_SPAN · (max − median))` to the largest.
        num_below: finite weights below the histogram's range (negligible ones), not in it.
        num_zero: weights that are exactly zero (log w = −inf), left out of the histogram.
        num_samples: N, the weights summarised (NaN and +inf already dropped).
        log_cutoff: log w at the PSIS tail cutoff (None when there is no tail to fit).
        tail: the log weights above the cutoff, ascending (the exceedances k̂ is fitted to).
        pareto_k: k̂ of those exceedances (`pareto_k`); `pareto_sigma`: the fitted GPD scale of
            `w − w_cut`, in units of the largest weight (None without a fit).
    """

    edges: tuple[float, ...]
    counts: tuple[int, ...]
    num_below: int
    num_zero: int
    num_samples: int
    log_cutoff: Optional[float]
    tail: tuple[float, ...]
    pareto_k: float
    pareto_sigma: Optional[float]

    def tail_counts(self, edges: Sequence[float]) -> np.ndarray:
        """Expected counts of the fitted tail in the log-weight bins `edges` (0 below the cutoff).

        The tail holds the `len(tail)` largest weights; each lies above `w_cut` by a GPD(k̂, σ)
        exceedance, so bin `[y₀, y₁)` expects `M · (F(e^y₁ − w_cut) − F(e^y₀ − w_cut))`, with
        weights in units of the largest.
        """
        e = np.asarray(edges, dtype=np.float64)
        if self.log_cutoff is None or self.pareto_sigma is None or not self.tail or not self.pareto_sigma > 0:
            return np.zeros(e.size - 1)
        top = self.tail[-1]
        x = np.clip(np.exp(np.minimum(e, top) - top) - math.exp(self.log_cutoff - top), 0.0, None)
        cdf = scipy.stats.genpareto.cdf(x, c=self.pareto_k, scale=self.pareto_sigma)
        return len(self.tail) * np.diff(cdf)


def summarize_weights(log_w: np.ndarray, bins: int = HISTOGRAM_BINS) -> WeightSummary:
    """The `WeightSummary` of a vector of log weights (NaN and +inf are dropped first)."""
    lw = np.asarray(log_w, dtype=np.float64).ravel()
    lw = lw[~np.isnan(lw) & (lw != np.inf)]
    finite_lw = lw[np.isfinite(lw)]
    num_below = 0
    if finite_lw.size == 0:
        counts, edges = np.zeros(bins, dtype=int), np.linspace(-1.0, 1.0, bins + 1)
    else:
        # The estimate lives in the upper part of the weights; a long lower tail of negligible
        # weights would squeeze it into a few bins, so the range stops HISTOGRAM_SPAN times the
        # median-to-maximum distance below the median (all of it for normal log weights).
        top, median = float(finite_lw.max()), float(np.median(finite_lw))
        low = max(float(finite_lw.min()), median - HISTOGRAM_SPAN * (top - median))
        num_below = int(np.sum(finite_lw < low))
        counts, edges = np.histogram(finite_lw, bins=bins, range=(low, top) if top > low else None)
    k, cutoff, tail, sigma = float("inf"), None, np.empty(0), None
    n, tail_len = lw.size, tail_length(lw.size)
    if tail_len >= PARETO_MIN_TAIL:
        ordered = np.sort(lw)
        cut = ordered[-tail_len - 1]
        tail = ordered[-tail_len:]
        tail = tail[tail > cut]
        k = pareto_k(lw)
        if tail.size and np.unique(tail).size >= PARETO_MIN_TAIL:
            _, sigma_x = _gpd_fit_log(tail + _log1mexp(cut - tail))
            # σ was fitted in units of the largest exceedance, w_max − w_cut; rescale to w_max.
            sigma = sigma_x * -math.expm1(cut - tail[-1]) if math.isfinite(sigma_x) else None
            cutoff = float(cut) if math.isfinite(cut) else None
    return WeightSummary(
        edges=tuple(float(e) for e in edges),
        counts=tuple(int(c) for c in counts),
        num_below=num_below,
        num_zero=int(np.sum(lw == -np.inf)),
        num_samples=int(n),
        log_cutoff=cutoff,
        tail=tuple(float(t) for t in tail),
        pareto_k=float(k),
        pareto_sigma=None if sigma is None else float(sigma),
    )
