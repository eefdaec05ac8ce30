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
    assert rec["log_z_stderr_method"] == "delta" and rec["log_z_stderr"] == rec["delta_stderr"]
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
