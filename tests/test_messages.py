"""The words of the verdict (mcd_cli.record.messages): every reason code renders, the texts are the ones the
records have always had, and the advice is unchanged."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mcd_cli import stats
from mcd_cli.record import messages
from mcd_cli.kernels import mcd
from mcd_cli.stats import CODES, Reason, scoped

# The texts and advice of these verdicts as the statistics worded them before the reason codes
# (copied from the output of the former `mcd_cli/stats.py`, character by character).
HISTORICAL = {
    'verdict': ['Pareto k̂ 1.20 > 0.67: tail too heavy', 'ESS 5.0 of 1000, below 10', 'log Ẑ exceeds the ELBO (or median log w) by 3.89 nats: log-normal weights this spread need N ≫ e^7.78, have 1000'],
    'warn_gap': ['Pareto k̂ 0.78 > 0.67: tail too heavy', 'ESS 8.8 of 1000, below 10', 'log Ẑ exceeds the ELBO (or median log w) by 2.56 nats: the standard error needs N ≫ e^10.2 to see the weights that set it, have 1000'],
    'small': ['Pareto k̂ 0.51 > 0.50: tail too heavy', 'ESS 22.8 of 100, below 100: the standard error is itself rough', 'log Ẑ exceeds the ELBO (or median log w) by 0.975 nats: the standard error needs N ≫ e^3.9 to see the weights that set it, have 100'],
    'nan': ['2 of 102 weights NaN or +inf, dropped (2.0%)'],
    'merge_col': ['population 1: the genealogy collapsed: 1.0 effective initial ancestors left', 'population 2: the genealogy collapsed: 1.0 effective initial ancestors left', 'population 3: the genealogy collapsed: 1.0 effective initial ancestors left', 'population 4: the genealogy collapsed: 1.0 effective initial ancestors left', 'standard error from the spread of the 4 independent populations', "4 of the 4 populations' genealogies collapsed, so their spread may understate the error; use more refinement moves (--refine-steps) or more particles per population", "the populations' Ẑ scatter by 1 of their mean: log Ẑ has no meaningful standard error; use more particles per population or more refinement moves"],
    'spread': ['the genealogy standard error (0) is smaller than the spread of the 4 populations (0.261) beyond their uncertainties; the spread is reported'],
    'flags': ["the refinement moves barely move the particles (median correlation 0.50 across a step's moves): the estimate can be biased far beyond its standard error; use more --refine-steps or --leapfrog, or a better-placed initial distribution (--init auto)", 'the final particles are not at equilibrium: 10 more refinement moves at β = 1 change their mean log density by -0.0123 (5 standard errors), so the estimate is biased by more than its standard error shows; use more --refine-steps or --leapfrog, or more --samples', '1 SMC population: the genealogy standard error cannot see errors in how the particles share the modes; for a replicate standard error give --samples at least 4× --particles (--particles N splits them into populations of N)'],
    'pop2': ['2 SMC populations: the genealogy standard error cannot see errors in how the particles share the modes; for a replicate standard error give --samples at least 4× --particles (--particles N splits them into populations of N)'],
    'nsr3': ['population 1: no single-run standard error with systematic or stratified resampling; use --resampling multinomial, or --repeats', 'population 2: no single-run standard error with systematic or stratified resampling; use --resampling multinomial, or --repeats', 'population 3: no single-run standard error with systematic or stratified resampling; use --resampling multinomial, or --repeats'],
    'repeats': ['repeat 1: standard error from the spread of the 4 independent populations', 'repeat 2: population 1: the genealogy collapsed: 1.0 effective initial ancestors left', 'repeat 2: population 2: the genealogy collapsed: 1.0 effective initial ancestors left', 'repeat 3: 2 SMC populations: the genealogy standard error cannot see errors in how the particles share the modes; for a replicate standard error give --samples at least 4× --particles (--particles N splits them into populations of N)'],
    'repeats_advice': "the sampler does not cover the target: train longer (--iterations), use more annealing steps (--steps), a wider or better-placed initial distribution (the target's `initial:`)",
    'same': ['repeats scatter less than each run claims: replicate SE 0 vs delta SE 0.00275 (inf combined sd apart)'],
    'same_advice': "usable, but to firm it up: train longer (--iterations), use more annealing steps (--steps), a wider or better-placed initial distribution (the target's `initial:`); the repeats disagree with the runs' own SEs: use more --repeats",
    'advice_ok': 'nothing to fix; more samples (--samples) or repeats (--repeats) shrink the standard error',
    'advice_bad': "the sampler does not cover the target: train longer (--iterations), use more annealing steps (--steps), a wider or better-placed initial distribution (the target's `initial:`)",
    'advice_nan': '17% of the weights are NaN or +inf: use smaller steps (more --steps), check the target with `mcd check`, or train longer (--iterations)',
    'advice_warn': "usable, but to firm it up: train longer (--iterations), use more annealing steps (--steps), a wider or better-placed initial distribution (the target's `initial:`); --repeats R gives an empirical standard error",
}

_SAMPLE = {"error": "all 8 importance weights are zero or not finite"}


def _sample_params(code: str) -> dict:
    return {name: _SAMPLE.get(name, 3) for name in CODES[code]}


def _verdicts() -> dict:
    """The same verdicts as HISTORICAL, computed now."""
    s = stats
    out = {}
    out["verdict"] = s.verdict(np.random.default_rng(0).normal(size=1000) * 3.0, 5.0, 1.2)[1]
    out["warn_gap"] = s.summarize(np.random.default_rng(1).normal(size=1000) * 2.2).reasons
    out["small"] = s.summarize(np.random.default_rng(2).normal(size=100) * 1.5).reasons
    out["nan"] = s.summarize(np.r_[np.zeros(100), np.nan, np.inf]).reasons

    def col(v):
        return s.smc_estimate(v, np.zeros(256), np.zeros(256, np.int64), 30)

    out["merge_col"] = s.merge_runs([col(v) for v in (0.0, 0.0, 0.0, 12.0)]).reasons
    e = s.smc_estimate(0.0, np.zeros(256), np.arange(256), 0)
    runs = [s.smc_estimate(v, np.zeros(256), np.arange(256), 0) for v in np.log([0.5, 1.5, 0.6, 1.4])]
    out["spread"] = s.merge_runs(runs).reasons
    out["flags"] = s.population_verdict(s.stationarity_verdict(s.mixing_verdict(e, 0.5), -0.0123, -5.0, 0.0, 10), 1).reasons
    out["pop2"] = s.population_verdict(e, 2).reasons
    r = np.random.default_rng(3)
    nsr = [
        s.smc_estimate(v, 0.1 * r.normal(size=1024), np.arange(1024) // 4, 1, multinomial=False)
        for v in np.log([0.8, 1.1, 0.9, 1.3])
    ]
    out["nsr3"] = s.merge_runs(nsr[:3]).reasons
    c = s.combine_estimates([s.merge_runs(nsr), s.merge_runs([col(0.0), col(0.1)]), s.population_verdict(e, 2)])
    out["repeats"] = c.reasons
    out["repeats_advice"] = messages.advice(c)
    h = s.summarize(np.random.default_rng(4).normal(size=4000) * 0.3)
    c2 = s.combine_estimates([h, h, h])
    out["same"] = c2.reasons
    out["same_advice"] = messages.advice(c2)
    out["advice_ok"] = messages.advice(h)
    out["advice_bad"] = messages.advice(s.summarize(np.random.default_rng(0).normal(size=1000) * 3.0))
    out["advice_nan"] = messages.advice(s.summarize(np.r_[np.zeros(100), np.full(20, np.nan)]))
    out["advice_warn"] = messages.advice(s.summarize(np.r_[np.zeros(100), np.nan, np.inf]))
    return out


@pytest.fixture(scope="module")
def verdicts() -> dict:
    return _verdicts()


@pytest.mark.parametrize("code", sorted(CODES))
def test_every_code_renders_and_serialises(code):
    reason = scoped(scoped(Reason(code, _sample_params(code)), "population", 3), "repeat", 2)
    line = messages.text(reason)
    assert line.startswith("repeat 2: population 3: ") and len(line) > len("repeat 2: population 3: ")
    assert "{" not in line  # every placeholder filled
    (entry,) = messages.code_dicts([reason])
    assert entry == {"code": code, "params": _sample_params(code), "repeat": 2, "population": 3}
    assert list(entry)[:2] == ["code", "params"]
    json.dumps(entry, allow_nan=False)


def test_unknown_codes_raise():
    with pytest.raises(ValueError, match="unknown reason code"):
        messages.text(Reason("no_such_code", {}))
    with pytest.raises(ValueError, match="unknown reason code"):
        messages.code_dicts([Reason("no_such_code", {})])


@pytest.mark.parametrize("name", sorted(HISTORICAL))
def test_texts_and_advice_are_the_historical_strings(verdicts, name):
    now = verdicts[name]
    assert (now if isinstance(now, str) else messages.texts(now)) == HISTORICAL[name]


def test_scope_is_outermost_first_and_merge_drops_by_code(verdicts):
    scopes = [r.scope for r in verdicts["repeats"]]
    assert scopes == [(("repeat", 1),), (("repeat", 2), ("population", 1)), (("repeat", 2), ("population", 2)),
                      (("repeat", 3),)]
    # Four systematic-resampling populations: the spread replaces the genealogy, and the note asking
    # for multinomial resampling is dropped by its code.
    assert [r.code for r in verdicts["repeats"]][0] == "stderr_from_spread"
    assert all(r.code == "no_single_run_stderr" for r in verdicts["nsr3"])


def test_code_dicts_are_json_without_infinities(verdicts):
    (entry,) = messages.code_dicts(verdicts["same"])  # identical repeats: z = −inf
    assert entry["code"] == "repeats_disagree" and entry["params"]["z"] is None
    assert entry["params"]["replicate_stderr"] == 0.0
    json.dumps(messages.code_dicts(verdicts["repeats"]), allow_nan=False)


def test_the_mcd_kernel_warning_keeps_its_words():
    config = SimpleNamespace(hidden=16)  # the one setting the warning reads
    assert mcd.warnings(8, config) == []
    (reason,) = mcd.warnings(40, config)
    assert reason == Reason("score_network_narrow", {"hidden": 16, "dim": 40})
    assert messages.text(reason) == (
        "warning: the score network (--hidden 16) is narrower than the target (d = 40): its output spans "
        "at most 16 of 40 directions, which limits MCD; use --hidden 40 or more (slower per iteration)"
    )


def test_docs_list_every_code():
    doc = (Path(__file__).parents[1] / "docs" / "json.md").read_text()
    for code, params in CODES.items():
        assert f"`{code}`" in doc, code
        assert all(f"`{p}`" in doc for p in params), code
