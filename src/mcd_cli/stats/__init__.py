"""The statistics of an estimate: log Z, its standard error, and a verdict with typed reasons.

- `importance`: one vector of importance weights -> `Estimate` (log Ẑ, delta-method SE, ESS,
  ELBO, k̂) and its verdict (`Status`, `Reason`s);
- `psis`: Pareto k̂ of the weights' right tail;
- `smc`: an SMC run's genealogy SE, merging populations, and the verdicts only SMC has;
- `repeats`: R repeats -> `Combined` (the headline), and the mean over per-datum estimates;
- `histogram`: the bounded `WeightSummary` the figures draw;
- `reasons`: the `Reason` type and its codes (worded by `mcd_cli.record.messages`, never here).

All host-side float64 numpy/scipy: they run once per estimate.

Example:
    >>> import numpy as np
    >>> e = summarize(np.random.default_rng(0).normal(size=4096) * 0.5)
    >>> e.status.value, e.log_z_stderr_method, e.reasons
    ('ok', 'delta', ())
"""

from mcd_cli.stats.histogram import HISTOGRAM_BINS, HISTOGRAM_SPAN, WeightSummary, summarize_weights
from mcd_cli.stats.importance import (
    ESS_MIN,
    ESS_WARN,
    GAP_MARGIN,
    NONFINITE_MAX_FRAC,
    AllWeightsNonFinite,
    Estimate,
    Status,
    delta_stderr_uncertainty,
    ess_floor,
    with_rounding,
    summarize,
    verdict,
    worst,
)
from mcd_cli.stats.psis import (
    PARETO_K_BAD, PARETO_K_WARN, PARETO_MIN_TAIL, pareto_k, pareto_k_limit, pareto_tail, tail_length, tail_shortfall,
)
from mcd_cli.stats.reasons import CODES, Reason, scoped
from mcd_cli.stats.repeats import (
    STDERR_DISAGREE_Z,
    STDERR_WILD_Z,
    Combined,
    DataSummary,
    combine,
    combine_estimates,
    stderr_disagreement,
    summarize_data,
)
from mcd_cli.stats.smc import (
    MAX_RELATIVE_STDERR,
    MIN_POPULATIONS,
    MIXING_BAD,
    MIXING_WARN,
    STATIONARITY_WARN,
    STUCK_WARN,
    TAIL_OUTLIER_LEVEL,
    genealogy_relative_variance,
    merge_runs,
    mixing_verdict,
    pooled_pareto_k,
    population_spread,
    population_verdict,
    smc_estimate,
    stationarity_verdict,
    tail_values,
    tail_verdict,
)

__all__ = [
    "AllWeightsNonFinite", "CODES", "Combined", "DataSummary", "ESS_MIN", "ESS_WARN", "Estimate", "GAP_MARGIN",
    "HISTOGRAM_BINS", "HISTOGRAM_SPAN", "MAX_RELATIVE_STDERR", "MIN_POPULATIONS", "MIXING_BAD", "MIXING_WARN",
    "NONFINITE_MAX_FRAC", "PARETO_K_BAD", "PARETO_K_WARN", "PARETO_MIN_TAIL", "Reason", "STATIONARITY_WARN", "STUCK_WARN",
    "STDERR_DISAGREE_Z", "STDERR_WILD_Z", "Status", "TAIL_OUTLIER_LEVEL", "WeightSummary", "combine", "combine_estimates",
    "delta_stderr_uncertainty", "ess_floor", "genealogy_relative_variance", "merge_runs", "mixing_verdict",
    "pareto_k", "pareto_k_limit", "pareto_tail", "tail_shortfall", "pooled_pareto_k", "population_spread", "population_verdict", "scoped", "smc_estimate",
    "stationarity_verdict", "stderr_disagreement", "summarize", "summarize_data", "summarize_weights",
    "tail_length", "tail_values", "tail_verdict", "verdict", "with_rounding", "worst",
]
