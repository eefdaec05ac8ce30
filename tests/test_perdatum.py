"""Per-datum evidence of conditional targets: the linear-Gaussian latent model, whose log p(x) is exact.

z ~ N(0, I_2), x | z ~ N(W z, σ² I_3), so p(x) = N(x; 0, W Wᵀ + σ² I) in closed form.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import textwrap
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.stats import multivariate_normal, norm

from conftest import one_line_error, records
from rich.console import Console

from mcd_cli import report
from mcd_cli.train import amortised
from mcd_cli.path import annealing
from mcd_cli.io import files
from mcd_cli.kernels import score
from mcd_cli.policy import Policy, perdatum as policy_perdatum
from mcd_cli.run import perdatum, smc_kernels
from mcd_cli.config import SamplerConfig, TrainConfig
from mcd_cli.errors import RunFailed, UsageError
from mcd_cli.record import DatumRecord
from mcd_cli.stats import summarize
from mcd_cli.targets import Target, TargetError, load_target
from mcd_cli.targets.conditional import ConditionalTarget, context, datum_target

D, M, SIGMA = 2, 3, 0.5
W = np.random.default_rng(0).normal(size=(M, D)).astype(np.float32)
COV = W @ W.T + SIGMA**2 * np.eye(M)


def log_density(z, x):
    return jnp.sum(norm.logpdf(z)) + jnp.sum(norm.logpdf(x, W @ z, SIGMA))


def log_z(x):
    return multivariate_normal.logpdf(x, jnp.zeros(M), COV)


def linear_gaussian(num_data: int, seed: int = 1) -> ConditionalTarget:
    data = np.random.default_rng(seed).normal(size=(num_data, M)).astype(np.float32) * 1.5
    return ConditionalTarget.create(log_density, D, data, log_z=log_z, name="linear_gaussian")


TARGET_FILE = f"""
    import jax.numpy as jnp
    import numpy as np
    from jax.scipy.stats import multivariate_normal, norm

    W = np.array({W.tolist()}, dtype=np.float32)
    dim = {D}
    data = np.random.default_rng(1).normal(size=(5, {M})).astype(np.float32) * 1.5

    def log_density(z, x):
        return jnp.sum(norm.logpdf(z)) + jnp.sum(norm.logpdf(x, W @ z, {SIGMA}))

    def log_z(x):
        return multivariate_normal.logpdf(x, jnp.zeros({M}), W @ W.T + {SIGMA}**2 * jnp.eye({M}))
"""


@pytest.mark.slow
def test_amortised_per_datum_estimates_match_the_closed_form():
    """One ULA-MCD sampler amortised over 4 data: every datum within 4 of its own standard errors."""
    target = linear_gaussian(4)
    sconf = SamplerConfig(sampler="ula", backward="mcd", steps=4, hidden=8, blocks=1, context_dim=target.context_dim)
    plan = perdatum.PerDatumPlan(
        target, sconf, TrainConfig(iterations=10, batch_size=32), amortise=True, num_samples=4096
    )
    rows: list[dict] = []
    summary = perdatum.execute(plan, lambda r: rows.append(r.as_dict())).as_dict()
    assert [r["datum"] for r in rows] == [0, 1, 2, 3]
    for r in rows:
        # log Ẑ is low by about se²/2 on average (Jensen); the rest is Monte Carlo error.
        tolerance = 4 * r["delta_stderr"] + r["delta_stderr"] ** 2
        assert abs(r["log_z"] - r["known_log_z"]) < tolerance, r
    known = np.mean([r["known_log_z"] for r in rows])
    assert summary["known_mean_log_z"] == pytest.approx(known)
    assert abs(summary["mean_log_z"] - known) < 4 * summary["mc_stderr"] + 0.01
    se = np.array([r["delta_stderr"] for r in rows])
    assert summary["mc_stderr"] == pytest.approx(np.sqrt(np.sum(se**2)) / 4, rel=1e-12)
    lz = np.array([r["log_z"] for r in rows])
    assert summary["data_stderr"] == pytest.approx(lz.std(ddof=1) / 2, rel=1e-12)
    assert summary["iterations"] == 10 and summary["data_batch"] == 4


def test_amortised_mcd_at_initialisation_equals_ais_for_every_datum():
    """The conditioned score network's last layer starts at zero: the log weights are AIS's."""
    target = linear_gaussian(3)
    mcd = SamplerConfig(sampler="uha", backward="mcd", steps=3, hidden=8, blocks=1, context_dim=target.context_dim)
    ais = SamplerConfig(sampler="uha", backward="ais", steps=3)
    key = jax.random.key(3)
    one = datum_target(target, jnp.asarray(target.data[0]))
    p_mcd, p_ais = annealing.init_params(key, one, mcd), annealing.init_params(key, one, ais)
    assert "context" in p_mcd.backward
    weights = jax.jit(amortised.datum_log_weights, static_argnums=(2, 3, 5))
    for x in target.data:
        a = weights(jax.random.key(5), p_mcd, target, mcd, jnp.asarray(x), 16)
        b = weights(jax.random.key(5), p_ais, target, ais, jnp.asarray(x), 16)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_score_network_context_changes_only_the_conditioned_output():
    """Without context the network's parameters are the unconditional ones; the context enters the output."""
    key = jax.random.key(0)
    plain = score.init(key, 2, 2, 4, hidden=8)
    cond = score.init(key, 2, 2, 4, hidden=8, context_dim=3)
    assert jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.all(a == b)), plain, {k: cond[k] for k in plain}))
    cond["out"]["w"] = jnp.ones_like(cond["out"]["w"])
    z = jnp.ones(2)
    assert not np.allclose(score.apply(cond, 1, z, jnp.zeros(3)), score.apply(cond, 1, z, jnp.ones(3)))


@pytest.mark.parametrize(
    "sconf",
    [
        SamplerConfig(sampler="ula", backward="ais", steps=2),
        pytest.param(SamplerConfig(sampler="ula", backward="ais", steps=2, resample=0.5, refine="mala"), marks=pytest.mark.slow),
    ],
    ids=["importance-sampling", "smc"],
)
def test_estimation_memory_does_not_grow_with_the_number_of_data(sconf):
    """Host allocations peak at one datum's weights (or SMC population), whether there are 5 data or 50."""
    peaks, target = [], linear_gaussian(50)
    perdatum.execute(  # compile outside the measurement; a selection of the data reuses it
        perdatum.PerDatumPlan(target.select(0, 1), sconf, TrainConfig(iterations=0), amortise=False, num_samples=4096),
        lambda rec: None,
    )
    for n in (5, 50):
        plan = perdatum.PerDatumPlan(target.select(0, n), sconf, TrainConfig(iterations=0), amortise=False, num_samples=4096)
        tracemalloc.start()
        perdatum.execute(plan, lambda rec: None)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    # Keeping each datum's 4096 float64 weights would add 45 × 32 kB = 1.5 MB from 5 data to 50;
    # what does grow is JAX's own bookkeeping of its eager calls (about 2 kB per datum: the key's
    # fold_in, the reference log_z), so the bound is a quarter of what keeping the weights adds.
    assert peaks[1] - peaks[0] < 0.25 * 45 * 4096 * 8, peaks


POST_COV = np.linalg.inv(np.eye(D) + W.T @ W / SIGMA**2)


def encoder(x):
    """An amortised initial distribution like a VAE's encoder: the exact posterior N(μ(x), Σ), moved
    off its mean by 0.5 and widened 1.5×, so annealing has work to do."""
    mean = jnp.asarray(POST_COV @ W.T / SIGMA**2) @ x
    return mean + 0.5, 1.5 * jnp.sqrt(jnp.asarray(np.diag(POST_COV)))


def within_tolerance(rows: list[dict]) -> None:
    """Every datum within 4 of its own standard errors (plus se²: log Ẑ is low by about se²/2)."""
    for r in rows:
        assert r["log_z_stderr_method"] in ("smc-genealogy", "replicates"), r
        se = r["log_z_stderr"]
        assert abs(r["log_z"] - r["known_log_z"]) < 4 * se + se**2, r


def encoded(num_data: int) -> ConditionalTarget:
    data = np.random.default_rng(1).normal(size=(num_data, M)).astype(np.float32) * 1.5
    return ConditionalTarget.create(log_density, D, data, initial=encoder, log_z=log_z, name="encoded")


@pytest.mark.slow
def test_trained_amortised_mcd_inside_smc_per_datum_matches_the_closed_form():
    """A ULA-MCD sampler amortised over 3 data, then SMC with MALA refinement on its fixed schedule."""
    target = encoded(3)
    sconf = SamplerConfig(
        sampler="ula", backward="mcd", steps=4, hidden=8, blocks=1, context_dim=target.context_dim,
        resample=0.5, refine="mala",
    )
    plan = perdatum.PerDatumPlan(
        target, sconf, TrainConfig(iterations=10, batch_size=32), amortise=True, num_samples=1024, particles=512
    )
    rows: list[dict] = []
    summary = perdatum.execute(plan, lambda r: rows.append(r.as_dict())).as_dict()
    within_tolerance(rows)
    for r in rows:
        assert r["smc"]["populations"] == 2 and len(r["smc"]["log_z_populations"]) == 2
        assert r["smc"]["log_z_is"] is not None and r["smc"]["steps"] == [4, 4]
    assert summary["label"] == "ULA-MCD+SMC" and summary["iterations"] == 10
    assert summary["smc"]["mean_log_z_is"] == pytest.approx(np.mean([r["smc"]["log_z_is"] for r in rows]))


def test_amortised_mcd_at_initialisation_equals_ais_inside_per_datum_smc():
    """The conditioned score network starts at zero: SMC with it gives AIS's SMC run, resamplings included."""
    target = encoded(2)
    extra = dict(steps=3, resample=0.9)
    mcd = SamplerConfig(sampler="ula", backward="mcd", hidden=8, blocks=1, context_dim=target.context_dim, **extra)
    ais = SamplerConfig(sampler="ula", backward="ais", **extra)
    key = jax.random.key(3)
    one = datum_target(target, jnp.asarray(target.data[0]))
    p_mcd, p_ais = annealing.init_params(key, one, mcd), annealing.init_params(key, one, ais)
    for x in target.data:
        a = perdatum.datum_population(target, mcd, 64)(p_mcd, jax.random.key(5), jnp.asarray(x))
        b = perdatum.datum_population(target, ais, 64)(p_ais, jax.random.key(5), jnp.asarray(x))
        assert int(a.resamplings) == int(b.resamplings) >= 1
        np.testing.assert_allclose(a.log_w, b.log_w, rtol=0, atol=1e-5)
        np.testing.assert_allclose(a.log_z, b.log_z, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_per_datum_smc_is_smc_on_the_datum_target_started_from_its_encoder():
    """The datum enters the compiled run as an argument: the same run as SMC on a target built on
    the host from log_density(·, x) and the encoder's outputs."""
    target = encoded(2)
    sconf = SamplerConfig(sampler="ula", backward="ais", steps=3, resample=0.9, refine="mala")
    x = target.data[1]
    params = annealing.init_params(jax.random.key(3), datum_target(target, jnp.asarray(x)), sconf)
    b = perdatum.datum_population(target, sconf, 64)(params, jax.random.key(5), jnp.asarray(x))
    mean, scale = (np.asarray(v) for v in encoder(jnp.asarray(x)))
    own = Target.create(lambda z: log_density(z, x), D, mean, scale)
    c = smc_kernels.compiled(own, sconf, 64)(params, jax.random.key(5))
    np.testing.assert_allclose(b.log_w, c.log_w, rtol=0, atol=1e-4)
    np.testing.assert_allclose(b.log_z, c.log_z, rtol=0, atol=1e-4)


def test_parse_index():
    assert perdatum.parse_index(":3", 10) == (0, 3)
    assert perdatum.parse_index("-1", 10) == (9, 10)
    for bad in ("5:2", "11", "a:b", "1:2:3"):
        with pytest.raises(UsageError):
            perdatum.parse_index(bad, 10)


@pytest.fixture
def target_file(tmp_path):
    path = tmp_path / "linear_gaussian.py"
    path.write_text(textwrap.dedent(TARGET_FILE))
    return path


def test_conditional_file_loads_with_its_data_or_a_data_file(target_file, tmp_path):
    t = load_target(str(target_file))
    assert isinstance(t, ConditionalTarget) and (t.dim, t.num_data, t.context_dim) == (D, 5, M)
    assert t.known_log_z(t.data[0]) == pytest.approx(float(log_z(t.data[0])))
    data = tmp_path / "two.npz"
    np.savez(data, data=np.zeros((2, M)))
    t2 = load_target(str(target_file), data={"data": np.zeros((2, M))})
    assert t2.num_data == 2
    np.testing.assert_array_equal(context(t2, jnp.ones(M)), jnp.ones(M))


@pytest.mark.parametrize(
    "extra, message",
    [
        ("log_z = 1.0", "log_z must be a function log_z(x)"),
        ("data = np.zeros((0, 3))", "at least one datum"),
        ("def initial(x):\n    return 1 / 0", "evaluating the first datum failed"),
    ],
)
def test_conditional_file_errors_are_one_line(target_file, extra, message):
    target_file.write_text(textwrap.dedent(TARGET_FILE) + "\n" + extra + "\n")
    with pytest.raises(TargetError) as err:
        load_target(str(target_file))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_cli_writes_one_json_line_per_datum_and_a_summary(mcd, target_file, tmp_path):
    output = tmp_path / "out.jsonl"
    code, out, err = mcd(
        ["estimate", target_file, "--data-index", "1:4", "--backward", "ais", "--iterations", "0",
         "--steps", "4", "--samples", "512", "--json", "-o", output]
    )
    assert code == 0, err
    lines = records(out)
    assert lines == [json.loads(line) for line in output.read_text().splitlines()]
    data, summary = lines[:-1], lines[-1]
    assert [d["datum"] for d in data] == [1, 2, 3]
    for d in data:
        assert d["record"] == "datum"
        for key in ("log_z", "ess", "pareto_k", "known_log_z", "delta_stderr"):
            assert isinstance(d[key], float), key
        assert d["status"] in ("ok", "warn", "unreliable")
        assert d["log_z_stderr"] is None or isinstance(d["log_z_stderr"], float)
    assert summary["record"] == "summary" and summary["num_data"] == 3
    assert summary["data_index"] == [1, 4] and summary["amortise"] is False
    assert set(summary["counts"]) == {"ok", "warn", "unreliable", "failed"}
    assert summary["mean_log_z"] == pytest.approx(np.mean([d["log_z"] for d in data]))
    console = Console(width=200, record=True)
    console.print(report.per_datum_table(summary))
    text = console.export_text()
    assert "± Monte Carlo" in text and "± over data" in text and "3 data" in text and "known mean" in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--data-index", "7:9"], "selects no datum"),
        (["--init", "laplace"], "one initial distribution"),
        (["--repeats", "2"], "--repeats is not available"),
    ],
)
def test_cli_bad_per_datum_options_exit_2(mcd, target_file, args, message):
    code, out, err = mcd(["estimate", target_file, "--backward", "ais", "--iterations", "0", *args])
    assert code == 2
    assert message in one_line_error(err)


def test_cli_per_datum_options_need_a_conditional_target(mcd, gauss_yaml):
    code, _, err = mcd(["estimate", gauss_yaml, "--amortise"])
    assert code == 2 and "conditional targets" in one_line_error(err)


ENCODER = f"""

POST_COV = np.linalg.inv(np.eye({D}) + W.T @ W / {SIGMA}**2)

def initial(x):
    mean = jnp.asarray(POST_COV @ W.T / {SIGMA}**2) @ x
    return mean + 0.5, 1.5 * jnp.sqrt(jnp.asarray(np.diag(POST_COV)))
"""


def test_cli_per_datum_smc_from_the_encoder_matches_the_closed_form(mcd, target_file):
    """Adaptive tempered SMC-MALA on each datum from its own initial(x), no training: the SMC
    standard error and `smc` section per datum, every datum within its tolerance."""
    target_file.write_text(textwrap.dedent(TARGET_FILE) + ENCODER)
    code, out, err = mcd(
        ["estimate", target_file, "--data-index", "0:3", "--backward", "ais", "--iterations", "0",
         "--resample", "0.5", "--refine", "mala", "--schedule", "adaptive", "--samples", "1024", "--json"]
    )
    assert code == 0, err
    lines = records(out)
    data, summary = lines[:-1], lines[-1]
    assert [d["datum"] for d in data] == [0, 1, 2]
    within_tolerance(data)
    for d in data:
        section = d["smc"]
        # 1024 samples: the default 8 populations of 128, each with 15 moves per step
        assert section["schedule"] == "adaptive" and section["refine"] == "mala" and section["refine_steps"] == 15
        assert section["particles"] == 128 and section["populations"] == 8 and len(section["steps"]) == 8
        for key in ("beta", "ess", "acceptance", "step_size", "resampled_steps", "steps", "resamplings",
                    "final_ess", "log_z_populations", "genealogy_stderr"):
            assert isinstance(section[key], list), key
        assert len(section["beta"]) == section["steps"][0] and section["beta"][-1] == 1.0
        assert section["log_z_is"] is None
    assert summary["label"] == "SMC-MALA" and summary["steps"] is None and summary["iterations"] == 0
    assert summary["smc"]["mean_steps"] == pytest.approx(np.mean([np.mean(d["smc"]["steps"]) for d in data]))
    assert summary["smc"]["populations"] == 8
    assert set(summary["smc"]) >= {"schedule", "particles", "populations", "mean_steps", "mean_resamplings",
                                   "mean_final_ess", "mean_acceptance", "mean_log_z_is"}
    console = Console(width=200, record=True)
    console.print(report.per_datum_table(summary))
    assert "adaptive tempered SMC" in console.export_text()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--resample", "0.5", "--samples", "100", "--particles", "30"], "not a multiple of --particles"),
        (["--resample", "0", "--particles", "32"], "--particles sets the SMC population size"),
        (["--schedule", "adaptive", "--refine", "hmc", "--steps", "4"], "--steps does not apply"),
        (["--schedule", "adaptive", "--refine", "none"], "refine must be mala or hmc"),
    ],
)
def test_cli_bad_per_datum_smc_options_exit_2(mcd, target_file, args, message):
    code, out, err = mcd(["estimate", target_file, "--backward", "ais", "--iterations", "0", *args])
    assert code == 2
    assert message in one_line_error(err)


def _volatile_free(summary: dict) -> dict:
    drop = {"train_seconds", "estimate_seconds", "device", "version", "target_info"}
    return {k: v for k, v in summary.items() if k not in drop}


def test_per_datum_run_checkpoints_and_resumes_to_the_uninterrupted_records(tmp_path):
    """Interrupted after its second datum, a checkpointed amortised run resumes from its saved training
    state and data log: the resumed run emits only the rest, and every record equals an uninterrupted run's."""
    target = linear_gaussian(4)
    # The sampler, training and sample size of test_amortised_per_datum_estimates_match_the_closed_form:
    # its compiled programs (the session's persistent compilation cache holds them).
    sconf = SamplerConfig(sampler="ula", backward="mcd", steps=4, hidden=8, blocks=1, context_dim=target.context_dim)
    base = dict(tconf=TrainConfig(iterations=10, batch_size=32), amortise=True, num_samples=4096)
    whole_rows: list[dict] = []
    whole = perdatum.execute(
        perdatum.PerDatumPlan(target, sconf, **base), lambda r: whole_rows.append(r.as_dict())
    ).as_dict()

    plan = perdatum.PerDatumPlan(target, sconf, **base, checkpoint_dir=tmp_path / "ck", checkpoint_every=5)
    perdatum.validate(plan)
    first = _interrupted_after_two(plan)
    assert (tmp_path / "ck" / "state-r0.npz").exists() and (tmp_path / "ck" / perdatum.DATA_LOG).exists()
    with pytest.raises(UsageError, match="--resume"):
        perdatum.validate(plan)
    resumed = dataclasses.replace(plan, resume=True)
    perdatum.validate(resumed)
    rest: list[dict] = []
    summary = perdatum.execute(resumed, lambda r: rest.append(r.as_dict())).as_dict()
    assert [r["datum"] for r in first] == [0, 1] and [r["datum"] for r in rest] == [2, 3]
    strip = lambda r: {k: v for k, v in r.items() if k not in ("seconds", "compile_seconds")}  # noqa: E731
    assert [strip(r) for r in first + rest] == [strip(r) for r in whole_rows]
    assert _volatile_free(summary) == _volatile_free(whole)


def test_cli_resumes_a_checkpointed_per_datum_run_without_estimating_the_finished_data(mcd, target_file, tmp_path):
    """`mcd estimate --checkpoint DIR` logs each datum; rerun with `--resume` after losing the last
    datum's line, it estimates only that datum (from the saved training state) and gives the same summary."""
    ck = tmp_path / "ck"
    args = ["estimate", target_file, "--data-index", "0:3", "--amortise", "--backward", "ais", "--steps", "2",
            "--iterations", "2", "--batch-size", "16", "--samples", "128", "--resample", "0",
            "--checkpoint", ck, "--checkpoint-every", "1", "--json"]
    code, out, err = mcd(args)
    assert code == 0, err
    first = records(out)
    log = ck / perdatum.DATA_LOG
    assert [json.loads(line) for line in log.read_text().splitlines()] == first[:-1]
    assert [d["datum"] for d in first[:-1]] == [0, 1, 2] and (ck / "state-r0.npz").exists()
    code, _, err = mcd(args)
    assert code == 2 and "--resume" in one_line_error(err)
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines()[:2]))
    code, out, err = mcd([*args, "--resume"])
    assert code == 0, err
    resumed = records(out)
    strip = lambda r: {k: v for k, v in r.items() if k not in ("seconds", "compile_seconds")}  # noqa: E731
    assert [strip(d) for d in resumed[:-1]] == [strip(first[2])]
    assert _volatile_free(resumed[-1]) == _volatile_free(first[-1])


def test_a_data_log_line_that_cannot_be_written_is_a_warning_and_resume_estimates_that_datum(
    mcd, target_file, tmp_path, monkeypatch
):
    """The data log is insurance: a full disk while datum 1's line is appended warns once, counts the
    failure in the summary and goes on; a resume estimates datum 1 again, and only it."""
    ck = tmp_path / "ck"
    args = ["estimate", target_file, "--data-index", "0:3", "--amortise", "--backward", "ais", "--steps", "2",
            "--iterations", "2", "--batch-size", "16", "--samples", "128", "--resample", "0",
            "--checkpoint", ck, "--checkpoint-every", "1", "--json"]
    real, calls = files.append_line, []

    def full_disk_on_the_second(path, line):
        calls.append(path)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, line)

    monkeypatch.setattr(files, "append_line", full_disk_on_the_second)
    code, out, err = mcd(args)
    monkeypatch.undo()
    assert code == 0, err
    first = records(out)
    assert [d["datum"] for d in first[:-1]] == [0, 1, 2] and first[-1]["checkpoint_failures"] == 1
    warnings = [line for line in err.splitlines() if "data log" in line]
    assert len(warnings) == 1 and "No space left on device" in warnings[0]
    log = ck / perdatum.DATA_LOG
    assert [json.loads(line)["datum"] for line in log.read_text().splitlines()] == [0, 2]
    code, out, err = mcd([*args, "--resume"])
    assert code == 0, err
    resumed = records(out)
    strip = lambda r: {k: v for k, v in r.items() if k not in ("seconds", "compile_seconds")}  # noqa: E731
    assert [strip(d) for d in resumed[:-1]] == [strip(first[1])]
    drop = {"checkpoint_failures"}
    assert {k: v for k, v in _volatile_free(resumed[-1]).items() if k not in drop} == {
        k: v for k, v in _volatile_free(first[-1]).items() if k not in drop
    }


def test_a_datum_record_reads_back_from_its_json_line():
    """The resume log's line format: `as_dict` as JSON, read back by `from_dict` to an equal record."""
    rng = np.random.default_rng(0)
    for est, error in ((summarize(rng.normal(size=64)), ""), (None, "all 64 importance weights are zero")):
        rec = DatumRecord.of(3, est, -1.5, error)
        line = json.dumps(rec.as_dict(), allow_nan=False)
        assert DatumRecord.from_dict(json.loads(line)) == rec
        assert list(json.loads(line))[:3] == ["record", "datum", "log_z"]


def test_reference_log_z_may_use_numpy_scipy_and_float():
    """The file's log_z(x) runs eagerly on concrete data: numpy, scipy and float() work."""
    import scipy.stats

    def reference(x):
        return float(scipy.stats.multivariate_normal(np.zeros(M), COV).logpdf(np.asarray(x, dtype=np.float64)))

    target = ConditionalTarget.create(
        log_density, D, linear_gaussian(2).data, log_z=reference, name="scipy_reference"
    )
    sconf = SamplerConfig(sampler="ula", backward="ais", steps=3)
    rows: list[dict] = []
    plan = perdatum.PerDatumPlan(target, sconf, TrainConfig(iterations=0), amortise=False, num_samples=256)
    perdatum.execute(plan, lambda r: rows.append(r.as_dict()))
    assert [r["known_log_z"] for r in rows] == pytest.approx([reference(x) for x in target.data])


def test_an_error_in_the_reference_log_z_names_the_file():
    def reference(x):
        return {"a": 1}["missing column"]

    target = ConditionalTarget.create(
        log_density, D, linear_gaussian(1).data, log_z=reference, name="bad", source="/data/model.py"
    )
    plan = perdatum.PerDatumPlan(target, SamplerConfig(backward="ais", steps=2), TrainConfig(iterations=0), amortise=False, num_samples=64)
    with pytest.raises(RunFailed, match=r"error in /data/model.py, function log_z: KeyError"):
        perdatum.execute(plan, lambda rec: None)


def test_cli_per_datum_default_is_the_policy(mcd, target_file):
    """No method option: pilots of adaptive SMC on the first data choose the effort, a final run with
    its own keys estimates every datum (only its records are emitted), and the seed reproduces it."""
    args = ["estimate", target_file, "--samples", "1024", "--json"]
    code, out, err = mcd(args)
    assert code == 0, err
    lines = records(out)
    data, summary = lines[:-1], lines[-1]
    policy = summary["policy"]
    roles = [s["role"] for s in policy["stages"]]
    assert roles[0] == "pilot" and roles[-1] == "final" and set(roles[:-1]) == {"pilot"}
    assert policy["reported_stage"] == len(roles) - 1 and policy["stages"][-1]["decision"] == "reported"
    pilot, final = policy["stages"][0], policy["stages"][-1]
    assert pilot["data_index"] == [0, 4] and final["data_index"] == [0, 5]
    assert pilot["num_samples"] == 4 * pilot["effort"]["population"] and sum(pilot["counts"].values()) == 4
    assert final["counts"] == summary["counts"] and final["num_samples"] == summary["num_samples"] >= 1024
    assert [d["datum"] for d in data] == [0, 1, 2, 3, 4]
    within_tolerance(data)
    for d in data:
        assert d["smc"]["schedule"] == "adaptive" and d["smc"]["refine"] == "hmc"
        assert d["smc"]["particles"] == final["effort"]["population"]
    assert summary["iterations"] == 0 and summary["label"] == "SMC-HMC"
    console = Console(width=250, record=True)
    console.print(report.per_datum_table(summary))
    row = next(line for line in console.export_text().splitlines() if line.strip().startswith("policy"))
    assert "pilot" in row and "data 0:4: " in row and f"final {final['num_samples']} (data 0:5: " in row
    code, again, err = mcd(args)
    assert code == 0, err
    strip = lambda r: {k: v for k, v in r.items() if k not in ("seconds", "compile_seconds", "estimate_seconds", "policy")}  # noqa: E731
    assert [strip(r) for r in records(again)] == [strip(r) for r in lines]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--separate", "--max-se", "0.1"], "which --amortise turns off"),
        (["--time-limit", "10s"], "--time-limit is not available for a conditional target"),
        (["--train-stage", "0"], "--train-stage is not available"),
    ],
)
def test_cli_per_datum_policy_options_exit_2(mcd, target_file, args, message):
    code, out, err = mcd(["estimate", target_file, *args])
    assert code == 2
    assert message in one_line_error(err)


def _stand_in(monkeypatch, status_of):
    """Replaces each datum's SMC run by a stand-in whose verdict is `status_of(sconf)` and whose
    log Ẑ is drawn from its key; returns the list of (refine_steps, key data, datum) it was called with."""
    from mcd_cli.stats import Reason, Status
    from mcd_cli.stats.reasons import CODES

    calls = []

    def estimate(plan, params, key, x, sharding):
        calls.append((plan.sconf.refine_steps, tuple(np.asarray(jax.random.key_data(key)).ravel())))
        est = summarize(np.asarray(jax.random.normal(key, (256,))))
        status, code = status_of(plan.sconf)
        reasons = () if code is None else (Reason(code, dict.fromkeys(CODES[code], 1)),)
        return dataclasses.replace(est, status=Status(status), reasons=reasons, num_samples=plan.num_samples), None

    monkeypatch.setattr(perdatum, "_estimate_datum", estimate)
    return calls


def test_policy_escalates_on_the_pilot_data_and_reports_a_fresh_final_run(monkeypatch):
    """Moves that did not mix on a pilot datum double the moves; the next pilot is ok, and the final
    run estimates every datum at that effort with keys no pilot used."""
    calls = _stand_in(monkeypatch, lambda s: ("ok", None) if s.refine_steps > 15 else ("warn", "moves_barely_move"))
    target = linear_gaussian(6)
    plan = perdatum.PerDatumPlan(
        target, SamplerConfig(), TrainConfig(), amortise=False, num_samples=1024
    )
    rows: list[DatumRecord] = []
    summary = policy_perdatum.execute(plan, Policy(), rows.append)
    stages = summary.policy["stages"]
    assert [(s["role"], s["effort"]["moves"]) for s in stages] == [("pilot", 15), ("pilot", 30), ("final", 30)]
    assert stages[0]["reason_codes"] == ["moves_barely_move"] and "more moves" in stages[0]["decision"]
    assert stages[1]["counts"]["ok"] == 4 and stages[1]["decision"].startswith("pilot data ok")
    assert [r.datum for r in rows] == list(range(6)) and summary.counts["ok"] == 6
    assert summary.sampler.refine_steps == 30 and summary.sampler.adaptive and summary.training.iterations == 0
    keys = [k for _, k in calls]
    assert len(calls) == 4 + 4 + 6 and len(set(keys)) == len(keys)  # every stage draws its own numbers


def test_policy_per_datum_has_no_trained_rung(monkeypatch):
    """Reasons that only training would answer end the pilots: the final run takes the last effort."""
    _stand_in(monkeypatch, lambda s: ("warn", "few_populations"))
    plan = perdatum.PerDatumPlan(
        linear_gaussian(2), SamplerConfig(), TrainConfig(), amortise=False, num_samples=1024
    )
    summary = policy_perdatum.execute(plan, Policy(), lambda rec: None)
    stages = summary.policy["stages"]
    assert [s["role"] for s in stages] == ["pilot", "final"] and stages[0]["data_index"] == [0, 2]
    assert "nothing left to raise" in stages[0]["decision"] and not stages[1]["effort"]["trained"]


def test_policy_per_datum_resumes_its_final_run(monkeypatch, tmp_path):
    """Interrupted in its final run, a policy run resumes: the pilots run again, the final run skips
    the logged data, and the records and summary are the uninterrupted run's."""
    _stand_in(monkeypatch, lambda s: ("ok", None))
    base = perdatum.PerDatumPlan(
        linear_gaussian(5), SamplerConfig(), TrainConfig(), amortise=False, num_samples=1024
    )
    whole_rows: list[dict] = []
    whole = policy_perdatum.execute(base, Policy(), lambda r: whole_rows.append(r.as_dict())).as_dict()
    plan = dataclasses.replace(base, checkpoint_dir=tmp_path / "ck")
    perdatum.validate(plan)
    first = _interrupted_after_two(plan, Policy())
    resumed = dataclasses.replace(plan, resume=True)
    perdatum.validate(resumed)
    rest: list[dict] = []
    summary = policy_perdatum.execute(resumed, Policy(), lambda r: rest.append(r.as_dict())).as_dict()
    assert [r["datum"] for r in rest] == [2, 3, 4]
    assert first + rest == whole_rows
    drop = lambda r: {k: v for k, v in _volatile_free(r).items() if k != "policy"}  # noqa: E731
    assert drop(summary) == drop(whole)
    assert [s["counts"] for s in summary["policy"]["stages"]] == [s["counts"] for s in whole["policy"]["stages"]]


def _interrupted_after_two(plan, policy=None) -> list[dict]:
    """Runs `plan` and presses Ctrl-C as the second datum's record comes in; the records made."""
    first: list[dict] = []

    def stop_after_two(rec):
        first.append(rec.as_dict())
        if len(first) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        if policy is None:
            perdatum.execute(plan, stop_after_two)
        else:
            policy_perdatum.execute(plan, policy, stop_after_two)
    return first
