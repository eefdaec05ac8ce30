"""Bayes factors: the library (`mcd_cli.stats.comparison`) and `mcd compare A B [C ...]`.

The library is checked on exact arithmetic (quadrature of independent standard errors, the Kass &
Raftery cut-offs at their boundaries, the warnings). The command is checked on two NumPyro models of
the same 20 coin flips whose evidences are exact (Beta–Bernoulli with priors Beta(2, 3) and
Beta(1, 1)): the log Bayes factor must land within four of its reported standard errors of the exact
one. Model i's keys are `fold_in(key(seed), i)`: its record equals `mcd estimate --model-index i`.
"""

from __future__ import annotations

import importlib.util
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import NO_TRAIN, NO_TRAIN_COMPARE, one_line_error, records
from mcd_cli.stats import comparison
from mcd_cli.stats.comparison import compare, strength

EXAMPLES = Path(__file__).resolve().parents[1] / "targets" / "numpyro"
# float32 densities; the AIS log Ẑ is accumulated in float32 over K steps.
FLOAT_ATOL = 1e-3


def test_strength_follows_kass_and_raftery_cutoffs():
    assert strength(0.0) == strength(1.999) == "not worth more than a bare mention"
    assert strength(2.0) == strength(5.999) == "positive"
    assert strength(6.0) == strength(9.999) == "strong"
    assert strength(10.0) == strength(1e6) == "very strong"
    assert strength(-7.0) == "strong"  # the size of the evidence, whichever model it favours


def test_log_bayes_factors_against_the_best_with_standard_errors_in_quadrature():
    c = compare(["a", "b", "c"], [-10.0, -7.5, -12.25], [0.3, 0.4, None], ["ok", "ok", "warn"])
    assert c.best == 1 and c.best_name == "b"
    a, b, cc = c.factors
    assert b.log_bf == 0.0 and b.log_bf_stderr is None and b.strength == ""
    assert a.log_bf == -2.5 and a.log_bf_stderr == pytest.approx(0.5, abs=1e-15)
    assert a.two_ln_b == 5.0 and a.strength == "positive" and a.within_2se is False
    assert cc.log_bf == -4.75 and cc.log_bf_stderr is None and cc.within_2se is None
    assert cc.two_ln_b == 9.5 and cc.strength == "strong"
    assert any(w.startswith("c: the estimate's verdict is warn") for w in c.warnings)
    assert any(w.startswith("c: no standard error") for w in c.warnings)
    assert len(c.warnings) == 2


def test_a_difference_within_two_standard_errors_is_warned_about():
    c = compare(["a", "b"], [0.0, 0.25], [0.1, 0.1])
    assert c.factors[0].within_2se is True  # 0.25 < 2 · sqrt(0.02) = 0.283
    assert any("within 2 standard errors" in w for w in c.warnings)
    c = compare(["a", "b"], [0.0, 0.3], [0.1, 0.1])
    assert c.factors[0].within_2se is False and not c.warnings


def test_an_unreliable_model_is_warned_about_and_has_no_standard_error():
    c = compare(["a", "b"], [-3.0, -1.0], [None, 0.1], ["unreliable", "ok"])
    assert c.factors[0].log_bf_stderr is None
    assert c.warnings == ("a: the estimate's verdict is unreliable; Bayes factors involving it are only as good as that estimate",)


@pytest.mark.parametrize(
    "args, expected",
    [
        ((["a"], [0.0], [0.1]), "at least two models"),
        ((["a", "b"], [0.0], [0.1, 0.1]), "one entry per model"),
        ((["a", "b"], [0.0, math.nan], [0.1, 0.1]), "must be finite"),
    ],
)
def test_bad_comparisons_are_refused(args, expected):
    with pytest.raises(ValueError, match=expected):
        compare(*args)


def test_from_records_names_models_by_their_spec():
    recs = [
        {"target_spec": "a.py", "target": "a", "log_z": -1.0, "log_z_stderr": 0.1, "status": "ok"},
        {"target_spec": None, "target": "b", "log_z": -2.0, "log_z_stderr": None, "status": "unreliable"},
    ]
    c = comparison.from_records(recs)
    assert [f.name for f in c.factors] == ["a.py", "b"] and c.best_name == "a.py"
    assert c.as_dict()["best"] == "a.py" and c.as_dict()["models"][1]["log_bf"] == -1.0


# The command line ------------------------------------------------------------------------------

NUMPYRO_FAST = ["--backward", "ais", "--iterations", "0", "--steps", "8", "--samples", "2048", "--init", "target"]


def _exact_log_z(a: float, b: float) -> float:
    from scipy.special import betaln

    return float(betaln(a + 14, b + 6) - betaln(a, b))


@pytest.mark.slow
def test_compare_two_numpyro_models_matches_the_exact_bayes_factor(mcd, tmp_path):
    pytest.importorskip("numpyro")
    models = [str(EXAMPLES / "beta_bernoulli.py"), str(EXAMPLES / "beta_bernoulli_uniform.py")]
    out_file = tmp_path / "cmp.jsonl"
    figure = tmp_path / "models.svg"
    code, out, err = mcd(["compare", *models, *NUMPYRO_FAST, "--output", out_file, "--plot", figure])
    assert code == 0, err
    if importlib.util.find_spec("matplotlib") is not None:
        assert ET.parse(figure).getroot().tag.endswith("svg")
    # The table: one row per model and the Bayes factor against the best.
    for text in ("beta_bernoulli_uniform", "log B vs best", "2 ln B", "not worth more than a bare mention", "best"):
        assert text in out
    recs = records(out_file.read_text())
    assert [r["kind"] for r in recs] == ["model", "model", "comparison"]
    first, second, summary = recs
    assert [first["model_index"], second["model_index"]] == [0, 1]
    assert first["config"]["model_index"] == 0 and second["config"]["model_index"] == 1
    assert summary["best"] == "beta_bernoulli_uniform" and summary["best_index"] == 1
    row = summary["models"][0]
    exact = _exact_log_z(2.0, 3.0) - _exact_log_z(1.0, 1.0)
    assert row["log_bf"] == pytest.approx(first["log_z"] - second["log_z"], abs=1e-12)
    assert row["log_bf_stderr"] == pytest.approx(math.hypot(first["log_z_stderr"], second["log_z_stderr"]), rel=1e-12)
    assert abs(row["log_bf"] - exact) < 4 * row["log_bf_stderr"] + FLOAT_ATOL, (row, exact)
    assert row["strength"] == "not worth more than a bare mention"
    assert row["target_spec"] == models[0] and row["target_sha256"] == first["target_sha256"]


def test_models_get_independent_keys_estimate_reproduces_each_and_load_replays_them(mcd, gauss_yaml, tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(gauss_yaml.read_text())
    code, out, err = mcd(["compare", gauss_yaml, other, *NO_TRAIN_COMPARE, "--json", "-q"])
    assert code == 0, err
    first, second, _ = records(out)
    # The same density at positions 0 and 1: different keys, so different estimates.
    assert first["log_z"] != second["log_z"]
    saved = []
    for i, rec in enumerate((first, second)):
        path = tmp_path / f"m{i}.npz"
        args = ["estimate", rec["target_spec"], *NO_TRAIN, "--model-index", i]  # NO_TRAIN: IS, as compare
        args += ["--save", path, "--json", "-q"]
        if i == 0 and importlib.util.find_spec("matplotlib") is not None:
            args += ["--plot", tmp_path / "m0.png"]
        code, out, err = mcd(args)
        assert code == 0, err
        (alone,) = records(out)
        assert alone["log_z"] == rec["log_z"] and alone["kind"] == "estimate" and alone["model_index"] == i
        saved.append(path)
    # The targets may come from a --config file; --load takes one file per target, in order.
    config = tmp_path / "run.yaml"
    config.write_text(f"target: [{gauss_yaml}, {other}]\nsamples: 64\n")
    run = ["compare", "--config", config, "--json", "-q"]
    code, out, err = mcd(run + ["--load", f"{saved[0]},{saved[1]}"])
    assert code == 0, err
    replay = records(out)
    assert [r["kind"] for r in replay] == ["model", "model", "comparison"]
    assert [r["loaded_from"] for r in replay[:2]] == [str(p) for p in saved]
    assert [r["log_z"] for r in replay[:2]] == [first["log_z"], second["log_z"]]
    if importlib.util.find_spec("matplotlib") is not None:
        import matplotlib.image

        assert matplotlib.image.imread(tmp_path / "m0.png").ndim == 3
    assert [m["name"] for m in replay[2]["models"]] == ["tiny_gauss", "other"]
    code, _, err = mcd(run + ["--load", str(saved[0])])
    assert code == 2 and "--load has 1 file(s) for 2 targets" in one_line_error(err)


def test_root_keys_of_models_fold_in_their_position():
    import jax

    from mcd_cli.run import root_key

    data = jax.random.key_data
    assert (data(root_key(3)) == data(jax.random.key(3))).all()
    assert (data(root_key(3, 1)) == data(jax.random.fold_in(jax.random.key(3), 1))).all()


@pytest.mark.parametrize(
    "extra, expected",
    [
        (["--steps", "2,3"], "--steps 2,3: several targets are compared with one setting"),
        (["--sampler", "ula,uha"], "--sampler ula,uha: several targets"),
        (["--backward", "ais,mcd"], "--backward ais,mcd: several targets"),
        (["--sampler", "hmc"], "--sampler: 'hmc' is not one of"),
    ],
)
def test_several_targets_with_list_valued_options_is_a_usage_error(mcd, gauss_yaml, extra, expected):
    code, out, err = mcd(["compare", gauss_yaml, gauss_yaml, "--iterations", "0", *extra])
    assert code == 2 and out == ""
    assert expected in one_line_error(err)


def test_load_with_one_target_points_to_estimate(mcd, gauss_yaml):
    code, _, err = mcd(["compare", gauss_yaml, "--load", "a.npz", "--iterations", "0"])
    assert code == 2 and "mcd estimate TARGET --load FILE" in one_line_error(err)
