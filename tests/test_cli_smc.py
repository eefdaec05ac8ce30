"""`mcd estimate` with SMC end to end: adaptive tempering, learned kernels inside SMC, the record's
`smc` section, the table's line, and the one-line usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import NO_TRAIN, one_line_error, records
from golden_cases import CASES

GOLDEN = [json.loads(line) for line in (Path(__file__).parent / "golden" / "records.jsonl").read_text().splitlines()
          if line.strip()]

ADAPTIVE = ["--backward", "ais", "--iterations", "0", "--resample", "0.5", "--refine", "mala",
            "--schedule", "adaptive", "--samples", "256"]


def test_adaptive_tempered_smc_end_to_end(mcd, gauss_yaml):
    code, out, err = mcd(["estimate", gauss_yaml, *ADAPTIVE, "--json"])
    assert code == 0, err
    (rec,) = records(out)
    assert rec["label"] == "SMC-MALA" and rec["schedule"] == "adaptive"
    assert rec["log_z_stderr_method"] == "smc-genealogy" and rec["log_z_stderr"] > 0
    # Known log Z = 0: within 4 of its own standard errors (the temperatures and tuning replayed
    # from a population of their own: no adaptive bias, tests/test_replay.py).
    assert abs(rec["error"]) < 4 * rec["log_z_stderr"]
    smc = rec["smc"]
    k = rec["temperatures"]
    assert rec["steps"] is None and rec["sampler"] is None and rec["backward"] is None
    assert smc["steps"] == [k] and len(smc["beta"]) == k and smc["beta"][-1] == 1.0
    assert all(0 < b for b in smc["beta"]) and smc["beta"] == sorted(smc["beta"])
    assert 0.0 < smc["mean_acceptance"] < 1.0 and smc["refine_every"] == "step"
    assert all(1 <= s < k for s in smc["resampled_steps"]) and len(smc["resampled_steps"]) == smc["resamplings"][0]
    # --target-ess 0.5 from uniform weights: the tuning population's ESS/N after each reweighting
    # is the conditional ESS, 0.5, and --resample 0.5 then resamples after every step but the last;
    # the estimating population replays those temperatures and resamplings, its ESS near 0.5.
    assert smc["refine_tuning"] == "pilot" and smc["resampled_steps"] == list(range(1, k))
    assert all(0.2 < e < 0.8 for e in smc["ess"][:-1]) and any(abs(e - 0.5) > 2e-3 for e in smc["ess"][:-1])
    assert rec["log_z_is"] is None and "steps" not in rec["config"] and rec["config"]["adaptive"] is True
    # Fifteen MALA moves per step by default (config.ADAPTIVE_REFINE_STEPS), which mix this small
    # Gaussian well: the one reason for `warn` is the single population (stats.population_verdict),
    # none about mixing.
    assert smc["refine_steps"] == 15 and rec["status"] == "warn"
    assert smc["stationarity_moves"] == 75  # five temperatures' worth (smc.stationarity_moves)
    assert len(rec["reasons"]) == 1 and "1 SMC population" in rec["reasons"][0]
    corr = smc["move_correlation"]
    assert len(corr) == k and corr[-1] is None and all(-1.0 <= c <= 1.0 for c in corr[:-1])
    assert smc["median_move_correlation"] < 0.3


def test_method_options_without_resample_give_trained_kernels_inside_smc_with_hmc_moves(mcd, gauss_yaml):
    # The record of the golden case smc_ula_mcd (gmm8, d = 2, method options but no --resample),
    # which tests/test_golden.py reruns and compares field by field: not run a second time here.
    (case,) = [c for c in GOLDEN if c["case"] == "smc_ula_mcd"]
    assert case["args"] == CASES["smc_ula_mcd"] and "--resample" not in case["args"]
    (rec,) = case["records"]
    assert rec["label"] == "ULA-MCD+SMC" and rec["config"]["resample"] == 0.5 and rec["config"]["refine"] == "hmc"
    smc = rec["smc"]
    assert smc["populations"] == 8 and smc["particles"] == 128 and smc["refine"] == "hmc"
    # Five moves per refinement (config.CLI_REFINE_STEPS), so the stationarity test makes 25.
    assert rec["config"]["refine_steps"] == 5 and smc["refine_steps"] == 5 and smc["stationarity_moves"] == 25
    assert rec["log_z_is"] is not None  # importance sampling of the same kernels, beside
    assert rec["status"] != "unreliable" and rec["log_z_stderr"] > 0, rec["reasons"]
    assert abs(rec["error"]) < 4 * rec["log_z_stderr"] + 0.05
    # --resample 0 is the paper's importance sampling, and so is --preset paper.
    for args in (["--resample", "0"], ["--preset", "paper"]):
        code, out, err = mcd(["estimate", gauss_yaml, *args, "--dry-run", "--json"])
        assert code == 0, err
        assert records(out)[-1]["sampler_config"]["resample"] == 0.0
    # An explicit --refine-steps is kept.
    code, out, err = mcd(["estimate", gauss_yaml, "--refine-steps", "2", "--dry-run", "--json"])
    assert code == 0, err
    assert records(out)[-1]["sampler_config"]["refine_steps"] == 2


@pytest.mark.slow
def test_trained_kernels_inside_smc_report_the_importance_sampling_estimate_beside(mcd, gauss_yaml):
    code, out, err = mcd(["estimate", gauss_yaml, *NO_TRAIN, "--resample", "0.9", "--refine", "mala",
                          "--refine-every", "step", "--particles", "32"])
    assert code == 0, err
    assert "ULA+SMC" in out and "SMC" in out and "log Ẑ without SMC" in out and "populations of 32" in out


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--schedule", "adaptive", "--steps", "8"], "--steps does not apply to --schedule adaptive"),
        (["--schedule", "adaptive", "--refine", "none"], "--refine"),
        (["--schedule", "linear", "--learn-schedule"], "contradicts --learn-schedule"),
        (["--resample", "1.5"], "--resample must lie in [0, 1]"),
        (["--resample", "0.5", "--particles", "48"], "not a multiple of --particles"),
        (["--refine", "hmc", "--leapfrog", "0"], "--leapfrog must be at least 1"),
        (["--refine", "hmc", "--target-ess", "1.0"], "--target-ess must lie in (0, 1)"),
    ],
)
def test_smc_usage_errors_exit_2_with_one_line(mcd, gauss_yaml, extra, needle):
    code, _, err = mcd(["estimate", gauss_yaml, "--backward", "ais", "--iterations", "0", "--samples", "64", *extra])
    assert code == 2 and needle in one_line_error(err)
