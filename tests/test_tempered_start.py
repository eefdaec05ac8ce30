"""`--schedule tempered`: a learned schedule that starts where adaptive tempered SMC put its
temperatures (`run.start.tempered_betas`, `schedules.schedule_from_betas`)."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import one_line_error
from mcd_cli.path import annealing
from mcd_cli.path import schedules
from mcd_cli.config import SamplerConfig
from mcd_cli.run.start import tempered_betas
from mcd_cli.targets import Target

NARROW = Target.create(lambda x: -0.5 * jnp.sum((x - 2.0) ** 2 / 0.01), dim=2, log_z=float(np.log(2 * np.pi * 0.01)))


def test_schedule_parameters_reproduce_the_given_betas():
    given = np.array([0.0, 0.001, 0.01, 0.05, 0.2, 0.6, 1.0])
    params = schedules.schedule_from_betas(given)
    np.testing.assert_allclose(np.asarray(schedules.betas(params, 6)), given, rtol=1e-5, atol=1e-7)
    for bad in ([0.0, 0.5, 0.4, 1.0], [0.1, 1.0], [0.0, 0.5]):
        with pytest.raises(ValueError, match="increasing"):
            schedules.schedule_from_betas(bad)


def test_tempered_betas_follow_the_adaptive_run():
    betas = tempered_betas(NARROW, 16, jax.random.key(0), num=256)
    assert betas.shape == (17,) and betas[0] == 0.0 and betas[-1] == 1.0
    assert np.all(np.diff(betas) >= 0)
    # A narrow target far from π0: adaptive tempering spends its temperatures at small β, so the
    # interpolated schedule is far below the linear one early on.
    assert betas[4] < 0.25 / 4
    np.testing.assert_array_equal(betas, tempered_betas(NARROW, 16, jax.random.key(0), num=256))
    sconf = SamplerConfig(steps=16, learn_schedule=True, schedule_start="tempered", hidden=8)
    params = annealing.init_params(jax.random.key(1), NARROW, sconf, betas=betas)
    np.testing.assert_allclose(np.asarray(annealing.annealed_path(params.path, NARROW, sconf).betas), betas, atol=1e-6)


def test_tempered_needs_a_learned_schedule():
    assert SamplerConfig(learn_schedule=True, schedule_start="tempered").schedule == "tempered"
    with pytest.raises(ValueError, match="learned schedule"):
        SamplerConfig(schedule_start="tempered")


@pytest.mark.slow
def test_schedule_tempered_and_training_with_smc_from_the_command_line(mcd, gauss_yaml):
    """One small run of both options (`--train-with smc`: tests/test_segments.py, with MCD). AIS's
    schedule and step sizes are what trains here, and the SMC makes no moves (`--refine none`): an
    MCD network and HMC moves would only add compilation."""
    code, out, err = mcd([
        "estimate", gauss_yaml, "--schedule", "tempered", "--train-with", "smc", "--backward", "ais",
        "--refine", "none", "--iterations", "5", "--steps", "8", "--resample", "0.5", "--samples", "256", "--json",
        "--seed", "0",
    ])
    assert code == 0, err
    record = json.loads(out.splitlines()[-1])
    assert record["config"]["learn_schedule"] is True and record["config"]["schedule_start"] == "tempered"
    assert record["config"]["train_with"] == "smc" and np.isfinite(record["log_z"]) and record["iterations"] == 5
    code, _, err = mcd(["estimate", gauss_yaml, "--schedule", "tempered", "--fixed-schedule", "--steps", "8"])
    assert code == 2 and "contradicts" in one_line_error(err)
