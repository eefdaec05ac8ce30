"""Naming the paper's kernels runs them; the record and the table name only what ran.

`mcd estimate FILE --steps 64 --sampler uha` is the design card's command: --sampler or --steps
fixes the method to trained MCD kernels (backward mcd unless --backward says otherwise), inside SMC.
Without a method option the default policy runs adaptive tempered SMC, which runs no annealing
kernels and trains nothing: its record names no sampler, backward kernel or K, and an option only
training would read is refused with one line instead of dropped.
"""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from conftest import one_line_error, records
from golden_cases import CONDITIONAL
from mcd_cli import report


@pytest.mark.slow  # 40 s: 1,000 training updates; the method each option names is checked below by dry runs
def test_the_cards_command_trains_the_named_kernels_with_their_k(mcd, gauss_yaml):
    code, out, err = mcd(["estimate", gauss_yaml, "--steps", "4", "--sampler", "uha", "--samples", "256", "--json"])
    assert code == 0, err
    (rec,) = records(out)
    assert rec["policy"] is None and rec["method"] == "SMC" and rec["label"] == "UHA-MCD+SMC"
    assert (rec["sampler"], rec["backward"], rec["steps"]) == ("uha", "mcd", 4)
    assert rec["iterations_run"] == 1000 and rec["temperatures"] is None
    assert rec["moves"] == {"kernel": "hmc", "moves": 5, "every": "resample", "leapfrog": 3}
    assert abs(rec["error"]) < 4 * rec["log_z_stderr"]


@pytest.mark.parametrize(
    "given, line",
    [
        (["--steps", "4"], "ok: ULA-MCD+SMC K=4 on tiny_gauss (d = 2), 1000 iterations"),
        (["--sampler", "uha"], "ok: UHA-MCD+SMC K=64 on tiny_gauss (d = 2), 1000 iterations"),
        (["--steps", "4", "--backward", "ais"], "ok: ULA+SMC K=4 on tiny_gauss (d = 2), 1000 iterations"),
        (["--resample", "0"], "ok: ULA-MCD K=64 on tiny_gauss (d = 2), 1000 iterations"),  # 0 is a method, not "not given"
        ([], "ok: the default policy on tiny_gauss (d = 2)"),
    ],
)
def test_sampler_or_steps_fixes_the_method_and_backward_defaults_to_mcd(mcd, gauss_yaml, given, line):
    code, out, err = mcd(["estimate", gauss_yaml, *given, "--dry-run"])
    assert code == 0, err
    assert out.startswith(line), out


def test_a_config_file_naming_the_kernels_fixes_the_method_too(mcd, gauss_yaml, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("sampler: uha\nsteps: 8\n")
    code, out, err = mcd(["estimate", gauss_yaml, "--config", config, "--dry-run"])
    assert code == 0, err
    assert out.startswith("ok: UHA-MCD+SMC K=8 on tiny_gauss"), out


@pytest.mark.parametrize(
    "given, needle",
    [
        (["--lr", "0.01"], "--lr sets the training of MCD kernels, which the default policy does not do"),
        (["--hidden", "64"], "--hidden sets the training of MCD kernels"),
        (["--batch-size", "32"], "--batch-size sets the training of MCD kernels"),
        (["--step-size", "0.1"], "--step-size sets the training of MCD kernels"),
        (["--save", "kernels.npz"], "--save writes trained MCD kernels, which the default policy does not make"),
        (["--learn", "--time-limit", "1m", "--save", "k.npz"], "--save writes trained MCD kernels"),
        (["--schedule", "adaptive", "--sampler", "uha"], "--sampler names the forward kernel of the annealed path"),
        (["--schedule", "adaptive", "--backward", "mcd"], "--backward mcd needs trained kernels on a fixed schedule"),
        (["--schedule", "adaptive", "--steps", "8"], "--steps does not apply to --schedule adaptive"),
    ],
)
def test_an_option_the_method_would_not_read_is_refused_with_one_line(mcd, gauss_yaml, given, needle):
    code, out, err = mcd(["estimate", gauss_yaml, *given, "--dry-run"])
    assert code == 2 and out == ""
    assert needle in one_line_error(err)


def test_with_learn_the_training_options_are_read_by_the_learning_pilot(mcd, gauss_yaml):
    code, out, err = mcd(["estimate", gauss_yaml, "--learn", "--time-limit", "1m", "--hidden", "64", "--dry-run", "--json"])
    assert code == 0, err
    assert records(out)[0]["sampler_config"]["hidden"] == 64
    code, out, err = mcd(["estimate", gauss_yaml, "--learn", "--time-limit", "1m", "--dry-run"])
    assert code == 0 and "MCD kernels learned in the time to spare" in out and "no training" not in out


def test_adaptive_smc_given_backward_ais_runs_and_its_record_names_no_kernel(mcd, gauss_yaml, tmp_path):
    """--backward ais is adaptive SMC's own backward kernel (the moves' reversal): accepted. The
    record names the method, its moves and its temperatures instead of kernels that did not run,
    and its config (no sampler, no steps) reproduces it."""
    args = ["estimate", gauss_yaml, "--schedule", "adaptive", "--backward", "ais", "--samples", "512", "--json"]
    code, out, err = mcd(args)
    assert code == 0, err
    (rec,) = records(out)
    assert rec["method"] == "adaptive tempered SMC" and rec["label"] == "SMC-HMC"
    assert rec["sampler"] is None and rec["backward"] is None and rec["steps"] is None
    assert rec["temperatures"] == max(rec["smc"]["steps"]) >= 1
    assert rec["moves"] == {"kernel": "hmc", "moves": 15, "every": "temperature", "leapfrog": 3}
    assert "sampler" not in rec["config"] and "steps" not in rec["config"] and rec["config"]["backward"] == "ais"
    config = tmp_path / "run.json"
    config.write_text(json.dumps(rec["config"]))
    code, out, err = mcd(["estimate", "--config", str(config), "--json"])
    assert code == 0, err
    assert records(out)[0]["log_z"] == rec["log_z"]


def _text(table) -> str:
    console = Console(width=200, record=True)
    console.print(table)
    return console.export_text()


def test_the_table_of_an_adaptive_run_names_its_moves_and_temperatures_not_kernels():
    rec = {
        "label": "SMC-HMC", "sampler": None, "backward": None, "steps": None, "temperatures": 3,
        "moves": {"kernel": "hmc", "moves": 15, "every": "temperature", "leapfrog": 3},
    }
    line = report.tables.estimator_line(rec)
    assert line == "SMC-HMC  adaptive tempered SMC: 3 temperatures, 15 HMC moves of 3 leapfrog steps per temperature; nothing trained"
    assert report.method_name(rec) == "SMC-HMC, 3 temperatures"
    trained = {"label": "UHA-MCD+SMC", "sampler": "uha", "backward": "mcd", "steps": 64, "moves": None}
    assert report.tables.estimator_line(trained) == "UHA-MCD+SMC  sampler = uha, backward = mcd, K = 64 steps"


def test_a_policy_runs_table_and_record_name_only_what_ran(mcd, gauss_yaml):
    code, out, err = mcd(["estimate", gauss_yaml, "--samples", "1024", "--json"])
    assert code == 0, err
    (rec,) = records(out)
    assert rec["policy"] is not None and rec["method"] == "adaptive tempered SMC"
    assert rec["sampler"] is None and rec["backward"] is None and rec["steps"] is None
    assert rec["temperatures"] == max(rec["smc"]["steps"])
    text = _text(report.estimate_table(rec))
    assert "adaptive tempered SMC:" in text and "HMC moves" in text
    assert "sampler =" not in text and "backward =" not in text and "K = " not in text


def test_naming_the_kernels_of_a_conditional_target_trains_them(mcd, tmp_path):
    target = tmp_path / "conditional.py"
    target.write_text(CONDITIONAL)
    code, out, err = mcd(["estimate", str(target), "--steps", "4", "--dry-run"])
    assert code == 0, err
    assert out.startswith("ok: ULA-MCD+SMC on conditional (d = 2), 3 data, K=4, a separate run per datum"), out
    code, out, err = mcd(["estimate", str(target), "--dry-run"])
    assert code == 0 and out.startswith("ok: the default policy on conditional"), out
