"""Bayes factors from independent log-evidence estimates, and how strong the evidence is.

Given models `i = 1..M` with estimates `log Ẑ_i ± se_i`, each model is compared with the best (the
largest `log Ẑ`): `log B_i = log Ẑ_i − log Ẑ_best ≤ 0`. The estimates are independent (each model
has its own key, `fold_in(key(seed), i)`), so their errors add in quadrature:
`se(log B_i) = sqrt(se_i² + se_best²)`. The strength of the evidence for the best model over model i
is read on Kass & Raftery's (1995) scale for `2 ln B = −2 log B_i`:

========  ===================================
2 ln B    evidence for the best model
========  ===================================
0 – 2     not worth more than a bare mention
2 – 6     positive
6 – 10    strong
> 10      very strong
========  ===================================

A comparison is only as good as its estimates, so it warns (one line each) when a model's verdict is
not `ok`, when a model has no valid standard error, and when a difference is within two standard
errors of zero (the data may favour either model at this precision).

Example:
    >>> c = compare(["narrow", "wide"], [-13.80, -15.02], [0.004, 0.006])
    >>> c.best_name, round(c.factors[1].log_bf, 2), round(c.factors[1].two_ln_b, 2)
    ('narrow', -1.22, 2.44)
    >>> c.factors[1].strength
    'positive'
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Sequence

# Kass & Raftery (1995), Table on 2 ln B: upper bounds of each band and its name.
KASS_RAFTERY_CUTOFFS = (2.0, 6.0, 10.0)
KASS_RAFTERY_LABELS = ("not worth more than a bare mention", "positive", "strong", "very strong")
# A difference within this many standard errors of zero does not single out a model.
WITHIN_SE = 2.0


def strength(two_ln_b: float) -> str:
    """The Kass & Raftery (1995) name of the evidence `2 ln B` (B ≥ 1 in favour of one model).

    Example:
        >>> [strength(x) for x in (0.5, 2.0, 7.3, 12.0)]
        ['not worth more than a bare mention', 'positive', 'strong', 'very strong']
    """
    value = abs(float(two_ln_b))
    for cutoff, label in zip(KASS_RAFTERY_CUTOFFS, KASS_RAFTERY_LABELS):
        if value < cutoff:
            return label
    return KASS_RAFTERY_LABELS[-1]


class BayesFactor(NamedTuple):
    """Model `name` against the best model.

    Attributes:
        name: the model.
        log_z, log_z_stderr, status: its estimate, standard error (None: none valid) and verdict.
        log_bf: `log Ẑ − log Ẑ_best` (≤ 0; 0 for the best model itself).
        log_bf_stderr: `sqrt(se² + se_best²)`; None for the best model or when a standard error is missing.
        two_ln_b: `−2 log_bf`, the evidence for the best model on Kass & Raftery's scale.
        strength: its name (`strength`); empty for the best model.
        within_2se: whether `|log_bf| ≤ 2 se` (None when there is no standard error).
    """

    name: str
    log_z: float
    log_z_stderr: Optional[float]
    status: str
    log_bf: float
    log_bf_stderr: Optional[float]
    two_ln_b: float
    strength: str
    within_2se: Optional[bool]


class Comparison(NamedTuple):
    """The Bayes factors of M models against the best, and what to beware of."""

    best: int
    factors: tuple[BayesFactor, ...]
    warnings: tuple[str, ...]

    @property
    def best_name(self) -> str:
        return self.factors[self.best].name

    def as_dict(self) -> dict:
        """Plain JSON-ready values (numbers finite or None)."""
        return {
            "best": self.best_name,
            "best_index": self.best,
            "models": [f._asdict() for f in self.factors],
            "warnings": list(self.warnings),
        }


def _finite(value: Optional[float]) -> Optional[float]:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def compare(
    names: Sequence[str],
    log_z: Sequence[float],
    log_z_stderr: Sequence[Optional[float]],
    statuses: Optional[Sequence[str]] = None,
) -> Comparison:
    """Bayes factors of each model against the one with the largest log Ẑ.

    Args:
        names: the models' names (one per model, at least two).
        log_z: their log evidence estimates (finite).
        log_z_stderr: their standard errors; None where the estimate has none (unreliable).
        statuses: their verdicts (`ok`, `warn`, `unreliable`); all `ok` when omitted.

    Returns:
        A `Comparison`: `factors[i]` compares model i with the best, in the order given.

    Raises:
        ValueError: fewer than two models, lengths that differ, or a log Ẑ that is not finite.
    """
    m = len(names)
    statuses = list(statuses) if statuses is not None else ["ok"] * m
    if m < 2:
        raise ValueError("a comparison needs at least two models")
    if not (len(log_z) == len(log_z_stderr) == len(statuses) == m):
        raise ValueError("names, log_z, log_z_stderr and statuses must have one entry per model")
    values = [float(v) for v in log_z]
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"every log Ẑ must be finite, got {values}")
    errors = [_finite(se) for se in log_z_stderr]
    best = max(range(m), key=values.__getitem__)
    warnings = []
    for name, status in zip(names, statuses):
        if status != "ok":
            warnings.append(
                f"{name}: the estimate's verdict is {status}; Bayes factors involving it are only as "
                "good as that estimate"
            )
    for name, se, status in zip(names, errors, statuses):
        if se is None and status != "unreliable":
            warnings.append(f"{name}: no standard error; the uncertainty of its Bayes factors is unknown")
    factors = []
    for i in range(m):
        log_bf = values[i] - values[best]
        if i == best:
            factors.append(BayesFactor(names[i], values[i], errors[i], statuses[i], 0.0, None, 0.0, "", None))
            continue
        se = None
        if errors[i] is not None and errors[best] is not None:
            se = math.sqrt(errors[i] ** 2 + errors[best] ** 2)
        within = None if se is None else bool(abs(log_bf) <= WITHIN_SE * se)
        if within:
            warnings.append(
                f"{names[i]} vs {names[best]}: log B = {log_bf:.3f} ± {se:.3f} is within {WITHIN_SE:g} "
                "standard errors of 0; the estimates do not tell the two apart (use more samples, "
                "training or --repeats)"
            )
        factors.append(
            BayesFactor(names[i], values[i], errors[i], statuses[i], log_bf, se, -2.0 * log_bf, strength(-2.0 * log_bf), within)
        )
    return Comparison(best, tuple(factors), tuple(warnings))


def from_records(records: Sequence[dict], names: Optional[Sequence[str]] = None) -> Comparison:
    """`compare` of run records (`RunRecord.as_dict()`, docs/json.md), one per model.

    Args:
        records: the models' records, in order.
        names: the models' names; by default each record's `target_spec` (or `target`).
    """
    if names is None:
        names = [str(r.get("target_spec") or r["target"]) for r in records]
    return compare(
        names,
        [r["log_z"] for r in records],
        [r.get("log_z_stderr") for r in records],
        [r.get("status", "ok") for r in records],
    )
