"""`check`: what it reports for good and bad densities. d = 2 and few points keep compilation cheap."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mcd_cli.targets import CheckReport, Target, TargetError, check, load_target


def test_good_target_report():
    t = Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=2, name="quad")
    report = check(t, num_points=8)
    assert isinstance(report, CheckReport)
    assert report.ok and report.problems == [] and report.warnings == []
    assert (report.name, report.dim, report.num_points, report.num_finite) == ("quad", 2, 8, 8)
    assert report.scalar_output and report.jit_ok and report.vmap_ok and report.gradients_finite
    assert 0 < report.seconds_per_gradient < 1 and report.compile_seconds > 0
    data = report.as_dict()
    assert data["ok"] is True and data["gradients_finite"] is True and data["num_nan"] == 0
    report.raise_if_failed()


def test_minus_infinity_is_allowed():
    t = Target.create(lambda x: jnp.where(x[0] > 0, -jnp.sum(x**2), -jnp.inf), dim=2, name="half")
    report = check(t, num_points=32)
    assert report.ok, report.problems
    assert report.num_neg_inf > 0 and report.num_finite + report.num_neg_inf == 32


def test_minus_infinity_everywhere_is_a_warning():
    t = Target.create(lambda x: jnp.where(x[0] > 50, 0.0, -jnp.inf), dim=2, name="far")
    report = check(t, num_points=4)
    assert report.ok and "-inf at all 4 points" in report.warnings[0]


def test_nan_and_plus_inf_are_counted_with_an_example():
    def log_density(x):
        return jnp.where(x[0] > 0, jnp.nan, jnp.where(x[1] > 1.0, jnp.inf, -jnp.sum(x**2)))

    report = check(Target.create(log_density, dim=2, name="bad"), num_points=64, seed=1)
    assert not report.ok
    assert report.num_nan > 0 and report.num_pos_inf > 0
    nan_line, inf_line = report.problems[:2]
    assert nan_line.startswith(f"log_density is NaN at {report.num_nan} of 64 points, e.g. x = [")
    assert inf_line.startswith(f"log_density is +inf at {report.num_pos_inf} of 64 points, e.g. x = [")
    example = [float(v) for v in nan_line.split("x = [")[1].rstrip("]").split(", ")]
    assert example[0] > 0  # the example is a point where the density is NaN
    with pytest.raises(TargetError, match=r"^bad: log_density is NaN at .* \(and 1 more problems\)$"):
        report.raise_if_failed()


def test_a_gradient_that_overflows_beyond_the_initial_draws_fails_the_check():
    """A density whose gradient is NaN only where |x0| > 2.5 (rare at the initial draws, common at
    3× their scale, where the samplers' moves go): the check fails and says where."""

    @jax.custom_jvp
    def log_density(x):
        return -0.5 * jnp.sum(x * x)

    @log_density.defjvp
    def _jvp(primals, tangents):
        (x,), (t,) = primals, tangents
        return log_density(x), jnp.dot(jnp.where(jnp.abs(x[0]) > 2.5, jnp.nan, -x), t)

    report = check(Target.create(log_density, dim=2, name="overflow"), num_points=16)
    assert not report.ok and report.num_bad_gradients > 0
    assert "drawn at 3× the initial scale" in report.problems[0]
    assert check(Target.create(lambda x: -0.5 * jnp.sum(x * x), dim=2), num_points=16).ok


def test_non_finite_gradient_where_the_density_is_finite():
    report = check(Target.create(lambda x: jnp.sum(jnp.sqrt(jnp.abs(x))), dim=2, name="cusp"), num_points=4)
    assert report.ok  # finite gradients at random points
    t = Target.create(lambda x: jnp.sum(jnp.sqrt(jnp.abs(x - x))), dim=3, name="cusp0")
    report = check(t, num_points=4)
    assert not report.ok and report.num_bad_gradients == 4 and not report.gradients_finite
    assert report.problems[0].startswith(
        "the gradient is not finite at 4 of 4 points where log_density is finite"
    )


def test_vmap_failure_is_reported_and_values_still_checked():
    def host(x):
        return np.float32(-0.5 * np.sum(np.asarray(x) ** 2))

    def log_density(x):
        return jax.pure_callback(host, jax.ShapeDtypeStruct((), jnp.float32), x)

    report = check(Target.create(log_density, dim=2, name="callback"), num_points=3)
    assert not report.ok and not report.vmap_ok and report.num_finite == 3
    assert any("cannot be vmapped" in p for p in report.problems)
    assert any("gradient of log_density fails" in p for p in report.problems)


def test_untraceable_density_raises():
    def log_density(x):
        return -1.0 if x[0] > 0 else 0.0

    with pytest.raises(TargetError, match="use jnp.where"):
        check(Target.create(log_density, dim=2, name="branchy"))


def test_check_uses_the_initial_distribution():
    # Finite only near 10·1: fails from N(0, I), passes from N(10, 0.1²).
    t = Target.create(lambda x: jnp.where(jnp.all(jnp.abs(x - 10) < 1), 0.0, jnp.nan), dim=2, name="box")
    assert not check(t, num_points=8).ok
    assert check(t.with_initial(mean=10.0, scale=0.1), num_points=8).ok


def test_bundled_python_target_checks(tmp_path):
    report = check(load_target("nice_flow", {"dim": "4", "layers": "2", "hidden": "4"}), num_points=8)
    assert report.ok and report.dim == 4
