"""The verdict in the record, the table and the exit status (--strict)."""

from conftest import records

from mcd_cli.stats import CODES

# Deliberately poor: two annealing steps and 64 samples on a 2-d Gaussian, no training.
# Importance sampling (`--resample 0`): these check the delta-method verdict.
POOR = ["--steps", "2", "--samples", "64", "--backward", "ais", "--iterations", "0", "--seed", "0", "--resample", "0"]
GOOD = ["--steps", "8", "--samples", "4096", "--backward", "ais", "--iterations", "0", "--resample", "0"]


def test_an_unreliable_estimate_has_no_standard_error_and_strict_exits_3_after_writing(mcd, gauss_yaml, tmp_path):
    results = tmp_path / "results.jsonl"
    code, out, err = mcd(["estimate", gauss_yaml, *POOR, "--json", "--strict", "--output", results])
    assert code == 3, err
    rec = records(out)[0]
    assert rec["status"] == "unreliable" and rec["reasons"]
    # The same reasons as codes, right after their texts (docs/json.md).
    assert len(rec["reason_codes"]) == len(rec["reasons"])
    assert all(c["code"] in CODES and set(c["params"]) == set(CODES[c["code"]]) for c in rec["reason_codes"])
    assert list(rec).index("reason_codes") == list(rec).index("reasons") + 1
    assert rec["log_z_stderr"] is None and rec["log_z_stderr_method"] == "none"
    assert rec["delta_stderr"] is not None  # kept beside, for the curious
    assert records(results.read_text()) == [rec]  # written before the exit
    assert "--strict" in err.strip().splitlines()[-1]
    # Without --strict the same run succeeds, and says what to try.
    code, out, err = mcd(["estimate", gauss_yaml, *POOR])
    assert code == 0
    assert "UNRELIABLE" in out and "±" not in out.split("known log Z")[0]
    assert "advice" in out and "UNRELIABLE" in err


def test_a_good_estimate_is_ok_with_a_delta_standard_error(mcd, gauss_yaml):
    code, out, err = mcd(["estimate", gauss_yaml, *GOOD, "--json", "--strict"])
    assert code == 0, err
    rec = records(out)[0]
    assert rec["status"] == "ok" and rec["reasons"] == [] and rec["reason_codes"] == []
    # The headline is the delta SE with the float32 rounding of log Ẑ added in quadrature (`stats.with_rounding`).
    floor = 8 * 2.0**-23 * max(1.0, abs(rec["log_z"]))
    assert rec["log_z_stderr_method"] == "delta"
    assert abs(rec["log_z_stderr"] - (rec["delta_stderr"] ** 2 + floor**2) ** 0.5) < 1e-12
    assert abs(rec["error"]) < 4 * rec["log_z_stderr"]


def test_repeats_use_the_spread_over_replicates_as_the_headline(mcd, gauss_yaml):
    code, out, err = mcd(["estimate", gauss_yaml, *GOOD, "--repeats", "3", "--json"])
    assert code == 0, err
    rec = records(out)[0]
    assert rec["log_z_stderr_method"] == "replicates"
    assert rec["log_z_stderr"] == rec["replicate_stderr"] and rec["delta_stderr"] is not None
    assert isinstance(rec["stderr_disagree"], bool) and len(rec["status_repeats"]) == 3


def test_compare_shows_the_verdict_of_every_cell(mcd, gauss_yaml):
    code, out, err = mcd(["compare", gauss_yaml, "--steps", "2,8", "--samples", "512", "--backward", "ais", "--iterations", "0"])
    assert code == 0, err
    assert "verdict" in out


# --- No false alarms: the best cases are `ok` -----------------------------------------------------

def _float32_equal(n: int, value: float = -496.6, seed: int = 0):
    """`n` log weights equal to float32 precision: `value` plus a few units in the last place."""
    import numpy as np

    ulp = float(np.spacing(np.float32(abs(value))))
    return np.float32(value) + np.random.default_rng(seed).integers(-3, 4, n) * ulp


def test_weights_equal_to_float_precision_are_ok_with_a_negligible_standard_error():
    import numpy as np

    from mcd_cli.stats import summarize
    from mcd_cli.stats.psis import EQUAL_WEIGHTS_RTOL, pareto_k

    lw = _float32_equal(512)
    assert np.unique(lw).size < 10  # few distinct values: the case that used to read as "not fittable"
    e = summarize(lw)
    assert e.status.value == "ok" and e.reasons == () and e.pareto_k == -np.inf
    assert e.log_z_stderr < 1e-4 and abs(e.ess - 512) < 1e-3
    # The tolerance is relative to |log w| and no wider: a spread just above it is fitted as usual.
    wide = np.r_[np.zeros(400), np.linspace(0.0, 3 * EQUAL_WEIGHTS_RTOL, 112)]
    assert np.isfinite(pareto_k(wide)) or pareto_k(wide) == np.inf


def test_equal_weights_in_smc_populations_without_resampling_are_ok():
    """A one-step adaptive schedule (β from 0 to 1 at once, no resampling) with a perfect proposal:
    eight populations of equal weights merge into an `ok` estimate whose SE is the spread, 0."""
    import numpy as np

    from mcd_cli.stats.smc import merge_runs, smc_estimate

    pops = [smc_estimate(0.0, _float32_equal(512, seed=s), np.arange(512), 0) for s in range(8)]
    assert all(p.status.value == "ok" and p.log_z_stderr < 1e-4 for p in pops)
    merged = merge_runs(pops)
    assert merged.status.value == "ok" and merged.reasons == ()
    assert merged.log_z_stderr < 1e-4 and abs(merged.log_z - (-496.6)) < 1e-3


def test_a_collapsed_population_moved_by_an_exact_kernel_does_not_read_as_stuck():
    import jax
    import jax.numpy as jnp

    from mcd_cli.smc.diagnostics import move_correlation
    from mcd_cli.stats.smc import mixing_verdict, smc_estimate

    fresh = jax.random.normal(jax.random.key(0), (1000, 3))
    same = jnp.ones((1000, 3))
    assert abs(float(move_correlation(same, fresh, jnp.zeros(1000)))) < 1e-6  # collapsed, then exact draws
    assert float(move_correlation(fresh, fresh, jnp.zeros(1000))) == 1.0  # not moved at all
    assert float(move_correlation(fresh, same, jnp.zeros(1000))) == 1.0  # moved onto one point
    import numpy as np

    e = smc_estimate(0.0, np.zeros(1000), np.arange(1000), 0)
    assert mixing_verdict(e, float(move_correlation(same, fresh, jnp.zeros(1000)))).status.value == "ok"


def test_a_target_equal_to_the_initial_distribution_is_ok_end_to_end(mcd, tmp_path):
    """The perfect proposal through the whole adaptive SMC run: one temperature, equal weights."""
    path = tmp_path / "same.yaml"
    path.write_text("family: normal\nparams: {dim: 5, loc: 0.0, scale: 1.0}\ninitial: {mean: 0.0, scale: 1.0}\n")
    code, out, err = mcd([
        "estimate", str(path), "--backward", "ais", "--iterations", "0", "--schedule", "adaptive",
        "--resample", "0.5", "--refine", "hmc", "--samples", "2048", "--json", "--strict",
    ])
    assert code == 0, err
    rec = records(out)[0]
    assert rec["status"] == "ok", rec["reasons"]
    assert abs(rec["log_z"]) < 1e-4 and rec["log_z_stderr"] < 1e-4


def test_the_tail_shortfall_is_a_share_of_z():
    """`tail_shortfall` is a share of Ẑ: the same for weights times any constant (log weights
    plus one), to float precision; 0 without a tail, infinite for k̂ ≥ 1; and one tail fit gives
    both it and `pareto_k`."""
    import numpy as np

    from mcd_cli.stats import pareto_k, pareto_tail, tail_shortfall

    rng = np.random.default_rng(0)
    lw = np.log1p(rng.pareto(1.0 / 0.6, size=4096))
    k, shortfall = pareto_tail(lw)
    assert k == pareto_k(lw) and shortfall == tail_shortfall(lw)
    for shift in (-300.0, 17.5, 300.0):
        assert abs(tail_shortfall(lw + shift) / shortfall - 1.0) < 1e-9
    assert tail_shortfall(np.zeros(512)) == 0.0
    assert tail_shortfall(np.log1p(rng.pareto(1.0 / 1.5, size=4096))) == np.inf


def test_the_tail_shortfall_is_what_a_sample_misses():
    """On weights `1 + Lomax` of known tail index k and mean, over 200 samples of N: the median
    log Ẑ is below log Z by less than the median shortfall δ (δ counts the whole excess beyond the
    1 − 1/N quantile, a bound, not the median), and by more than a sixth of it; and δ falls with N
    as N^(k − 1), the rate of a mean of infinite variance (×16 in N: 16^(k−1) = 0.33 for k = 0.6,
    within 0.25-0.45)."""
    import numpy as np

    from mcd_cli.stats import tail_shortfall

    rng = np.random.default_rng(1)
    k = 0.6
    log_mean = np.log(1.0 + 1.0 / (1.0 / k - 1.0))
    medians = {}
    for n in (1024, 16384):
        w = 1.0 + rng.pareto(1.0 / k, size=(200, n))
        missed = np.median(log_mean - np.log(w.mean(axis=1)))
        medians[n] = float(np.median([tail_shortfall(np.log(row)) for row in w]))
        assert medians[n] / 6 < missed < medians[n], (n, missed, medians[n])
    assert 0.25 < medians[16384] / medians[1024] < 0.45


def test_the_shortfall_variant_of_the_tail_rule(monkeypatch):
    """Off (the default) a mean k̂ in (0.5, limit] warns whatever the shortfall; on, it warns only
    where the shortfall is more than `TAIL_SHORTFALL_SE` standard errors."""
    import dataclasses

    from mcd_cli.stats import Estimate, smc

    e = Estimate(0.0, 0.01, "smc-genealogy", 0.01, 0.001, 0.0, 16000.0, 16384, 0.55)
    ks = [0.55, 0.52, 0.61, 0.56]
    small, large = dataclasses.replace(e, tail_shortfall=0.004), dataclasses.replace(e, tail_shortfall=0.02)
    assert smc.TAIL_SHORTFALL_SE is None
    for case in (small, large, e):
        assert [r.code for r in smc.tail_verdict(case, ks, 4096).reasons] == ["pareto_k_mean_warn"]
    monkeypatch.setattr(smc, "TAIL_SHORTFALL_SE", 1.0)
    assert smc.tail_verdict(small, ks, 4096).status.value == "ok"
    assert [r.code for r in smc.tail_verdict(large, ks, 4096).reasons] == ["pareto_k_mean_warn"]
    assert [r.code for r in smc.tail_verdict(e, ks, 4096).reasons] == ["pareto_k_mean_warn"]  # unmeasured
    # Above the limit the shortfall is not asked: unreliable either way.
    assert smc.tail_verdict(small, [0.8, 0.75, 0.9, 0.85], 4096).status.value == "unreliable"
