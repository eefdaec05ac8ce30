"""NumPyro models as targets: densities, exact evidences, the prior as initial distribution, errors.

The example models in targets/numpyro/ are checked against the same models written by hand as plain
`.py` targets (equal log densities at random points, to float32 precision), against their exact
log Z (by quadrature of the 1-D density, to float precision; by plain AIS, within four of the
estimate's own standard errors), and the logistic regression against the bundled
`logreg_breast_cancer`. Every bad input must raise a `TargetError` whose message is one line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from scipy.special import logsumexp

pytest.importorskip("numpyro")

from conftest import one_line_error, records  # noqa: E402
from conftest import target_error as error_of  # noqa: E402
from conftest import write_file as write  # noqa: E402
from mcd_cli import stats  # noqa: E402
from mcd_cli.path import annealing  # noqa: E402
from mcd_cli.config import SamplerConfig  # noqa: E402
from mcd_cli.targets import TargetError, load_target  # noqa: E402
from mcd_cli.targets.datafile import read_data  # noqa: E402
from mcd_cli.targets.numpyro_model import is_model_target, prior_draws, prior_initial  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "targets" / "numpyro"
# float32 densities; the AIS log Ẑ is accumulated in float32 over K steps.
FLOAT_ATOL = 1e-3


def example(name: str) -> str:
    return str(EXAMPLES / f"{name}.py")


def ais_estimate(target, *, steps: int = 128, num_samples: int = 2048, seed: int = 0) -> stats.Estimate:
    """log Z of `target` by plain AIS (ULA forward kernel, no training): the one place tests estimate."""
    config = SamplerConfig(sampler="ula", backward="ais", steps=steps)
    params = annealing.init_params(jax.random.key(seed), target, config)
    log_w = annealing.sample_log_weights(
        jax.random.key(seed + 1), params, target, config, num_samples, chunk_size=min(num_samples, 1024)
    )
    return stats.summarize(log_w)


def log_integral_1d(log_density, lo: float = -40.0, hi: float = 40.0, num: int = 200_001) -> float:
    """log ∫ exp(log_density(x)) dx over a fine grid of the line (trapezoid rule, in float64)."""
    grid = np.linspace(lo, hi, num)
    values = np.asarray(jax.jit(jax.vmap(log_density))(jnp.asarray(grid)[:, None]), dtype=np.float64)
    weights = np.full(num, grid[1] - grid[0])
    weights[[0, -1]] /= 2
    return float(logsumexp(values + np.log(weights)))


def random_points(dim: int, num: int = 16, scale: float = 2.0, seed: int = 0) -> jax.Array:
    return scale * jax.random.normal(jax.random.key(seed), (num, dim))


# The example models written by hand as plain targets on the same unconstrained coordinates.

PLAIN_NORMAL_NORMAL = """\
    import jax.numpy as jnp
    import numpy as np
    from jax.scipy.stats import norm

    dim = 1
    y = np.array([2.31, 1.12, 3.05, 2.47, 0.89, 2.76, 1.94, 3.38, 2.02, 1.55, 2.88, 2.19])

    def log_density(x):
        mu = x[0]
        return norm.logpdf(mu, 1.0, 2.0) + jnp.sum(norm.logpdf(y, mu, 1.0))
"""

PLAIN_BETA_BERNOULLI = """\
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.scipy.stats import beta

    dim = 1
    y = np.array([1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1])

    def log_density(x):
        p = jax.nn.sigmoid(x[0])
        log_jacobian = jax.nn.log_sigmoid(x[0]) + jax.nn.log_sigmoid(-x[0])  # dp/dx = p (1 - p)
        k, n = y.sum(), y.size
        return beta.logpdf(p, 2.0, 3.0) + k * jnp.log(p) + (n - k) * jnp.log1p(-p) + log_jacobian
"""

PLAIN_EIGHT_SCHOOLS = """\
    import jax.numpy as jnp
    import numpy as np
    from jax.scipy.stats import cauchy, norm

    dim = 10
    y = np.array([28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0])
    sigma = np.array([15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0])

    def log_density(x):  # x = (eta_1..8, mu, log tau): NumPyro orders the sites by name
        eta, mu, log_tau = x[:8], x[8], x[9]
        tau = jnp.exp(log_tau)
        log_half_cauchy = jnp.log(2.0) + cauchy.logpdf(tau, 0.0, 5.0)
        return (
            norm.logpdf(mu, 0.0, 5.0) + log_half_cauchy + log_tau + jnp.sum(norm.logpdf(eta))
            + jnp.sum(norm.logpdf(y, mu + tau * eta, sigma))
        )
"""


@pytest.mark.parametrize(
    "name, plain",
    [
        ("normal_normal", PLAIN_NORMAL_NORMAL),
        ("beta_bernoulli", PLAIN_BETA_BERNOULLI),
        ("eight_schools", PLAIN_EIGHT_SCHOOLS),
    ],
)
def test_density_equals_the_hand_written_target(tmp_path, name, plain):
    model = load_target(example(name))
    hand = load_target(str(write(tmp_path, f"plain_{name}.py", plain)))
    assert model.dim == hand.dim
    x = random_points(model.dim)
    a = np.asarray(jax.jit(jax.vmap(model.log_density))(x))
    b = np.asarray(jax.jit(jax.vmap(hand.log_density))(x))
    np.testing.assert_allclose(a, b, rtol=2e-6, atol=2e-5)


@pytest.mark.parametrize("name", ["normal_normal", "beta_bernoulli"])
def test_density_integrates_to_the_exact_evidence(name):
    """∫ exp(log density) over R equals exp(log Z): the log-Jacobian of the constraint is included."""
    target = load_target(example(name))
    assert target.dim == 1
    assert log_integral_1d(target.log_density) == pytest.approx(target.log_z, abs=1e-6)


def test_beta_bernoulli_without_the_jacobian_misses_the_evidence(tmp_path):
    """The check above can fail: the same density without log p(1 − p) integrates to something else."""
    target = load_target(example("beta_bernoulli"))
    without = lambda x: target.log_density(x) - jax.nn.log_sigmoid(x[0]) - jax.nn.log_sigmoid(-x[0])  # noqa: E731
    assert abs(log_integral_1d(without) - target.log_z) > 1.0


@pytest.mark.parametrize("name", ["normal_normal", "beta_bernoulli"])
def test_ais_estimates_the_exact_evidence(name):
    target = load_target(example(name))
    est = ais_estimate(target)
    assert est.status is not stats.Status.UNRELIABLE, est.reasons
    assert abs(est.log_z - target.log_z) < 4 * est.log_z_stderr + FLOAT_ATOL, (est.log_z, target.log_z, est.log_z_stderr)


@pytest.fixture(scope="module")
def eight_schools():
    return load_target(example("eight_schools"))


def test_eight_schools_end_to_end_from_the_prior(eight_schools):
    target = eight_schools
    assert target.dim == 10 and target.log_z == pytest.approx(-31.3113, abs=1e-4)
    start = target.with_initial(*prior_initial(target, jax.random.key(3)))
    assert is_model_target(start)
    est = ais_estimate(start)
    assert np.isfinite(est.log_z) and est.status is not stats.Status.UNRELIABLE, est.reasons
    assert abs(est.log_z - target.log_z) < 4 * est.log_z_stderr + FLOAT_ATOL, (est.log_z, target.log_z, est.log_z_stderr)


def test_logistic_regression_matches_the_bundled_target():
    model = load_target(example("logreg_breast_cancer"))
    bundled = load_target("logreg_breast_cancer")
    assert model.dim == bundled.dim == 31 and model.log_z == bundled.log_z
    x = random_points(31, scale=0.3)
    a = np.asarray(jax.jit(jax.vmap(model.log_density))(x))
    b = np.asarray(jax.jit(jax.vmap(bundled.log_density))(x))
    np.testing.assert_allclose(a, b, rtol=1e-5)


def test_prior_initial_fits_the_prior_on_the_unconstrained_space():
    """mu ~ N(1, 2²): the fit's centre and scale are within four of their sampling standard errors."""
    target = load_target(example("normal_normal"))
    num = 4096
    mean, scale = prior_initial(target, jax.random.key(0), num=num)
    # Standard errors of the median (√(π/2) σ/√n) and of the IQR-based scale (≈ 1.166 σ/√(2n))
    # for Gaussian draws.
    assert abs(mean[0] - 1.0) < 4 * 1.2533 * 2.0 / np.sqrt(num)
    assert abs(scale[0] - 2.0) < 4 * 0.825 * 2.0 / np.sqrt(num)
    # The target's own initial distribution stays the default: the prior is offered, not declared.
    assert target.initial_mean.tolist() == [0.0] and target.initial_scale.tolist() == [1.0]


def test_prior_draws_of_a_constrained_latent_are_on_the_unconstrained_space(eight_schools):
    """tau ~ HalfCauchy(5) is drawn as log tau (coordinate 9): P(log tau < log 5) = 1/2."""
    num = 4096  # as prior_initial's default, so the compiled sampler of the test above is reused
    draws = np.asarray(prior_draws(eight_schools, jax.random.key(1), num))
    assert draws.shape == (num, 10)
    fraction = float(np.mean(draws[:, 9] < np.log(5.0)))
    assert abs(fraction - 0.5) < 4 * np.sqrt(0.25 / num)


def test_prior_initial_of_a_plain_target_is_an_error():
    plain = load_target("gauss_shift")
    assert not is_model_target(plain)
    with pytest.raises(TargetError, match="not a NumPyro model"):
        prior_initial(plain, jax.random.key(0))


def test_records_identify_the_model_and_its_data():
    target = load_target(example("beta_bernoulli"))
    assert target.name == "beta_bernoulli"
    assert target.description.startswith("Conjugate Beta–Bernoulli model")
    assert target.params["model"] == "model"
    assert target.params["data"]["y"].startswith("int64[20] sha256:")
    json.dumps(target.params)
    other = load_target(example("beta_bernoulli"), data={"y": np.ones(20, dtype=np.int64)})
    assert other.params["data"]["y"] != target.params["data"]["y"]


# Data files and binding.


def test_data_file_overrides_module_values_and_log_z_follows(tmp_path):
    path = tmp_path / "flips.csv"
    path.write_text("y\n1\n1\n0\n1\n")
    data = read_data(path)
    target = load_target(example("beta_bernoulli"), data=data)
    # log B(2 + 3, 3 + 1) − log B(2, 3), by the file's log_z(y).
    from scipy.special import betaln

    assert target.log_z == pytest.approx(betaln(5.0, 4.0) - betaln(2.0, 3.0), abs=1e-12)
    assert log_integral_1d(target.log_density) == pytest.approx(target.log_z, abs=1e-6)


def test_a_numeric_log_z_holds_only_for_the_files_own_data(tmp_path):
    file = write(
        tmp_path,
        "m.py",
        """\
        import numpy as np, numpyro, numpyro.distributions as dist
        y = np.array([0.5])
        log_z = -2.0

        def model(y):
            mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
            numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)
        """,
    )
    assert load_target(str(file)).log_z == -2.0
    assert load_target(str(file), data={"y": np.array([1.5])}).log_z is None


def test_read_data_formats(tmp_path):
    (tmp_path / "d.csv").write_text("x[1],x[0],y,w\n1,2.5,0,3\n3,4,1,-1\n")
    csv = read_data(tmp_path / "d.csv")
    assert list(csv) == ["y", "w", "x"]
    np.testing.assert_array_equal(csv["x"], [[2.5, 1.0], [4.0, 3.0]])
    assert csv["y"].dtype == np.int64 and csv["x"].dtype == np.float64
    (tmp_path / "d.json").write_text('{"y": [1, 0, 1], "x": [[1.5, 2], [3, 4], [5, 6]], "s": 2.5}')
    js = read_data(tmp_path / "d.json")
    assert js["x"].shape == (3, 2) and js["s"].shape == () and js["y"].dtype.kind == "i"
    np.savez(tmp_path / "d.npz", y=np.arange(3), x=np.ones((3, 2), np.float32))
    npz = read_data(tmp_path / "d.npz")
    assert npz["x"].dtype == np.float32 and npz["y"].tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    "name, content, expected",
    [
        ("missing.csv", None, "data file not found"),
        ("d.txt", "y\n1\n", "must be .npz, .csv or .json"),
        ("d.csv", "y\n1\nabc\n", "'abc', which is not a number"),
        ("d.csv", "y,z\n1,2\n3\n", "line 3: 1 values but the header has 2 names"),
        ("d.csv", "y,y\n1,2\n", "appears twice"),
        ("d.csv", "x[0],x[2]\n1,2\n", "x[1] is missing"),
        ("d.csv", "y\n", "needs a header row"),
        ("d.csv", "y\nnan\n", "NaN or infinite"),
        ("d.json", "[1, 2]", "one JSON object"),
        ("d.json", '{"y": [1, 2', "not valid JSON"),
        ("d.json", '{"y": [[1, 2], [3]]}', "not a rectangular array"),
        ("d.json", '{"y": ["a", "b"]}', "must hold numbers"),
        ("d.npz", "not a zip file", "not a readable .npz file"),
    ],
)
def test_read_data_errors(tmp_path, name, content, expected):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(TargetError) as info:
        read_data(path)
    message = str(info.value)
    assert "\n" not in message and expected in message, message


def test_npz_object_arrays_are_refused(tmp_path):
    np.savez(tmp_path / "o.npz", y=np.array([{"a": 1}], dtype=object))
    with pytest.raises(TargetError, match="object array"):
        read_data(tmp_path / "o.npz")


MODEL_XY = """\
    import numpy as np, numpyro, numpyro.distributions as dist

    def model(x, y=None, scale=1.0):
        w = numpyro.sample("w", dist.Normal(0.0, 1.0).expand([x.shape[1]]).to_event(1))
        numpyro.sample("y", dist.Normal(x @ w, scale), obs=y)
"""


def test_binding_errors(tmp_path):
    file = str(write(tmp_path, "xy.py", MODEL_XY))
    x, y = np.ones((4, 2)), np.zeros(4)
    assert load_target(file, data={"x": x, "y": y}).dim == 2
    assert "data name 'z' is not a keyword argument of the model (it takes: x, y, scale)" in error_of(
        file, data={"x": x, "y": y, "z": y}
    )
    assert "argument 'x' has no value" in error_of(file, data={"y": y})
    assert "no sample site is observed" in error_of(file, data={"x": x})
    assert "takes no parameters" in error_of(file, {"scale": "2.0"}, data={"x": x, "y": y})
    assert "defines no model function 'other'" in error_of(file, model="other", data={"x": x, "y": y})


def test_model_name_selects_another_function(tmp_path):
    file = write(
        tmp_path,
        "two.py",
        """\
        import numpyro, numpyro.distributions as dist
        y = 1.0

        def narrow(y):
            numpyro.sample("y", dist.Normal(numpyro.sample("a", dist.Normal(0.0, 0.1)), 1.0), obs=y)

        def wide(y):
            a = numpyro.sample("a", dist.Normal(0.0, 1.0).expand([3]).to_event(1))
            numpyro.sample("y", dist.Normal(a.sum(), 1.0), obs=y)
        """,
    )
    assert load_target(str(file), model="wide").dim == 3
    target = load_target(str(file), model="narrow")
    assert target.dim == 1 and target.params["model"] == "narrow"
    assert "defines no model function 'model'; its functions: narrow, wide" in error_of(str(file), model="model")
    assert "defines neither log_density" in error_of(str(file))


def test_model_and_data_apply_to_model_files_only(tmp_path):
    data = {"y": np.ones(3)}
    assert "YAML target and takes no data" in error_of("gauss_shift", data=data)
    assert "YAML target and takes no model name" in error_of("gauss_shift", model="m")
    plain = write(tmp_path, "plain.py", PLAIN_NORMAL_NORMAL)
    assert "defines log_density, not a NumPyro model, so it takes no data" in error_of(str(plain), data=data)


def test_command_line_reports_bad_data_and_model_names(mcd, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("z\n1\n")
    code, _, err = mcd(["estimate", example("beta_bernoulli"), "--data", bad, "--iterations", "0"])
    assert code == 2 and "data name 'z' is not a keyword argument of the model" in one_line_error(err)
    code, _, err = mcd(["estimate", example("beta_bernoulli"), "--model", "nope", "--iterations", "0"])
    assert code == 2 and "defines no model function 'nope'" in one_line_error(err)


@pytest.mark.slow
def test_command_line_estimates_the_evidence_of_a_data_file(mcd, tmp_path):
    from scipy.special import betaln

    data = tmp_path / "flips.json"
    data.write_text('{"y": [1, 1, 0, 1]}')
    args = ["estimate", example("beta_bernoulli"), "--data", data, "--backward", "ais", "--iterations", "0"]
    code, out, err = mcd(args + ["--steps", "128", "--samples", "4096", "--json", "-q"])
    assert code == 0, err
    (record,) = records(out)
    assert record["reference_log_z"] == pytest.approx(betaln(5.0, 4.0) - betaln(2.0, 3.0), abs=1e-12)
    assert abs(record["error"]) < 4 * record["log_z_stderr"] + FLOAT_ATOL, record
    assert record["target_params"]["data"]["y"].startswith("int64[4] sha256:")


# What a target cannot represent.


@pytest.mark.parametrize(
    "body, expected",
    [
        (
            'z = numpyro.sample("z", dist.Bernoulli(0.3))\n'
            '    numpyro.sample("y", dist.Normal(z, 1.0), obs=y)',
            "latent site 'z' (BernoulliProbs) is discrete",
        ),
        (
            'z = numpyro.sample("z", dist.Categorical(jnp.ones(3) / 3), infer={"enumerate": "parallel"})\n'
            '    numpyro.sample("y", dist.Normal(z, 1.0), obs=y)',
            "latent site 'z' (CategoricalProbs) is discrete",
        ),
        (
            'w = numpyro.param("w", 0.5)\n'
            '    numpyro.sample("y", dist.Normal(w + numpyro.sample("a", dist.Normal()), 1.0), obs=y)',
            "numpyro.param site 'w'",
        ),
        (
            'a = numpyro.sample("a", dist.Normal())\n'
            '    with numpyro.plate("n", 3, subsample_size=2):\n'
            '        numpyro.sample("y", dist.Normal(a, 1.0), obs=y[:2])',
            "plate 'n' subsamples 2 of 3",
        ),
        ('numpyro.sample("y", dist.Normal(0.0, 1.0), obs=y)', "no latent sample site"),
        ("return y.sum()", "no numpyro.sample site; is it a NumPyro model?"),
        ('a = numpyro.sample("a", dist.Normal())\n    raise RuntimeError("boom")', "bad.py, function model (line 8): RuntimeError: boom"),
    ],
)
def test_models_that_cannot_be_targets(tmp_path, body, expected):
    file = write(
        tmp_path,
        "bad.py",
        "import jax.numpy as jnp\nimport numpy as np\nimport numpyro\nimport numpyro.distributions as dist\n"
        "y = np.zeros(3)\ndef model(y):\n    " + body + "\n",
    )
    assert expected in error_of(str(file))


def test_missing_extra_names_the_install_command(tmp_path, monkeypatch):
    lazy = write(
        tmp_path,
        "lazy.py",
        """\
        y = 1.0

        def model(y):
            import numpyro
            import numpyro.distributions as dist
            numpyro.sample("y", dist.Normal(numpyro.sample("a", dist.Normal()), 1.0), obs=y)
        """,
    )
    monkeypatch.setitem(sys.modules, "numpyro", None)
    hint = "NumPyro is not installed; install the extra: pip install 'mcd-cli[numpyro]'"
    assert hint in error_of(example("normal_normal"))
    assert hint in error_of(str(lazy))


CENTRED = '''
import numpy as np
import numpyro
import numpyro.distributions as dist

y = np.array({y})
sigma = np.array({sigma})


def model(y, sigma):
    mu = numpyro.sample("mu", dist.Normal(0.0, 10.0))
    tau = numpyro.sample("tau", dist.HalfNormal(5.0))
    with numpyro.plate("groups", len(y)):
        theta = numpyro.sample("theta", dist.Normal(mu, tau))
        numpyro.sample("y", dist.Normal(theta, sigma), obs=y)
'''


def centred_model(tmp_path, y, sigma, name="centred"):
    return load_target(str(write(tmp_path, f"{name}.py", CENTRED.format(y=list(y), sigma=list(sigma)))))


def test_the_non_centred_density_is_the_centred_one_changed_in_variables(tmp_path):
    """θ = μ + τ z: log γ_nc(μ, log τ, z) = log γ_c(μ, log τ, μ + τ z) + Σ log τ, at random points (float32)."""
    from mcd_cli.targets.noncentred import hierarchical_sites, noncentred

    target = centred_model(tmp_path, [-8.1, -4.3, -11.2, -2.5], [3.1, 2.4, 4.5, 2.2])
    assert hierarchical_sites(target.log_density) == {"theta": "Normal"}
    moved, sites = noncentred(target)
    assert sites == ("theta",) and moved.dim == target.dim and moved.log_z == target.log_z
    assert set(moved.log_density.latent_shapes) == {"mu", "tau", "theta_decentered"}
    points = jax.random.normal(jax.random.key(0), (16, target.dim))
    for x in points:
        values = moved.log_density.unravel(x)  # mu, log tau (unconstrained), z
        mu, log_tau, z = values["mu"], values["tau"], values["theta_decentered"]
        theta = mu + jnp.exp(log_tau) * z
        centred_x = ravel_pytree({"mu": mu, "tau": log_tau, "theta": theta})[0]
        expected = target.log_density(centred_x) + z.size * log_tau
        assert float(moved.log_density(x)) == pytest.approx(float(expected), rel=1e-5, abs=1e-3)
        drawn = moved.user_values(x)  # the model's names: theta beside its decentred z
        np.testing.assert_allclose(drawn["theta"], theta, rtol=1e-5, atol=1e-5)


def test_a_model_without_hierarchical_sites_has_no_non_centred_form():
    from mcd_cli.targets.noncentred import noncentred

    assert noncentred(load_target(example("normal_normal"))) is None  # mu's prior is fixed
    assert noncentred(load_target("gauss_shift")) is None  # not a NumPyro model


def test_the_start_keeps_the_parametrisation_whose_fit_is_closer(tmp_path):
    """Weak data (group errors larger than the spread): non-centred; strong data (errors 0.1): centred."""
    from mcd_cli.run.start import initial_target

    weak = centred_model(tmp_path, [-8.1, -4.3, -11.2, -2.5, -6.8], [3.1, 2.4, 4.5, 2.2, 3.8], "weak")
    strong = centred_model(tmp_path, [-8.1, -4.3, -11.2, -2.5, -6.8], [0.1] * 5, "strong")
    _, weak_method, _ = initial_target(weak, SamplerConfig(), 0)
    _, strong_method, _ = initial_target(strong, SamplerConfig(), 0)
    assert "+noncentred(theta)" in weak_method, weak_method
    assert "noncentred" not in strong_method, strong_method
