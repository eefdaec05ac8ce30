"""PyMC models as targets: densities, exact evidences, data, draws, comparison with NumPyro, errors.

The example models in targets/pymc/ are checked against their NumPyro copies in targets/numpyro/
(equal log densities at random points, to float32 precision), the Beta–binomial also against its
density written out by hand (prior, likelihood and the log-Jacobian of the log-odds), and both
against their exact log Z (by quadrature of the 1-D density; through the command line, within four
of the estimate's own standard errors). Every bad input must fail in one line, with exit status 2
at the command line. Skipped when the `pymc` extra is not installed.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import betaln, gammaln, logsumexp
from scipy.stats import multivariate_normal

pytest.importorskip("pymc")
pytest.importorskip("numpyro")

from conftest import invoke, one_line_error, records, write_file  # noqa: E402
from conftest import target_error as error_of  # noqa: E402
from mcd_cli.report.posterior import read_npz  # noqa: E402
from mcd_cli.targets import load_target  # noqa: E402
from mcd_cli.targets.numpyro_model import is_model_target, prior_initial  # noqa: E402

ROOT = Path(__file__).resolve().parents[1] / "targets"
PYMC_NN, NUMPYRO_NN = str(ROOT / "pymc" / "normal_normal.py"), str(ROOT / "numpyro" / "normal_normal.py")
PYMC_BB, NUMPYRO_BB = str(ROOT / "pymc" / "beta_binomial.py"), str(ROOT / "numpyro" / "beta_binomial.py")
PYMC_LR, NUMPYRO_LR = str(ROOT / "pymc" / "logreg_breast_cancer.py"), str(ROOT / "numpyro" / "logreg_breast_cancer.py")
# Plain AIS, no training: the cheapest estimate (importance sampling for estimate and compare).
AIS = ["--backward", "ais", "--iterations", "0", "--steps", "128", "--samples", "4096", "--init", "prior"]
FLOAT_ATOL = 1e-3  # float32 densities; log Ẑ accumulated in float32 over K steps


def write(folder: Path, name: str, text: str) -> str:
    return str(write_file(folder, name, text))


def log_integral_1d(log_density, lo: float = -40.0, hi: float = 40.0, num: int = 200_001) -> float:
    """log ∫ exp(log_density(x)) dx over a fine grid of the line (trapezoid rule, in float64)."""
    grid = np.linspace(lo, hi, num)
    values = np.asarray(jax.jit(jax.vmap(log_density))(jnp.asarray(grid)[:, None]), dtype=np.float64)
    weights = np.full(num, grid[1] - grid[0])
    weights[[0, -1]] /= 2
    return float(logsumexp(values + np.log(weights)))


@pytest.fixture(scope="module")
def examples():
    return {path: load_target(path) for path in (PYMC_NN, NUMPYRO_NN, PYMC_BB, NUMPYRO_BB)}


@pytest.mark.parametrize("pymc, numpyro", [(PYMC_NN, NUMPYRO_NN), (PYMC_BB, NUMPYRO_BB)])
def test_density_equals_the_numpyro_copy(examples, pymc, numpyro):
    a, b = examples[pymc], examples[numpyro]
    assert a.dim == b.dim == 1 and a.log_z == b.log_z and a.name == b.name
    x = 2.0 * jax.random.normal(jax.random.key(0), (16, 1))
    np.testing.assert_allclose(
        np.asarray(jax.vmap(a.log_density)(x)), np.asarray(jax.vmap(b.log_density)(x)), rtol=2e-6, atol=2e-5
    )


def test_logistic_regression_equals_the_numpyro_copy_and_the_bundled_target():
    """targets/pymc/logreg_breast_cancer.py (the peers benchmark's PyMC regression, d = 31) is the
    bundled YAML target's density, as its NumPyro copy is, and shares its reference log Z."""
    a, b, c = (load_target(p) for p in (PYMC_LR, NUMPYRO_LR, str(ROOT / "logreg_breast_cancer.yaml")))
    assert a.dim == b.dim == c.dim == 31 and a.log_z == b.log_z == c.log_z
    x = 0.3 * jax.random.normal(jax.random.key(1), (8, 31))
    values = [np.asarray(jax.vmap(t.log_density)(x), np.float64) for t in (a, b, c)]
    np.testing.assert_allclose(values[0], values[1], rtol=1e-5)
    np.testing.assert_allclose(values[0], values[2], rtol=1e-5)


def test_beta_binomial_density_by_hand(examples):
    """log Beta(p; 2, 3) + log Binomial(14; 20, p) + log p(1 − p), at p = sigmoid(x), in float64."""
    x = np.linspace(-6.0, 6.0, 25)
    p = 1 / (1 + np.exp(-x))
    log_beta = np.log(p) + 2 * np.log1p(-p) - betaln(2.0, 3.0)
    log_binomial = gammaln(21) - gammaln(15) - gammaln(7) + 14 * np.log(p) + 6 * np.log1p(-p)
    hand = log_beta + log_binomial + np.log(p) + np.log1p(-p)
    got = np.asarray(jax.vmap(examples[PYMC_BB].log_density)(jnp.asarray(x[:, None], jnp.float32)))
    np.testing.assert_allclose(got, hand, rtol=2e-6, atol=2e-5)


@pytest.mark.parametrize("path", [PYMC_NN, PYMC_BB])
def test_density_integrates_to_the_exact_evidence(examples, path):
    """∫ exp(log density) dx = exp(log Z): PyMC's log-Jacobian of the log-odds is included."""
    target = examples[path]
    assert log_integral_1d(target.log_density) == pytest.approx(target.log_z, abs=1e-4)


def test_float32_without_x64_and_without_warnings(examples):
    """Loading PyMC's JAX backend leaves jax_enable_x64 off; the density is float32 in and out,
    and tracing it warns of nothing (no float64 silently asked for)."""
    assert not jax.config.jax_enable_x64
    target = examples[PYMC_BB]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = jax.jit(jax.value_and_grad(target.log_density))(jnp.zeros(1, jnp.float32))
        user = jax.jit(target.user_values)(jnp.zeros(1, jnp.float32))
    assert value[0].dtype == value[1].dtype == user["p"].dtype == jnp.float32
    assert float(user["p"]) == pytest.approx(0.5)


def test_records_identify_the_model_and_its_data(examples):
    nn, bb = examples[PYMC_NN], examples[PYMC_BB]
    assert nn.params["model"] == "model" and nn.params["data"]["y"].startswith("float64[12] sha256:")
    assert nn.params["data"] == examples[NUMPYRO_NN].params["data"]  # the same data, the same record
    assert bb.params["data"] == {"heads": 14}
    assert bb.description.startswith("Conjugate Beta–binomial model in PyMC")


def test_data_file_replaces_pm_data_and_log_z_follows(tmp_path):
    y = np.array([0.5, 1.5, 4.0, 2.5])
    target = load_target(PYMC_NN, data={"y": y})
    exact = multivariate_normal(np.ones(4), np.eye(4) + 4.0 * np.ones((4, 4))).logpdf(y)
    assert target.log_z == pytest.approx(exact, abs=1e-12)
    assert target.params["data"]["y"].startswith("float64[4] sha256:")
    assert log_integral_1d(target.log_density) == pytest.approx(exact, abs=1e-4)


def test_prior_start_fits_the_prior():
    """mu ~ N(1, 2²): `--init prior` draws PyMC's prior; centre and scale within four standard errors."""
    target = load_target(PYMC_NN)
    assert is_model_target(target)
    mean, scale = prior_initial(target, jax.random.key(0), num=4096)
    assert abs(mean[0] - 1.0) < 4 * 1.2533 * 2.0 / np.sqrt(4096)
    assert abs(scale[0] - 2.0) < 4 * 0.825 * 2.0 / np.sqrt(4096)


def test_command_line_estimates_the_exact_evidence():
    code, out, err = invoke(["estimate", PYMC_BB, *AIS, "--resample", "0", "--json", "-q"])
    assert code == 0, err
    (rec,) = records(out)
    assert rec["status"] in ("ok", "warn") and rec["log_z_stderr"] is not None, rec["reasons"]
    assert rec["target_params"]["model"] == "model"
    assert abs(rec["log_z"] - rec["reference_log_z"]) < 4 * rec["log_z_stderr"] + FLOAT_ATOL, rec


def test_compare_a_pymc_and_a_numpyro_file_of_one_model():
    """The same model in two languages: log B ≈ 0 within four combined standard errors."""
    code, out, err = invoke(["compare", PYMC_NN, NUMPYRO_NN, *AIS, "--json", "-q"])
    assert code == 0, err
    *models, summary = records(out)
    assert [m["target_spec"] for m in models] == [PYMC_NN, NUMPYRO_NN]
    assert summary["kind"] == "comparison"
    a, b = models
    diff = a["log_z"] - b["log_z"]
    assert abs(diff) < 4 * np.hypot(a["log_z_stderr"], b["log_z_stderr"]) + FLOAT_ATOL, (a["log_z"], b["log_z"])
    worse = min(summary["models"], key=lambda m: m["log_z"])
    assert abs(worse["log_bf"]) == pytest.approx(abs(diff), abs=1e-6)


@pytest.mark.slow
def test_posterior_draws_by_the_models_names_on_the_constrained_space(tmp_path):
    """p | 14 of 20 ~ Beta(16, 9): the draws are `p` in (0, 1), with the exact mean and variance
    within five standard errors (effective draws N/4, as tests/test_posterior.py)."""
    args = ["--backward", "ais", "--iterations", "0", "--schedule", "adaptive", "--samples", "4096",
            "--particles", "1024", "--init", "prior", "--posterior", tmp_path / "d.npz", "--json"]
    code, out, err = invoke(["estimate", PYMC_BB, *args])
    assert code == 0, err
    (rec,) = records(out)
    assert rec["status"] == "ok", rec["reasons"]
    draws, attrs = read_npz(tmp_path / "d.npz")
    assert list(draws) == ["p"] and attrs["variables"] == ["p"]
    p = draws["p"].reshape(-1)
    assert np.all((p > 0) & (p < 1))
    a, b = 16.0, 9.0
    mean, var, n_eff = a / (a + b), a * b / ((a + b) ** 2 * (a + b + 1)), p.size / 4
    assert abs(p.mean() - mean) < 5 * np.sqrt(var / n_eff)
    assert abs(p.var() - var) < 5 * var * np.sqrt(2 / n_eff)


# What cannot be a target, and bad requests: one line each.

HEADER = "import numpy as np\nimport pymc as pm\nimport pytensor.tensor as pt\n"
NO_JAX = """\
from pytensor.graph import Apply, Op

class NoJax(Op):  # an op with a Python implementation only
    def make_node(self, a):
        a = pt.as_tensor_variable(a)
        return Apply(self, [a], [a.type()])

    def perform(self, node, inputs, outputs):
        outputs[0][0] = np.asarray(-inputs[0] ** 2)
"""


@pytest.mark.parametrize(
    "body, expected",
    [
        (
            'z = pm.Bernoulli("z", 0.3)\n    pm.Normal("y", z, 1.0, observed=np.zeros(3))',
            "free variable 'z' (BernoulliRV) is discrete",
        ),
        ('pm.Normal("y", 0.0, 1.0, observed=np.zeros(3))', "the model has no free variable"),
        ('pm.Normal("a", 0.0, 1.0)', "no variable is observed"),
        (
            'a = pm.Normal("a", 0.0, 1.0)\n    pm.Potential("bad", NoJax()(a))',
            "the model uses an op that PyTensor cannot compile to JAX (NotImplementedError: No JAX conversion "
            "for the given `Op`: NoJax)",
        ),
    ],
)
def test_models_that_cannot_be_targets(tmp_path, body, expected):
    file = write(tmp_path, "bad.py", HEADER + NO_JAX + "with pm.Model() as model:\n    " + body + "\n")
    assert expected in error_of(file)


def test_model_names_select_a_model_and_a_numpyro_function_keeps_working(tmp_path):
    two = write(
        tmp_path,
        "two.py",
        HEADER + "with pm.Model() as wide:\n"
        '    pm.Normal("y", pm.Normal("a", 0.0, 1.0, shape=3).sum(), 1.0, observed=1.0)\n'
        "with pm.Model() as narrow:\n"
        '    pm.Normal("y", pm.Normal("a", 0.0, 0.1), 1.0, observed=1.0)\n',
    )
    assert load_target(two, model="wide").dim == 3
    assert load_target(two, model="narrow").params["model"] == "narrow"
    assert "defines no PyMC model 'model'; its PyMC models: narrow, wide (pick one with --model NAME)" in error_of(two)
    numpyro = write(  # imports PyMC, but `model` is a NumPyro function: a NumPyro target as before
        tmp_path,
        "numpyro_model.py",
        """\
        import pymc
        import numpyro, numpyro.distributions as dist
        y = 1.0

        def model(y):
            numpyro.sample("y", dist.Normal(numpyro.sample("a", dist.Normal()), 1.0), obs=y)
        """,
    )
    assert load_target(numpyro).params == {"model": "model", "data": {"y": 1.0}}


@pytest.mark.parametrize(
    "target, extra, expected",
    [
        (PYMC_NN, ["--model", "nope"], "defines no PyMC model 'nope'; its PyMC models: model"),
        (PYMC_NN, ["--data", "{tmp}/z.json"], "data name 'z' is not a pm.Data container of the model (it has: y)"),
        (PYMC_BB, ["--data", "{tmp}/z.json"], "has no pm.Data container, so a data file has nothing to replace"),
        (PYMC_NN, ["--param", "a=1"], "is a PyMC model and takes no parameters"),
    ],
)
def test_command_line_reports_bad_requests_in_one_line(tmp_path, target, extra, expected):
    (tmp_path / "z.json").write_text('{"z": [1.0, 2.0]}')
    extra = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    code, out, err = invoke(["estimate", target, *extra, *AIS])
    assert code == 2 and out == ""
    assert expected in one_line_error(err), err


def test_missing_extra_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "pymc", None)  # `import pymc` now raises ModuleNotFoundError
    hint = "is a PyMC model, but PyMC is not installed; install the extra: pip install 'mcd-cli[pymc]'"
    assert hint in error_of(PYMC_NN)
    code, _, err = invoke(["estimate", PYMC_NN, *AIS])
    assert code == 2 and hint in one_line_error(err)
