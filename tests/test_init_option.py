"""--init: the initial distribution fitted from the target, once per run, recorded."""

import pytest
from conftest import one_line_error, records

NARROW = """\
name: narrow
description: "N(2, 0.05² I) in d = 3, declared start N(0, I); log Z = 0"
family: normal
params: {dim: 3, loc: 2.0, scale: 0.05}
"""
# Importance sampling (`--resample 0`): the start is what is tested, and the weights of a start
# that is the posterior are constant under any estimator; the cheapest to compile.
SETTINGS = ["--steps", "8", "--samples", "2048", "--backward", "ais", "--iterations", "0", "--resample", "0"]


def test_laplace_start_fixes_a_posterior_far_narrower_than_its_start(mcd, tmp_path):
    path = tmp_path / "narrow.yaml"
    path.write_text(NARROW)
    code, out, err = mcd(["estimate", path, *SETTINGS, "--init", "laplace", "--init-cov", "full", "--json"])
    assert code == 0, err
    rec = records(out)[0]
    assert rec["init"] == "laplace" and rec["config"]["init_cov"] == "full"
    assert rec["status"] == "ok" and rec["init_warnings"] == []
    # N(2, 0.05² I) is normalised: log Z = 0; the Laplace fit is exact, so the weights are constant.
    assert abs(rec["log_z"]) < 4 * rec["log_z_stderr"] + 1e-3, rec
    code, out, err = mcd(["estimate", path, *SETTINGS, "--init", "target", "--json"])  # the N(0, I) fallback
    assert records(out)[0]["status"] == "unreliable"


def test_prior_start_needs_a_numpyro_model(mcd, gauss_yaml):
    code, out, err = mcd(["estimate", gauss_yaml, *SETTINGS, "--init", "prior"])
    assert code == 2 and out == ""
    assert "--init prior needs a NumPyro model" in one_line_error(err)


def test_declared_initial_distributions_are_flagged_by_every_loader(tmp_path):
    import jax.numpy as jnp

    from mcd_cli.targets import Target, load_target

    assert not Target.create(lambda x: -jnp.sum(x**2), dim=2).initial_declared
    assert Target.create(lambda x: -jnp.sum(x**2), dim=2, initial_scale=3.0).initial_declared
    path = tmp_path / "narrow.yaml"
    path.write_text(NARROW)
    assert not load_target(str(path), {}).initial_declared
    path.write_text(NARROW + "initial: {mean: 0, scale: 1}\n")
    assert load_target(str(path), {}).initial_declared
    # The paper's targets declare the paper's π0 (tables stay comparable); the regressions do not.
    for name in ("gmm8", "funnel", "student_t3", "many_well"):
        assert load_target(name, {}).initial_declared, name
    for name in ("diabetes_linreg", "brownian_motion", "logreg_breast_cancer"):
        assert not load_target(name, {}).initial_declared, name


def test_auto_keeps_a_declared_start_and_fits_an_undeclared_one():
    import jax.numpy as jnp
    import numpy as np

    from mcd_cli import run
    from mcd_cli.config import SamplerConfig
    from mcd_cli.targets import Target

    # A correlated Gaussian: the mean-field VI fit misses the correlation, the full Laplace fit
    # is exact, so auto picks it (by the higher ELBO as a proposal); log Z is unchanged.
    cov = np.array([[1.0, 0.9, 0.0], [0.9, 1.0, 0.3], [0.0, 0.3, 1.0]]) * 0.01
    prec = np.linalg.inv(cov)
    mean = np.array([1.0, -2.0, 0.5])
    target = Target.create(lambda x: -0.5 * (x - mean) @ prec @ (x - mean), dim=3)
    fitted, method, _ = run.initial_target(target, SamplerConfig(init="auto"), seed=0)
    assert method == "auto:laplace-full"
    u = np.zeros(3)
    log_z = 0.5 * np.linalg.slogdet(2 * np.pi * cov)[1]
    # Whitened exactly: the log density is log Z + log N(u; 0, I).
    assert float(fitted.log_density(jnp.asarray(u))) == pytest.approx(log_z - 1.5 * np.log(2 * np.pi), abs=1e-3)
    declared = target.with_initial(mean=0.0, scale=2.0)
    same, method, warnings = run.initial_target(declared, SamplerConfig(init="auto"), seed=0)
    assert same is declared and method == "auto:target" and warnings == ()
