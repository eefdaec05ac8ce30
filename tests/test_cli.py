"""The `mcd` commands end to end, in-process (typer's CliRunner), with tiny settings."""

from __future__ import annotations

import json
import os

import pytest

from conftest import GAUSS_YAML, NO_TRAIN, TINY, one_line_error, records

from mcd_cli._version import __version__

SCHEMA = {
    "target": str,
    "dim": int,
    "sampler": str,
    "backward": str,
    "steps": int,
    "log_z": float,
    "log_z_stderr": float,
    "elbo": float,
    "ess": float,
    "pareto_k": float,
    "num_samples": int,
    "reference_log_z": float,
    "seed": int,
    "iterations": int,
    "train_seconds": float,
    "estimate_seconds": float,
    "device": str,
    "devices": int,
    "processes": int,
    "version": str,
    "log_z_repeats": list,
    "skipped_steps": int,
    "recoveries": int,
    "nonfinite_weights": int,
}


def check_schema(rec: dict) -> None:
    for key, kind in SCHEMA.items():
        assert key in rec, key
        if rec[key] is not None:
            assert isinstance(rec[key], (int, float) if kind is float else kind), (key, rec[key])


def test_targets_lists_the_bundled_targets(mcd):
    code, out, err = mcd(["targets"])
    assert code == 0, err
    assert "gmm8" in out and "Bundled targets" in out
    code, out, _ = mcd(["targets", "--json"])
    rows = records(out)
    gmm8 = next(r for r in rows if r["name"] == "gmm8")
    assert gmm8["dim"] == 20 and gmm8["log_z"] == 0.0 and gmm8["path"].endswith("gmm8.yaml")


def test_check_reports_a_good_target(mcd, gauss_yaml):
    code, out, err = mcd(["check", gauss_yaml])
    assert code == 0, err
    assert "gradients" in out and "✓" in out
    code, out, _ = mcd(["check", gauss_yaml, "--json"])
    (data,) = records(out)
    assert data["ok"] is True and data["dim"] == 2 and data["reference_log_z"] == 0.0


def test_check_fails_a_nan_target_with_one_line(mcd, tmp_path):
    bad = tmp_path / "nan_target.py"
    bad.write_text(
        "import jax.numpy as jnp\n"
        "def make_target(dim=2):\n"
        "    return {'log_density': lambda x: jnp.sum(x) * jnp.nan, 'dim': dim}\n"
    )
    code, out, err = mcd(["check", bad, "--json"])
    assert code == 1
    assert records(out)[0]["ok"] is False
    assert "NaN" in one_line_error(err)


def test_estimate_json_has_the_schema(mcd, gauss_yaml):
    code, out, err = mcd(["estimate", gauss_yaml, *NO_TRAIN, "--json", "--seed", "3"])
    assert code == 0, err
    (rec,) = records(out)
    check_schema(rec)
    assert rec["target"] == "tiny_gauss" and rec["dim"] == 2 and rec["steps"] == 2
    assert rec["sampler"] == "ula" and rec["backward"] == "ais" and rec["seed"] == 3
    assert rec["num_samples"] == 64 and rec["iterations"] == 0 and rec["reference_log_z"] == 0.0
    assert rec["log_z_repeats"] == [rec["log_z"]]
    assert abs(rec["log_z"]) < 5 * rec["log_z_stderr"] + 0.5


def test_estimate_table_shows_the_result(mcd, gauss_yaml):
    code, out, err = mcd(["estimate", gauss_yaml, *NO_TRAIN])
    assert code == 0, err
    for text in ("log Ẑ", "ELBO", "ESS", "Pareto k̂", "known log Z", "device", "tiny_gauss"):
        assert text in out
    assert not out.lstrip().startswith("{")


@pytest.mark.slow
def test_estimate_trains_uha_mcd_and_reports_training(mcd, gauss_yaml):
    args = ["--steps", "2", "--hidden", "4", "--batch-size", "8", "--samples", "64"]
    code, out, err = mcd(["estimate", gauss_yaml, *args, "--sampler", "uha", "--iterations", "3", "--json"])
    assert code == 0, err
    (rec,) = records(out)
    assert rec["label"] == "UHA-MCD+SMC" and rec["iterations_run"] == 3  # SMC is the default estimate
    assert rec["skipped_steps"] == 0 and rec["recoveries"] == 0


def test_bundled_name_with_param_and_stdin_target(mcd):
    code, out, err = mcd(["estimate", "gmm8", "--param", "dim=2", *NO_TRAIN, "--json"])
    assert code == 0, err
    assert records(out)[0]["dim"] == 2
    code, out, err = mcd(["estimate", "-", *NO_TRAIN, "--json"], input=GAUSS_YAML)
    assert code == 0, err
    assert records(out)[0]["target"] == "tiny_gauss"


def test_repeats_report_mean_and_standard_error(mcd, gauss_yaml):
    # Enough steps and samples for a trustworthy verdict: an unreliable one withholds the SE.
    settings = ["--steps", "8", "--samples", "1024", "--backward", "ais", "--iterations", "0", "--resample", "0"]
    code, out, err = mcd(["estimate", gauss_yaml, *settings, "--repeats", "3", "--json"])
    assert code == 0, err
    (rec,) = records(out)
    assert rec["status"] != "unreliable", rec["reasons"]
    values = rec["log_z_repeats"]
    assert len(values) == 3 and len(set(values)) == 3
    assert rec["log_z"] == pytest.approx(sum(values) / 3)
    assert rec["repeats"] == 3 and rec["log_z_stderr"] > 0


def test_compare_runs_the_grid(mcd, gauss_yaml, tmp_path):
    out_file = tmp_path / "grid.jsonl"
    args = ["compare", gauss_yaml, "--sampler", "ula,uha", "--steps", "2,3", "--backward", "ais"]
    args += ["--iterations", "0", "--samples", "64", "--output", out_file]
    code, out, err = mcd(args)
    assert code == 0, err
    for text in ("ULA", "UHA", "log Ẑ", "ESS/N"):
        assert text in out
    lines = records(out_file.read_text())
    assert [(r["sampler"], r["steps"]) for r in lines] == [("ula", 2), ("ula", 3), ("uha", 2), ("uha", 3)]
    code, out, err = mcd(["compare", gauss_yaml, "--steps", "2", "--backward", "ais", "--iterations", "0", "--samples", "64", "--json"])
    assert code == 0, err
    assert [r["label"] for r in records(out)] == ["ULA"]


def test_compare_rejects_an_unknown_sampler_before_running(mcd, gauss_yaml):
    code, out, err = mcd(["compare", gauss_yaml, "--sampler", "ula,hmc", "--iterations", "0"])
    assert code == 2
    assert "hmc" in one_line_error(err)


def test_output_appends_and_keeps_what_is_there(mcd, gauss_yaml, tmp_path):
    out_file = tmp_path / "results.jsonl"
    out_file.write_text('{"earlier": true}\n')
    for seed in (1, 2):
        code, _, err = mcd(["estimate", gauss_yaml, *NO_TRAIN, "--seed", seed, "--output", out_file, "-q"])
        assert code == 0, err
    lines = records(out_file.read_text())
    assert lines[0] == {"earlier": True}
    assert [r["seed"] for r in lines[1:]] == [1, 2]


def test_config_file_merges_with_flags(mcd, gauss_yaml, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(
        "steps: 3\nsamples: 64\nbackward: ais\niterations: 0\nseed: 7\nsampler: uha\n"
        "batch-size: 8\nresample: 0\nparam: {loc: 2.0}\n"  # importance sampling: the cheapest run
    )
    code, out, err = mcd(["estimate", gauss_yaml, "--config", config, "--steps", "2", "--json"])
    assert code == 0, err
    (rec,) = records(out)
    assert rec["steps"] == 2  # the flag wins
    assert rec["num_samples"] == 64 and rec["seed"] == 7 and rec["sampler"] == "uha" and rec["smc"] is None
    assert rec["target_params"]["loc"] == 2.0
    code, out, err = mcd(["estimate", gauss_yaml, "--config", config, "--param", "loc=3", "--json"])
    assert code == 0, err
    assert records(out)[0]["target_params"]["loc"] == 3.0  # --param wins key by key


def test_config_file_can_name_the_target_and_a_preset(mcd, gauss_yaml, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(f"target: {gauss_yaml}\npreset: paper\nsamples: 64\niterations: 0\nbackward: ais\nsteps: 2\n")
    code, out, err = mcd(["estimate", "--config", config, "--dry-run", "--json"])
    assert code == 0, err
    (plan,) = records(out)
    assert plan["target"] == "tiny_gauss"
    assert plan["sampler_config"]["hidden"] == 512  # from the preset
    assert plan["train_config"]["iterations"] == 0  # the config file beats the preset


def test_config_file_sets_a_sampler_field_without_an_option(mcd, gauss_yaml, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("score_linear: true\nlearn_backward_variance: true\ntime_dim: 8\n")
    code, out, err = mcd(["estimate", gauss_yaml, "--config", config, "--steps", "8", "--dry-run", "--json"])
    assert code == 0, err
    (plan,) = records(out)
    assert plan["sampler_config"]["score_linear"] is True and plan["sampler_config"]["time_dim"] == 8
    assert plan["sampler_config"]["learn_backward_variance"] is True
    # A bad value is named by its key (it has no option), in one line.
    config.write_text('score_linear: "no"\n')
    code, _, err = mcd(["estimate", gauss_yaml, "--config", config, "--steps", "8", "--dry-run"])
    assert code == 2 and "'score_linear' (a --config key) must be true or false" in one_line_error(err)
    # Without kernels to train (the default policy) the training's keys would be dropped: refused.
    config.write_text("time_dim: 8\n")
    code, _, err = mcd(["estimate", gauss_yaml, "--config", config, "--dry-run"])
    assert code == 2 and "'time_dim' (a --config key) sets the training of MCD kernels" in one_line_error(err)


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--steps", "0"], "--steps"),
        (["--steps", "-3"], "--steps"),
        (["--samples", "0"], "--samples"),
        (["--batch-size", "0"], "--batch-size"),
        (["--iterations", "-1"], "--iterations"),
        (["--lr", "0"], "--lr"),
        (["--lr", "nan"], "--lr"),
        (["--lr", "-1e-3"], "--lr"),
        (["--sampler", "hmc"], "--sampler"),
        (["--steps", "many"], "--steps"),
        (["--param", "loc=abc"], "loc"),
        (["--param", "nokey"], "key=value"),
        (["--param", "colour=red"], "colour"),
        (["--repeats", "0"], "--repeats"),
        (["--no-such-flag"], "--no-such-flag"),
        (["--steps", "100000000000000"], "memory"),
        (["--samples", "1000000000000000"], "--samples"),
        (["--save", "model.npz", "--repeats", "2"], "--save"),
        (["--resume"], "--checkpoint"),
    ],
)
def test_bad_options_exit_2_with_one_line(mcd, gauss_yaml, extra, needle):
    code, out, err = mcd(["estimate", gauss_yaml, *TINY, "--iterations", "1", *extra])
    assert code == 2, (out, err)
    assert needle in one_line_error(err)
    assert out == ""


@pytest.mark.parametrize(
    "target, needle",
    [
        ("no_such_target", "no_such_target"),
        ("missing/file.yaml", "file.yaml"),
        ("{tmp}/notes.txt", "notes.txt"),
        ("{tmp}/broken.yaml", "broken.yaml"),
        ("{tmp}/raises.py", "raises.py"),
    ],
)
def test_bad_targets_exit_2_with_one_line(mcd, tmp_path, target, needle):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "broken.yaml").write_text("family: [unclosed\n")
    (tmp_path / "raises.py").write_text("def make_target(dim=2):\n    raise RuntimeError('boom')\n")
    code, _, err = mcd(["estimate", target.format(tmp=tmp_path), *NO_TRAIN])
    assert code == 2
    assert needle in one_line_error(err)


def test_empty_stdin_and_missing_target(mcd):
    code, _, err = mcd(["estimate", "-", *NO_TRAIN], input="")
    assert code == 2 and "stdin" in one_line_error(err)
    code, _, err = mcd(["estimate", *NO_TRAIN])
    assert code == 2 and "TARGET" in one_line_error(err)


def test_bad_config_files(mcd, gauss_yaml, tmp_path):
    cases = {
        "unknown.yaml": ("colour: red\n", "colour"),
        "badtype.yaml": ("seed: many\n", "seed"),
        "list.yaml": ("- 1\n- 2\n", "mapping"),
        "yaml.yaml": ("steps: [1\n", "YAML"),
        "bool.yaml": ("seed: true\n", "seed"),
        "twice.yaml": ("steps: 4\nseed: 1\nsteps: 8\n", "line 3: duplicate key 'steps' (first on line 1)"),
    }
    for name, (text, needle) in cases.items():
        (tmp_path / name).write_text(text)
        code, _, err = mcd(["estimate", gauss_yaml, *NO_TRAIN, "--config", tmp_path / name])
        assert code == 2, name
        assert needle in one_line_error(err), name
    code, _, err = mcd(["estimate", gauss_yaml, "--config", tmp_path / "absent.yaml"])
    assert code == 2 and "absent.yaml" in one_line_error(err)


def test_output_in_missing_or_unwritable_directory_fails_before_running(mcd, gauss_yaml, tmp_path):
    code, _, err = mcd(["estimate", gauss_yaml, *NO_TRAIN, "--output", tmp_path / "nope" / "r.jsonl"])
    assert code == 2 and "does not exist" in one_line_error(err)
    code, _, err = mcd(["estimate", gauss_yaml, *NO_TRAIN, "--output", "/proc/r.jsonl"])
    assert code == 2 and "/proc/r.jsonl" in one_line_error(err)
    code, _, err = mcd(["estimate", gauss_yaml, *NO_TRAIN, "--output", tmp_path])
    assert code == 2 and "directory" in one_line_error(err)
    if os.geteuid() != 0:  # permission bits do not stop root
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        code, _, err = mcd(["estimate", gauss_yaml, *NO_TRAIN, "--output", locked / "r.jsonl"])
        assert code == 2 and "r.jsonl" in one_line_error(err)


def test_save_then_load_reproduces_the_estimate(mcd, gauss_yaml, tmp_path):
    model = tmp_path / "model.npz"
    # ULA-AIS with K = 8 and 512 samples: the sampler test_refine_tuning.py's record test estimates
    # with SMC, whose compiled programs the session's persistent compilation cache shares.
    args = ["estimate", gauss_yaml, *TINY, "--steps", "8", "--samples", "512", "--iterations", "2", "--seed", "5", "--json"]
    code, out, err = mcd(args + ["--save", model])
    assert code == 0, err
    (trained,) = records(out)
    assert trained["steps"] == 8 and trained["num_samples"] == 512  # the later options win
    # The sampler settings come from the file; only the seed and the estimation method (importance
    # sampling, as trained) are repeated.
    replay = ["estimate", gauss_yaml, "--samples", "512", "--seed", "5", "--load", model, "--json"]
    code, out, err = mcd(replay + ["--resample", "0"])
    assert code == 0, err
    (loaded,) = records(out)
    assert loaded["log_z"] == trained["log_z"] and loaded["ess"] == trained["ess"]
    assert loaded["loaded_from"] == str(model) and loaded["train_seconds"] == 0
    assert loaded["iterations"] == 2 and loaded["smc"] is None
    # The estimation method is not part of the trained sampler: by default the loaded kernels
    # are estimated with SMC, and the importance-sampling estimate of the same kernels is beside it.
    code, out, err = mcd(replay)
    assert code == 0, err
    (smc,) = records(out)
    assert smc["smc"] is not None and smc["log_z_is"] == trained["log_z"]


def test_load_rejects_files_that_do_not_fit(mcd, gauss_yaml, tmp_path):
    model = tmp_path / "model.npz"
    code, _, err = mcd(["estimate", gauss_yaml, *TINY, "--iterations", "0", "--save", model, "-q"])
    assert code == 0, err
    data = model.read_bytes()
    (tmp_path / "truncated.npz").write_bytes(data[: len(data) // 2])
    (tmp_path / "text.npz").write_text("not numpy at all")
    cases = [
        (["--load", tmp_path / "truncated.npz"], "truncated"),
        (["--load", tmp_path / "text.npz"], "not an mcd-cli"),
        (["--load", tmp_path / "absent.npz"], "does not exist"),
        (["--load", model, "--param", "dim=3"], "d=2"),
        (["--load", model, "--steps", "3"], "steps"),
    ]
    for extra, needle in cases:
        code, _, err = mcd(["estimate", gauss_yaml, "--samples", "64", *extra])
        assert code == 2, extra
        assert needle in one_line_error(err), extra
    code, _, err = mcd(["estimate", "gmm8", "--param", "dim=2", "--samples", "64", "--load", model])
    assert code == 2 and "tiny_gauss" in one_line_error(err)


def test_dry_run_checks_without_running(mcd, gauss_yaml):
    code, out, err = mcd(["estimate", gauss_yaml, "--dry-run"])
    assert code == 0, err
    # No method option: the default policy, which trains nothing, and says so.
    assert out.startswith("ok: the default policy on tiny_gauss (d = 2): pilots of adaptive SMC") and "no training" in out
    code, out, err = mcd(["estimate", gauss_yaml, "--dry-run", "--steps", "8"])
    assert code == 0, err
    assert out.startswith("ok: ULA-MCD+SMC K=8 on tiny_gauss (d = 2), 1000 iterations")  # the kernels named: trained, in SMC
    code, out, err = mcd(["estimate", gauss_yaml, "--dry-run", "--resample", "0"])
    assert code == 0, err
    assert out.startswith("ok: ULA-MCD K=")
    code, out, err = mcd(["estimate", gauss_yaml, "--dry-run", "--schedule", "adaptive"])
    assert code == 0, err
    assert out.startswith("ok: SMC-HMC on tiny_gauss (d = 2): adaptive tempered SMC, 15 HMC moves of 3 leapfrog")
    assert "K=" not in out and "iterations" not in out


def test_a_score_network_narrower_than_the_target_is_warned_before_training(mcd, gauss_yaml):
    args = ["estimate", "gmm8", "--param", "dim=40", "--steps", "8", "--dry-run"]
    code, out, err = mcd([*args, "--hidden", "32"])
    assert code == 0, err
    assert err.splitlines() == [
        "warning: the score network (--hidden 32) is narrower than the target (d = 40): its output "
        "spans at most 32 of 40 directions, which limits MCD; use --hidden 40 or more (slower per iteration)"
    ]
    assert mcd([*args, "--hidden", "40"])[2] == ""  # wide enough
    assert mcd([*args, "--hidden", "32", "--backward", "ais"])[2] == ""  # no score network
    assert mcd([*args, "--hidden", "32", "-q"])[2] == ""
    code, _, err = mcd(["compare", "gmm8", "--param", "dim=40", "--hidden", "8", "--sampler", "ula,uha", "--dry-run"])
    assert code == 0 and len(err.splitlines()) == 1  # said once, not once per cell


def test_the_default_score_width_follows_the_dimension(mcd):
    def hidden(*args):
        code, out, err = mcd([*args, "--dry-run", "--json"])
        assert code == 0 and err == "", err
        return {records(out)[-1]["sampler_config"]["hidden"]}

    assert hidden("estimate", "gmm8") == {32}  # d = 20
    assert hidden("estimate", "gmm8", "--param", "dim=40") == {64}
    assert hidden("compare", "gmm8", "--param", "dim=200", "--sampler", "ula,uha") == {224}
    assert hidden("estimate", "gmm8", "--param", "dim=40", "--preset", "paper") == {512}
    assert hidden("estimate", "gmm8", "--param", "dim=40", "--steps", "8", "--hidden", "48") == {48}


def test_x64_runs_in_float64_and_restores(mcd, gauss_yaml):
    import jax

    code, out, err = mcd(["estimate", gauss_yaml, *NO_TRAIN, "--x64", "--json"])
    assert code == 0, err
    assert records(out)[0]["precision"] == "float64"
    assert not jax.config.read("jax_enable_x64")


def test_help_and_version(mcd):
    code, out, _ = mcd(["--help"])
    assert code == 0 and "estimate" in out and "compare" in out
    code, out, _ = mcd(["estimate", "--help"])
    assert code == 0 and "--checkpoint" in out and "--output" in out
    code, out, _ = mcd(["--version"])
    assert code == 0 and out.startswith(f"mcd-cli {__version__} (jax ")


def test_estimate_and_compare_declare_their_shared_options_once():
    import typer

    from mcd_cli.cli import app

    commands = typer.main.get_command(app).commands

    def options(name):
        return {p.name: (p.opts, p.secondary_opts, p.help, p.rich_help_panel) for p in commands[name].params}

    estimate, compare = options("estimate"), options("compare")
    read_as_lists = {"target", "sampler", "backward", "steps", "load"}
    assert set(compare) < set(estimate)
    assert {name: compare[name] for name in set(compare) - read_as_lists} == {
        name: estimate[name] for name in set(compare) - read_as_lists
    }


def test_the_choices_are_the_library_s():
    from mcd_cli.cli import options
    from mcd_cli.config import INIT_METHODS
    from mcd_cli.kernels import registry
    from mcd_cli.train.objectives import OBJECTIVES

    assert [m.value for m in options.Sampler] == list(registry.FORWARD)
    assert [m.value for m in options.Refine] == ["none", *registry.REFINE]
    assert [m.value for m in options.Loss] == list(OBJECTIVES)
    assert [m.value for m in options.InitMethod] == list(INIT_METHODS)


def test_json_output_is_only_json(mcd, gauss_yaml):
    code, out, err = mcd(["estimate", gauss_yaml, *NO_TRAIN, "--json"])
    assert code == 0
    for line in out.splitlines():
        json.loads(line)


def test_progress_bars_render_on_a_terminal(monkeypatch):
    import io

    from rich.console import Console

    from mcd_cli import report

    buffer = io.StringIO()
    monkeypatch.setattr(report.progress, "stderr_console", lambda: Console(file=buffer, force_terminal=True, width=100))
    with report.ProgressDisplay(enabled=True) as progress:
        train = progress.training("training", total=3)
        for i, elbo in enumerate([-3.0, float("nan"), -2.5]):
            train(i, elbo)
        done = progress.estimation("estimating", total=128)
        done(64, 128)
        done(128, 128)
    text = buffer.getvalue()
    assert "ELBO -2.500" in text and "estimating" in text
