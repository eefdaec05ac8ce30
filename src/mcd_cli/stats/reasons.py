"""Why a verdict is not `ok`: a short code with the numbers behind it, no words.

A `Reason` is what the statistics return; `mcd_cli.record.messages` turns it into a sentence (and a
flag to try) at the top, so the numerics never hold user-facing text. `CODES` lists every code with
the names of its parameters (docs/json.md shows the same list).

Example:
    >>> r = Reason("ess_low", {"ess": 5.0, "samples": 100, "floor": 10.0})
    >>> scoped(scoped(r, "population", 3), "repeat", 2).scope
    (('repeat', 2), ('population', 3))
"""

from __future__ import annotations

from typing import NamedTuple


class Reason(NamedTuple):
    """One reason of a verdict.

    Attributes:
        code: what happened, a short snake_case word from `CODES`.
        params: the numbers (and names) it happened with: floats, ints and strings only.
        scope: where it came from, outermost first: `(("repeat", 2), ("population", 3))` is
            population 3 of repeat 2 (1-based, as shown to people).
    """

    code: str
    params: dict
    scope: tuple = ()


def scoped(reason: Reason, kind: str, index: int) -> Reason:
    """`reason` as seen from one level up: `(kind, index)` becomes its outermost scope."""
    return reason._replace(scope=((kind, int(index)), *reason.scope))


# Every code and its parameters. Importance weights (`importance.verdict`):
CODES: dict[str, tuple[str, ...]] = {
    "nonfinite_weights": ("dropped", "total"),  # NaN or +inf weights dropped
    "too_few_samples": ("samples",),  # too few to fit a tail at all
    "pareto_k_unfittable": ("min_tail",),  # too few distinct weights in the tail
    "pareto_k_high": ("k", "limit"),  # k̂ above the limit for N samples
    "pareto_k_warn": ("k", "limit"),  # k̂ above 0.5
    "ess_low": ("ess", "samples", "floor"),
    "ess_rough": ("ess", "samples", "floor"),
    "gap_unreliable": ("gap", "samples"),  # log Ẑ − ELBO too large for the estimate
    "gap_warn": ("gap", "samples"),  # ... for its standard error
    # One SMC run (`smc.smc_estimate`):
    "genealogy_collapsed": ("lineages",),
    "genealogy_negative": (),
    "no_single_run_stderr": (),  # resampling other than multinomial
    # SMC populations (`smc.merge_runs`, `smc.population_verdict`):
    "stderr_spread_larger": ("genealogy", "spread", "populations"),
    "stderr_from_spread": ("populations",),
    "populations_collapsed": ("collapsed", "populations"),
    "populations_scatter": ("relative_stderr",),
    "few_populations": ("populations", "min_populations"),
    "pareto_k_mean_high": ("k", "limit", "populations"),  # the populations' mean k̂ above the limit
    "pareto_k_mean_warn": ("k", "limit", "populations"),  # ... above 0.5
    "pareto_k_outlier": ("k", "others", "bound"),  # one population's tail heavier than the others'
    # The moves of adaptive tempering and the final population (`smc`):
    "moves_barely_move": ("correlation",),
    "not_at_equilibrium": ("moves", "drift", "z"),
    "moves_stuck": ("fraction", "moves"),
    "gradient_nonfinite": ("fraction",),  # points about the final particles: finite density, gradient not
    # Repeats (`repeats.combine_estimates`):
    "repeats_disagree": ("replicate_stderr", "delta_stderr", "z"),
    # The default policy (`mcd_cli.policy`): the final run's effort had an `unreliable` pilot.
    "effort_unreliable": ("stage",),
    # Settings (`kernels.mcd.warnings`) and runs that failed (`record.datum_record`):
    "score_network_narrow": ("hidden", "dim"),
    "failed": ("error",),
}
