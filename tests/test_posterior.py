"""`mcd estimate --posterior FILE`: the final SMC populations as posterior draws.

The draws are checked against exact posteriors: a correlated Gaussian (a YAML `family: normal`)
and the conjugate Beta–Bernoulli model written in NumPyro, whose draws must come back on the
constrained space under the model's site names. Draws resampled to equal weights are correlated
(duplicates of one particle, particles of one ancestry), so the tolerances take the effective
number of draws to be a quarter of the draws: 5 standard errors of a mean, `5 sd / √(N/4)`, and
of a variance, `5 σ² √(2 / (N/4))`. Seeds are fixed; one run of each target is shared by the
tests that read it.
"""

from __future__ import annotations

import errno
import json
import os
import sys
import textwrap
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import invoke, one_line_error, records
from mcd_cli.report.posterior import read_npz
from mcd_cli.run.draws import posterior_draws
from mcd_cli.targets import Target
from mcd_cli.targets.transforms import heavy_tailed, tukey_h, whiten

FAST = ["--backward", "ais", "--iterations", "0", "--schedule", "adaptive", "--samples", "4096", "--particles", "1024"]
LOC = 1.0
COV = np.array([[0.5, 0.3], [0.3, 0.4]])
GAUSS = f"""\
name: conjugate_gauss
description: "N(1, Σ) in d = 2: its own posterior, known exactly"
family: normal
params: {{dim: 2, loc: {LOC}, cov: {COV.tolist()}}}
initial: {{mean: 0.0, scale: 2.0}}
"""
# Beta(2, 3) prior, 20 flips with 14 heads: the posterior of p is Beta(16, 9); `odds` is deterministic.
A, B = 2.0, 3.0
FLIPS = [1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1]
BETA_BERNOULLI = f"""\
import numpy as np
import numpyro
import numpyro.distributions as dist

y = np.array({FLIPS})

def model(y):
    p = numpyro.sample("p", dist.Beta({A}, {B}))
    numpyro.deterministic("odds", p / (1 - p))
    with numpyro.plate("flips", len(y)):
        numpyro.sample("y", dist.Bernoulli(p), obs=y)
"""


def assert_moments(draws: np.ndarray, mean, var) -> None:
    """The draws' mean and variance (per coordinate) within 5 standard errors, N_eff = N/4."""
    flat = draws.reshape(-1, *draws.shape[2:])
    n_eff = flat.shape[0] / 4
    sd = np.sqrt(var)
    np.testing.assert_array_less(np.abs(flat.mean(axis=0) - mean), 5 * sd / np.sqrt(n_eff))
    np.testing.assert_array_less(np.abs(flat.var(axis=0) - var), 5 * var * np.sqrt(2 / n_eff))


def run(args) -> tuple[dict, str]:
    code, out, err = invoke(["estimate", *args, "--json"])
    assert code == 0, err
    (rec,) = records(out)
    return rec, err


@pytest.fixture(scope="module")
def gauss_run(tmp_path_factory):
    """One SMC run of the Gaussian, its draws written to .npz."""
    folder = tmp_path_factory.mktemp("gauss")
    target = folder / "conjugate_gauss.yaml"
    target.write_text(GAUSS)
    rec, err = run([target, *FAST, "--seed", "3", "--posterior", folder / "draws.npz"])
    return folder, target, rec, err


def test_draws_match_the_exact_posterior(gauss_run):
    folder, _, rec, err = gauss_run
    assert rec["status"] == "ok", rec["reasons"]
    draws, attrs = read_npz(folder / "draws.npz")
    assert list(draws) == ["x"] and draws["x"].shape == (4, 1024, 2)  # chains = populations, draws = particles
    assert_moments(draws["x"], LOC, np.diag(COV))
    x = draws["x"].reshape(-1, 2)
    n_eff = x.shape[0] / 4  # the covariance's standard error: sqrt((σ11 σ22 + σ12²) / N_eff)
    assert abs(np.cov(x.T)[0, 1] - COV[0, 1]) < 5 * np.sqrt((COV[0, 0] * COV[1, 1] + COV[0, 1] ** 2) / n_eff)
    # The file holds the whole result: the estimate, its SE, the verdict, the settings, the record.
    assert attrs["log_z"] == rec["log_z"] and attrs["log_z_stderr"] == rec["log_z_stderr"]
    assert attrs["status"] == "ok" and attrs["reasons"] == rec["reasons"] and attrs["seed"] == 3
    assert attrs["config"] == rec["config"] and json.loads(attrs["record"]) == rec
    assert (attrs["chains"], attrs["draws"], attrs["variables"]) == (4, 1024, ["x"])
    assert "systematic" in attrs["method"]
    assert "posterior draws written to" in err and "4 chains × 1024 draws of x" in err


def test_the_same_seed_gives_the_same_draws_and_the_estimate_is_unchanged(gauss_run, tmp_path):
    folder, target, rec, _ = gauss_run
    again, _ = run([target, *FAST, "--seed", "3", "--posterior", tmp_path / "again.npz"])
    np.testing.assert_array_equal(read_npz(tmp_path / "again.npz")[0]["x"], read_npz(folder / "draws.npz")[0]["x"])
    plain, _ = run([target, *FAST, "--seed", "3"])  # drawing changes none of the run's random numbers
    assert again["log_z"] == plain["log_z"] == rec["log_z"]


def test_the_default_policy_draws_from_its_reported_stage_only(gauss_yaml, tmp_path):
    """The draws are those of the reported stage alone (an `ok` pilot within --max-se, or the final
    run), which its record's config reproduces alone (`--stage`)."""
    # The policy run of test_policy.py's reproduction test (the same target, samples and seed): the
    # session's persistent compilation cache holds its programs.
    rec, _ = run([gauss_yaml, "--samples", "2048", "--seed", "1", "--posterior", tmp_path / "policy.npz"])
    policy = rec["policy"]
    assert rec["config"]["stage"] == policy["reported_stage"] == policy["stages"][-1]["stage"]
    draws, attrs = read_npz(tmp_path / "policy.npz")
    assert draws["x"].shape == (rec["smc"]["populations"], rec["smc"]["particles"], 2)
    assert attrs["record"] and json.loads(attrs["record"])["policy"] == policy
    config = tmp_path / "final.json"
    config.write_text(json.dumps(rec["config"]))
    alone, _ = run(["--config", config, "--posterior", tmp_path / "alone.npz"])
    assert alone["log_z"] == rec["log_z"]
    np.testing.assert_array_equal(read_npz(tmp_path / "alone.npz")[0]["x"], draws["x"])


def test_netcdf_is_arviz_inference_data_with_the_same_draws(gauss_run, tmp_path):
    az = pytest.importorskip("arviz")
    folder, target, _, _ = gauss_run
    rec, _ = run([target, *FAST, "--seed", "3", "--posterior", tmp_path / "draws.nc", "-q"])
    idata = az.from_netcdf(tmp_path / "draws.nc")
    post = idata.posterior
    assert dict(post.sizes)["chain"] == 4 and dict(post.sizes)["draw"] == 1024
    np.testing.assert_array_equal(post["x"].values, read_npz(folder / "draws.npz")[0]["x"])
    attrs = idata.attrs  # the file's own attributes (its root group)
    assert attrs["log_z"] == rec["log_z"] and attrs["status"] == rec["status"] and attrs["seed"] == 3
    assert json.loads(attrs["config"]) == rec["config"] and json.loads(attrs["reasons"]) == rec["reasons"]
    assert json.loads(attrs["record"]) == rec
    assert not list(tmp_path.glob(".draws.nc.*"))  # no temporary file left behind


@pytest.mark.slow
def test_a_numpyro_model_gives_its_constrained_sites_by_name(tmp_path):
    pytest.importorskip("numpyro")
    model = tmp_path / "beta_bernoulli.py"
    model.write_text(BETA_BERNOULLI)
    # From the prior (--init prior): tempering with moves, then the map back to p's support.
    rec, _ = run([model, *FAST, "--init", "prior", "--posterior", tmp_path / "draws.npz"])
    assert rec["status"] == "ok", rec["reasons"]
    draws, attrs = read_npz(tmp_path / "draws.npz")
    assert sorted(draws) == ["odds", "p"] and attrs["variables"] == list(draws)
    p = draws["p"]
    assert p.shape == (4, 1024) and np.all((p > 0) & (p < 1))  # on (0, 1), not the logit scale
    np.testing.assert_allclose(draws["odds"], p / (1 - p), rtol=1e-4)
    a, b = A + sum(FLIPS), B + len(FLIPS) - sum(FLIPS)  # Beta(16, 9)
    assert_moments(p, a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1)))


def test_the_map_back_composes_through_the_transforms():
    """`user_values` of whiten ∘ heavy_tailed is the user's x at the composed map, under vmap and jit."""
    t = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2)
    mu, chol = np.array([1.0, -2.0]), np.array([[2.0, 0.0], [0.5, 0.3]])
    composed = heavy_tailed(whiten(t, mu, chol).with_initial(np.array([0.1, 0.2]), np.array([1.5, 0.5])), 0.2)
    u = jax.random.normal(jax.random.key(0), (5, 2))
    got = jax.jit(jax.vmap(composed.user_values))(u)["x"]
    v = np.array([0.1, 0.2]) + np.array([1.5, 0.5]) * np.asarray(tukey_h(u, 0.2))
    np.testing.assert_allclose(got, mu + v @ chol.T, rtol=1e-5)
    # The draws of a population whose weights sit on one particle are that particle, N times.
    log_w = jnp.log(jnp.array([0.0, 1.0, 0.0, 0.0, 0.0]))
    draws = posterior_draws(composed, jax.random.key(1), [(u, log_w)])["x"]
    np.testing.assert_allclose(draws[0], np.repeat(got[1:2], 5, axis=0), rtol=1e-6)


CONDITIONAL = """\
import jax.numpy as jnp
import numpy as np
from jax.scipy.stats import norm

dim = 1
data = np.zeros((3, 1), dtype=np.float32)

def log_density(z, x):
    return jnp.sum(norm.logpdf(z)) + jnp.sum(norm.logpdf(x, z, 1.0))
"""


@pytest.mark.parametrize(
    "case, args, message",
    [
        ("suffix", ["--posterior", "{tmp}/draws.csv"], "give a file ending in .nc (ArviZ) or .npz (numpy)"),
        ("directory", ["--posterior", "{tmp}/no/such/draws.npz"], "does not exist"),
        ("importance sampling", ["--resample", "0", "--posterior", "{tmp}/draws.npz"], "use SMC"),
    ],
)
def test_bad_requests_are_one_line_before_any_work(gauss_yaml, tmp_path, case, args, message):
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    code, out, err = invoke(["estimate", gauss_yaml, "--backward", "ais", "--iterations", "0", *args])
    assert code == 2 and out == ""
    assert message in one_line_error(err), err
    assert not list(tmp_path.glob("draws*"))


def test_a_conditional_target_refuses_posterior(tmp_path):
    target = tmp_path / "conditional.py"
    target.write_text(textwrap.dedent(CONDITIONAL))
    code, _, err = invoke(["estimate", target, "--posterior", tmp_path / "draws.npz"])
    assert code == 2
    assert "--posterior is not available for a conditional target" in one_line_error(err)


def test_netcdf_without_arviz_names_the_extra(gauss_yaml, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "arviz", None)  # `import arviz` now raises ImportError
    code, _, err = invoke(["estimate", gauss_yaml, *FAST, "--posterior", tmp_path / "draws.nc"])
    assert code == 2
    line = one_line_error(err)
    assert "pip install 'mcd-cli[posterior]'" in line and "FILE.npz" in line


def test_a_file_that_cannot_be_written_fails_in_one_line_after_the_record(gauss_yaml, tmp_path, monkeypatch):
    """A full disk when the file is moved into place: the estimate is printed and appended, then
    one line naming the file, exit 1; neither the file nor a temporary one is left."""
    from mcd_cli.io import files

    class FullForDraws(types.ModuleType):  # `os` as `checkpoint` sees it, but no room for draws.npz
        def __getattr__(self, name):
            return getattr(os, name)

        def replace(self, src, dst):
            if str(dst).endswith("draws.npz"):
                raise OSError(errno.ENOSPC, "No space left on device")
            return os.replace(src, dst)

    monkeypatch.setattr(files, "os", FullForDraws("os"))
    args = [*FAST[:-4], "--samples", "512", "--particles", "256", "-o", tmp_path / "runs.jsonl"]
    code, out, err = invoke(["estimate", gauss_yaml, *args, "--posterior", tmp_path / "draws.npz", "--json", "-q"])
    assert code == 1 and len(records(out)) == 1
    line = one_line_error(err)
    assert "cannot write --posterior file" in line and "draws.npz" in line and "[ENOSPC]" in line
    assert "the estimate was still printed and recorded" in line
    assert (tmp_path / "runs.jsonl").read_text().count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.jsonl", "tiny_gauss.yaml"]


def test_a_failed_netcdf_write_leaves_no_file(tmp_path, monkeypatch):
    pytest.importorskip("arviz")
    from mcd_cli.report import posterior

    rec = {"log_z": 0.0, "log_z_stderr": None, "status": "ok", "reasons": [], "seed": 0, "config": {}}
    posterior.write(tmp_path / "old.nc", {"x": np.zeros((1, 2, 1))}, rec)

    def no_space(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(posterior.os, "replace", no_space)
    with pytest.raises(OSError):
        posterior.write(tmp_path / "old.nc", {"x": np.ones((1, 2, 1))}, rec)
    monkeypatch.undo()
    assert [p.name for p in tmp_path.iterdir()] == ["old.nc"]  # the previous file, no temporary one
    assert np.all(posterior.require().from_netcdf(tmp_path / "old.nc").posterior["x"].values == 0)
