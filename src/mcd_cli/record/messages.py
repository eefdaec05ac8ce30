"""The words of the verdict: reason codes (`mcd_cli.stats.Reason`) rendered as sentences, and advice.

The statistics and the kernels return codes with their numbers; this is the one module that
words them, names the flags to try and says what to do next (`advice`). `code_dicts` is the same
reasons for machines (the record's `reason_codes`, docs/json.md).

Example:
    >>> from mcd_cli.stats import Reason, scoped
    >>> r = scoped(Reason("ess_low", {"ess": 5.04, "samples": 100, "floor": 10.0}), "repeat", 2)
    >>> text(r)
    'repeat 2: ESS 5.0 of 100, below 10'
    >>> code_dicts([r])
    [{'code': 'ess_low', 'params': {'ess': 5.04, 'samples': 100, 'floor': 10.0}, 'repeat': 2}]
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Union

from mcd_cli.stats import NONFINITE_MAX_FRAC, Combined, Estimate, Reason, Status

_GAP = "log Ẑ exceeds the ELBO (or median log w) by {gap:.3g} nats: "
_MOVES = "use more --refine-steps or --leapfrog"

# One template per code, formatted with the reason's params; a function where the words depend on
# the numbers.
_TEXTS: dict[str, Union[str, Callable[..., str]]] = {
    "nonfinite_weights": lambda dropped, total: (
        f"{dropped} of {total} weights NaN or +inf, dropped ({dropped / total:.1%})"
    ),
    "too_few_samples": "{samples} samples: too few to fit the weights' tail (needs 21 or more)",
    "pareto_k_unfittable": "Pareto k̂ not fittable: fewer than {min_tail} distinct weights in the tail",
    "pareto_k_high": "Pareto k̂ {k:.2f} > {limit:.2f}: tail too heavy",
    "pareto_k_warn": "Pareto k̂ {k:.2f} > {limit}: variance may be infinite",
    "ess_low": "ESS {ess:.1f} of {samples}, below {floor:g}",
    "ess_rough": "ESS {ess:.1f} of {samples}, below {floor:g}: the standard error is itself rough",
    "gap_unreliable": lambda gap, samples: (
        _GAP.format(gap=gap) + f"log-normal weights this spread need N ≫ e^{2 * gap:.3g}, have {samples}"
    ),
    "gap_warn": lambda gap, samples: (
        _GAP.format(gap=gap)
        + f"the standard error needs N ≫ e^{4 * gap:.3g} to see the weights that set it, have {samples}"
    ),
    "genealogy_collapsed": "the genealogy collapsed: {lineages:.1f} effective initial ancestors left",
    "genealogy_negative": "the genealogy variance estimate is negative",
    "no_single_run_stderr": (
        "no single-run standard error with systematic or stratified resampling; use --resampling "
        "multinomial, or --repeats"
    ),
    "stderr_spread_larger": (
        "the genealogy standard error ({genealogy:.3g}) is smaller than the spread of the {populations} "
        "populations ({spread:.3g}) beyond their uncertainties; the spread is reported"
    ),
    "stderr_from_spread": "standard error from the spread of the {populations} independent populations",
    "populations_collapsed": (
        "{collapsed} of the {populations} populations' genealogies collapsed, so their spread may "
        "understate the error; use more refinement moves (--refine-steps) or more particles per population"
    ),
    "effort_unreliable": (
        "the pilot run at this effort (stage {stage}) was unreliable, so this run's `ok` is not trusted: "
        "the effort is not enough for this target; try another --init or sampler"
    ),
    "pareto_k_mean_high": "the {populations} populations' mean Pareto k̂ {k:.2f} > {limit:.2f}: tail too heavy",
    "pareto_k_mean_warn": "the {populations} populations' mean Pareto k̂ {k:.2f} > {limit}: variance may be infinite",
    "pareto_k_outlier": (
        "Pareto k̂ {k:.2f}, beyond the {bound:.2f} the other populations' tail (mean k̂ {others:.2f}) explains: "
        "this population's weights have a heavier tail of their own"
    ),
    "populations_scatter": (
        "the populations' Ẑ scatter by {relative_stderr:.3g} of their mean: log Ẑ has no meaningful "
        "standard error; use more particles per population or more refinement moves"
    ),
    "few_populations": lambda populations, min_populations: (
        f"{populations} SMC population{'s' if populations > 1 else ''}: the genealogy standard error "
        "cannot see errors in how the particles share the modes; for a replicate standard error give "
        f"--samples at least {min_populations}× --particles (--particles N splits them into populations of N)"
    ),
    "moves_barely_move": (
        "the refinement moves barely move the particles (median correlation {correlation:.2f} across "
        "a step's moves): the estimate can be biased far beyond its standard error; " + _MOVES + ", or a "
        "better-placed initial distribution (--init auto)"
    ),
    "not_at_equilibrium": lambda moves, drift, z: (
        f"the final particles are not at equilibrium: {moves} more refinement moves at β = 1 change their "
        f"mean log density by {drift:+.3g} ({abs(z):.0f} standard errors), so the estimate is biased "
        f"by more than its standard error shows; {_MOVES}, or more --samples"
    ),
    "moves_stuck": lambda fraction, moves: (
        f"{100 * fraction:.2g} % of the final particles' weight sits where {moves} more refinement moves at β = 1 "
        "accepted almost nothing (under 5 %): one step size cannot suit every region of this target (a funnel's "
        "neck), so those regions are represented by too few particles and the estimate can be biased far beyond "
        "its standard error; a reparameterisation (non-centred scales) or a better-placed --init"
    ),
    "gradient_nonfinite": lambda fraction: (
        f"the target's gradient is not finite at {100 * fraction:.2g} % of the points about the final particles "
        "where its density is finite, so the moves cannot enter that part of the target and the estimate can miss "
        "its mass by any amount, with every other check passing; `mcd check FILE` shows such a point (a "
        "likelihood whose derivative overflows in float32: write it with log-sigmoid or softplus)"
    ),
    "repeats_disagree": lambda replicate_stderr, delta_stderr, z: (
        f"repeats scatter {'more' if z > 0 else 'less'} than each run claims: replicate SE "
        f"{replicate_stderr:.3g} vs delta SE {delta_stderr:.3g} ({abs(z):.1f} combined sd apart)"
    ),
    "score_network_narrow": (
        "warning: the score network (--hidden {hidden}) is narrower than the target (d = {dim}): its "
        "output spans at most {hidden} of {dim} directions, which limits MCD; use --hidden {dim} or "
        "more (slower per iteration)"
    ),
    "failed": "{error}",
}


def text(reason: Reason) -> str:
    """The sentence of one reason, prefixed with its scope (`"repeat 2: population 3: ..."`).

    Raises:
        ValueError: for a code this module does not know.
    """
    template = _TEXTS.get(reason.code)
    if template is None:
        raise ValueError(f"unknown reason code {reason.code!r}")
    body = template(**reason.params) if callable(template) else template.format(**reason.params)
    return "".join(f"{kind} {index}: " for kind, index in reason.scope) + body


def texts(reasons: Iterable[Reason]) -> list[str]:
    """`text` of each reason, in order."""
    return [text(r) for r in reasons]


def _json(value: Any) -> Any:
    """A param as JSON has it: non-finite floats become None (JSON has no NaN or inf)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return int(value)
    value = float(value)
    return value if math.isfinite(value) else None


def code_dicts(reasons: Iterable[Reason]) -> list[dict]:
    """The reasons for machines: `{"code": ..., "params": {...}}` plus one key per scope level
    (`"repeat": 2`, `"population": 3`). Unknown codes raise, as in `text`."""
    out = []
    for r in reasons:
        if r.code not in _TEXTS:
            raise ValueError(f"unknown reason code {r.code!r}")
        out.append({"code": r.code, "params": {k: _json(v) for k, v in r.params.items()}, **dict(r.scope)})
    return out


_COVER = (
    "train longer (--iterations), use more annealing steps (--steps), a wider or better-placed "
    "initial distribution (the target's `initial:`)"
)


def advice(result: Union[Estimate, Combined]) -> str:
    """One line of what to try next, from an estimate's or a combination's verdict.

    Example:
        >>> import numpy as np
        >>> from mcd_cli.stats import summarize
        >>> advice(summarize(np.zeros(100)))
        'nothing to fix; more samples (--samples) or repeats (--repeats) shrink the standard error'
        >>> advice(summarize(np.random.default_rng(0).normal(size=16384) * 10_000)).split(":")[0]
        'the sampler does not cover the target'
    """
    estimates = result.estimates if isinstance(result, Combined) else (result,)
    nonfinite = max(e.num_nonfinite / (e.num_samples + e.num_nonfinite) for e in estimates)
    if nonfinite >= NONFINITE_MAX_FRAC:
        return (
            f"{nonfinite:.0%} of the weights are NaN or +inf: use smaller steps (more --steps), "
            "check the target with `mcd check`, or train longer (--iterations)"
        )
    if any(r.code == "gradient_nonfinite" for r in result.reasons):
        return (
            "mend the target's gradient first (`mcd check FILE` shows a point where it is not finite): "
            "no sampler setting reaches where it fails"
        )
    if result.status is Status.UNRELIABLE:
        return "the sampler does not cover the target: " + _COVER
    if result.status is Status.WARN:
        extra = (
            "; the repeats disagree with the runs' own SEs: use more --repeats"
            if isinstance(result, Combined) and result.stderr_disagree
            else "; --repeats R gives an empirical standard error"
        )
        return "usable, but to firm it up: " + _COVER + extra
    return "nothing to fix; more samples (--samples) or repeats (--repeats) shrink the standard error"
