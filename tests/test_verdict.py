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
