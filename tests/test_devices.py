"""Sharding particles over devices, and the multi-process runtime.

The equality tests run in a subprocess that simulates four CPU devices
(`XLA_FLAGS=--xla_force_host_platform_device_count=4`, which must be set before JAX starts): the
same seed on 1, 2 and 4 devices gives the same log weights, hence the same log Ẑ, to float
tolerance, and the same parameters after 20 training updates to relative 1e-5; an SMC population
split over 1, 2 and 4 devices and resampled globally gives the same ancestors and the same log Ẑ.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap

import pytest

from conftest import one_line_error, records, subprocess_env
from mcd_cli.runtime import devices
from mcd_cli.errors import UsageError
from mcd_cli.stats import summarize

TINY_RUN = ["gmm8", "--param", "dim=2", "--steps", "4", "--hidden", "8", "--iterations", "5",
            "--batch-size", "8", "--samples", "200", "--seed", "3", "--json", "-q"]

# Runs inside a subprocess with four simulated devices; prints one JSON object. `estimate`: the
# log weights of 200 particles in chunks of 48 (the last one partial) on 1, 2, 4 devices and
# unsharded; `train`: the parameters after 20 updates on 1, 2, 4 devices.
EQUALITY_SCRIPT = textwrap.dedent(
    """
    import dataclasses, json, sys
    import jax, numpy as np
    from mcd_cli import run
    from mcd_cli.path import annealing
    from mcd_cli.runtime import devices
    from mcd_cli.train import loop as training
    from mcd_cli.config import SamplerConfig, TrainConfig
    from mcd_cli.stats import summarize
    from mcd_cli.targets import load_target

    assert len(jax.devices()) == 4, jax.devices()
    target = load_target("gmm8", {"dim": "2"})
    leaves = lambda tree: [np.asarray(x, np.float64).ravel().tolist() for x in jax.tree.leaves(tree)]
    out = {}
    if sys.argv[1] == "estimate":
        sconf = SamplerConfig(sampler="ula", backward="ais", steps=2, hidden=4)
        params = annealing.init_params(jax.random.key(1), target, sconf)
        key = jax.random.key(2)
        out["weights"] = {"none": annealing.sample_log_weights(key, params, target, sconf, 200, 200).tolist()}
        for n in (1, 2, 4):
            sharding = devices.particle_layout(n).particles
            out["weights"][n] = annealing.sample_log_weights(key, params, target, sconf, 200, 48, sharding=sharding).tolist()
        plan = run.RunPlan(target=target, sconf=sconf, tconf=TrainConfig(batch_size=6), num_samples=200, devices=4)
        out["notes"] = run.rounding_notes(plan)
        out["batch"] = run.sharded_plan(plan).tconf.batch_size
        out["notes_even"] = run.rounding_notes(dataclasses.replace(plan, tconf=TrainConfig(batch_size=8)))
        out["notes_small"] = run.rounding_notes(dataclasses.replace(plan, num_samples=10, devices=2))
        out["notes_odd"] = run.rounding_notes(dataclasses.replace(plan, num_samples=9, tconf=TrainConfig(batch_size=8)))
    else:
        sconf = SamplerConfig(sampler="ula", backward="mcd", steps=4, hidden=8)
        tconf = TrainConfig(iterations=20, batch_size=8, lr=0.01)
        state = training.init_train_state(jax.random.key(1), target, sconf, tconf)
        out["initial"] = leaves(state.params)
        out["params"] = {}
        for n in (1, 2, 4):
            update = training.make_train_chunk(target, sconf, tconf, sharding=devices.particle_layout(n).particles)
            result = training.fit(state, target, sconf, tconf, update=update)
            assert result.state.iteration == 20 and result.skipped == 0
            out["params"][n] = leaves(result.params)
    print(json.dumps(out))
    """
)


# Runs inside a subprocess with four simulated devices; prints one JSON object. For each device
# count of its argument (e.g. `1,4`): `fixed`, one SMC population of 256 particles (ULA/AIS, K = 12,
# --resample 0.5, --refine mala, multinomial resampling) compiled unsharded (1) or sharded; and
# `adaptive`, `run.execute` of adaptive tempering with --refine hmc (systematic resampling) on that
# many devices. `notes`: the population's rounding. (Each count costs two compilations.)
SMC_SCRIPT = textwrap.dedent(
    """
    import dataclasses, json, math, sys
    import jax, jax.numpy as jnp, numpy as np
    from jax.scipy.special import logsumexp
    from mcd_cli import run, smc
    from mcd_cli.path import annealing
    from mcd_cli.runtime import devices
    from mcd_cli.config import SamplerConfig, TrainConfig
    from mcd_cli.targets import Target

    assert len(jax.devices()) == 4, jax.devices()
    # N(1.5, 0.7² I) in d = 3 seen from π0 = N(0, I): log Z = 3 log(0.7 √(2π)).
    target = Target.create(lambda x: -0.5 * jnp.sum(((x - 1.5) / 0.7) ** 2), dim=3, initial_mean=0.0,
                           initial_scale=1.0, log_z=3 * math.log(0.7 * math.sqrt(2 * math.pi)), name="gauss3")
    counts = [int(n) for n in sys.argv[1].split(",")]
    out = {"fixed": {}, "adaptive": {}}
    sconf = SamplerConfig(sampler="ula", backward="ais", steps=12, hidden=4, init="target", resample=0.5,
                          refine="mala", init_step_size=0.1)
    params = annealing.init_params(jax.random.key(1), target, sconf)
    for n in counts:
        sharding = None if n == 1 else devices.particle_layout(n).particles
        lowered = run.compiled_smc(target, sconf, 256, True, sharding).lower(params, jax.random.key(5))
        compiled = lowered.compile()
        o = jax.device_get(compiled(params, jax.random.key(5)))
        out["fixed"][n] = {
            "log_z": float(o.log_z + logsumexp(o.log_w) - math.log(256)),
            "resampled": [i + 1 for i in range(int(o.steps)) if o.trace.resampled[i]],
            "eve": np.asarray(o.eve).tolist(),
            "acceptance": np.asarray(o.trace.acceptance).tolist(),
            "gathers": compiled.as_text().count(" all-gather("),
        }
    adaptive = dataclasses.replace(sconf, adaptive=True, refine="hmc", leapfrog=3, resampling="systematic")
    plan = run.RunPlan(target=target, sconf=adaptive, tconf=TrainConfig(iterations=0), num_samples=256, seed=4)
    for n in counts:
        record = run.execute(dataclasses.replace(plan, devices=n))
        diagnostics = record.smc[0]
        out["adaptive"][n] = {
            "log_z": record.combined.log_z, "devices": record.devices, "steps": diagnostics["steps"],
            "resampled": diagnostics["resampled_steps"], "beta": diagnostics["beta"],
            "particles": diagnostics["particles"], "notes": run.plan_warnings(dataclasses.replace(plan, devices=n)),
        }
    odd = dataclasses.replace(plan, num_samples=404, particles=202, devices=4)
    out["notes"] = run.plan_warnings(odd)
    out["population"] = run.sharded_population(odd)
    out["memory"] = {n: run.memory_needed(dataclasses.replace(plan, devices=n))["estimation"] for n in (1, 4)}
    from mcd_cli.run.memory import tempering_record
    out["tempering"] = tempering_record(plan)
    print(json.dumps(out))
    """
)


def simulated_devices_env(cache, count=4):
    env = subprocess_env(cache)
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={count}"
    return env


def run_script(what: str, cache, script: str = EQUALITY_SCRIPT) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", script, what], env=simulated_devices_env(cache), capture_output=True,
        text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def estimation(tmp_path_factory):
    return run_script("estimate", tmp_path_factory.mktemp("jax-cache-devices"))


def test_same_log_weights_and_log_z_on_1_2_4_devices(estimation):
    import numpy as np

    reference = np.asarray(estimation["weights"]["none"])
    assert np.all(np.isfinite(reference)) and np.std(reference) > 0.1
    log_z = summarize(reference).log_z
    for n in ("1", "2", "4"):
        np.testing.assert_allclose(estimation["weights"][n], reference, rtol=1e-5, atol=1e-5)
        assert abs(summarize(np.asarray(estimation["weights"][n])).log_z - log_z) < 1e-5


def test_sizes_rounded_to_a_multiple_of_the_devices_with_a_message(estimation):
    assert estimation["batch"] == 8
    assert len(estimation["notes"]) == 1
    assert "--batch-size 6 rounded up to 8, a multiple of the 4 devices" in estimation["notes"][0]
    assert estimation["notes_even"] == []  # nothing rounded, nothing said
    assert estimation["notes_small"] == []  # batch 6 and chunk 10 on 2 devices
    (odd,) = estimation["notes_odd"]
    assert "chunks rounded up to 12 particles" in odd and "--samples 9" in odd


@pytest.mark.slow
def test_same_parameters_after_20_updates_on_1_2_4_devices(tmp_path):
    import numpy as np

    trained = run_script("train", tmp_path)
    one = trained["params"]["1"]
    moved = max(float(np.max(np.abs(np.asarray(a) - b))) for a, b in zip(one, trained["initial"]))
    assert moved > 1e-3  # the equality below is not vacuous
    for n in ("2", "4"):
        for a, b in zip(one, trained["params"][n]):
            a, b = np.asarray(a), np.asarray(b)
            scale = max(float(np.max(np.abs(a))), 1e-6)
            assert float(np.max(np.abs(a - b))) <= 1e-5 * scale, (n, a, b)


@pytest.fixture(scope="module")
def smc_runs(tmp_path_factory):
    return run_script("1,4", tmp_path_factory.mktemp("jax-cache-smc"), SMC_SCRIPT)


# Sharding changes only float32 rounding (the order of the sums that cross devices, the vectorisation
# of a smaller batch), a relative 1e-7 on the weights; carried through K = 12 steps to a log Ẑ near
# 1.5 that stays below 1e-5, hence abs 1e-4. One different ancestor (or per-device islands) moves log
# Ẑ by its Monte Carlo error, over 1e-2 here, and changes `eve`. (Rounding can also flip a Metropolis
# decision whose uniform falls within ~1e-6 of its acceptance ratio: with the ~800 decisions
# here, a chance of order 1e-3; these seeds have none, and the test is deterministic.)
LOG_Z_ATOL = 1e-4


def check_fixed_smc(fixed: dict) -> None:
    one = fixed.pop("1")
    assert one["gathers"] == 0 and all(other["gathers"] > 0 for other in fixed.values())  # really split
    assert 0 < len(one["resampled"]) < 11 and len(set(one["eve"])) < 256  # it resampled, and refined:
    assert sum(a == a for a in one["acceptance"]) == len(one["resampled"])
    for other in fixed.values():
        assert other["resampled"] == one["resampled"]
        assert other["eve"] == one["eve"]  # the same ancestors: resampling is global
        assert other["log_z"] == pytest.approx(one["log_z"], rel=1e-5, abs=LOG_Z_ATOL)


def check_adaptive_smc(adaptive: dict) -> None:
    one = adaptive["1"]
    assert one["steps"][0] > 1 and one["resampled"] and one["beta"][-1] == 1.0
    for n in adaptive:
        assert adaptive[n]["devices"] == int(n)  # the record says how many were used
        assert adaptive[n]["particles"] == 256 and adaptive[n]["notes"] == []  # nothing rounded
        assert adaptive[n]["steps"] == one["steps"] and adaptive[n]["resampled"] == one["resampled"]
        assert adaptive[n]["beta"] == pytest.approx(one["beta"], rel=1e-5)
        assert adaptive[n]["log_z"] == pytest.approx(one["log_z"], rel=1e-5, abs=LOG_Z_ATOL)


@pytest.mark.slow
def test_smc_same_log_z_and_resampling_on_1_and_4_devices(smc_runs):
    check_fixed_smc(dict(smc_runs["fixed"]))


@pytest.mark.slow
def test_adaptive_smc_through_the_run_layer_on_1_and_4_devices(smc_runs):
    check_adaptive_smc(smc_runs["adaptive"])


@pytest.mark.slow
def test_smc_same_log_z_and_resampling_on_2_devices(tmp_path):
    runs = run_script("1,2", tmp_path, SMC_SCRIPT)
    check_fixed_smc(runs["fixed"])
    check_adaptive_smc(runs["adaptive"])


@pytest.mark.slow
def test_smc_population_rounded_to_a_multiple_of_the_devices_with_a_message(smc_runs):
    assert smc_runs["population"] == 204
    (note,) = smc_runs["notes"]
    assert "SMC populations rounded up to 204 particles, a multiple of the 4 devices" in note
    assert "give --particles a multiple of 4" in note


@pytest.mark.slow
def test_smc_memory_estimate_counts_each_devices_share_and_the_resampling_gather(smc_runs):
    one, four, record = smc_runs["memory"]["1"], smc_runs["memory"]["4"], smc_runs["tempering"]
    # A quarter of the population's working set per device, plus its states (x, log γ, ∇log γ:
    # 2d + 1 float32 numbers a particle) gathered at each resampling; adaptive tempering's record
    # (every step's preconditioner) is whole on every device.
    assert record > 0
    assert four == pytest.approx((one - record) / 4 + record + 256 * (2 * 3 + 1) * 4)


def test_parse_count():
    assert devices.parse_count(None) is None
    assert devices.parse_count("all") is None
    assert devices.parse_count("ALL") is None
    assert devices.parse_count("2") == 2
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(UsageError, match="--devices must be"):
            devices.parse_count(bad)


def test_round_up():
    assert [devices.round_up(n, 4) for n in (1, 4, 5, 8, 130)] == [4, 4, 8, 8, 132]
    assert devices.round_up(7, 1) == 7


def test_layout_on_one_device():
    layout = devices.particle_layout()
    assert layout.count == 1 and layout.mesh.axis_names == (devices.AXIS,)
    with pytest.raises(UsageError, match="--devices 2 asks for more devices than the 1"):
        devices.particle_layout(2)


@pytest.mark.parametrize(
    "args, message",
    [
        ({"coordinator": "127.0.0.1:1234"}, "go together"),
        ({"coordinator": "nohost", "num_processes": 2, "process_id": 0}, "HOST:PORT"),
        ({"coordinator": "h:1", "num_processes": 2, "process_id": 2}, "between 0 and 1"),
        ({"coordinator": "h:1", "num_processes": 0, "process_id": 0}, "at least 1"),
    ],
)
def test_initialize_rejects_bad_arguments(args, message):
    with pytest.raises(UsageError, match=message):
        devices.initialize(args.get("coordinator"), args.get("num_processes"), args.get("process_id"))


def test_cli_errors_are_one_line(mcd):
    code, _, err = mcd(["estimate", "gmm8", "--devices", "2"])
    assert code == 2 and "more devices than the 1" in one_line_error(err)
    code, _, err = mcd(["estimate", "gmm8", "--devices", "zero"])
    assert code == 2 and "--devices must be" in one_line_error(err)
    code, _, err = mcd(["estimate", "gmm8", "--process-id", "1"])
    assert code == 2 and "--process-id needs --distributed" in one_line_error(err)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_and_two_processes(run_args: list, tmp_path, compile_cache) -> tuple[dict, dict]:
    """The record of `mcd estimate RUN_ARGS` in one process, and of two processes with two simulated
    devices each (a mesh of 4 over two processes) talking through a coordinator on 127.0.0.1."""
    single = subprocess.run(
        [sys.executable, "-m", "mcd_cli", "estimate", *run_args], env=subprocess_env(compile_cache),
        capture_output=True, text=True, timeout=600,
    )
    assert single.returncode == 0, single.stderr
    (alone,) = records(single.stdout)
    port = _free_port()
    output = tmp_path / "results.jsonl"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "mcd_cli", "estimate", *run_args, "--output", str(output), "--distributed",
             "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)],
            env=simulated_devices_env(compile_cache, 2), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-2000:] for _, e in outs]
    (first,) = records(outs[0][0])
    assert outs[1][0].strip() == ""  # only process 0 writes
    assert len(output.read_text().splitlines()) == 1
    assert first["devices"] == 4 and first["processes"] == 2
    assert alone["devices"] == 1 and alone["processes"] == 1
    return alone, first


@pytest.mark.slow
def test_two_processes_give_the_one_process_estimate(tmp_path, compile_cache):
    alone, first = one_and_two_processes(TINY_RUN, tmp_path, compile_cache)
    assert abs(first["log_z"] - alone["log_z"]) < 1e-4, (first["log_z"], alone["log_z"])
    assert first["batch_size"] == alone["batch_size"] == 8


@pytest.mark.slow
def test_two_processes_give_the_one_process_smc_estimate(tmp_path, compile_cache):
    """A population of 256 split over the 4 devices of two processes, resampled globally."""
    smc_run = ["gmm8", "--param", "dim=2", "--steps", "8", "--backward", "ais", "--iterations", "0", "--samples",
               "256", "--resample", "0.5", "--refine", "mala", "--seed", "3", "--json", "-q"]
    alone, first = one_and_two_processes(smc_run, tmp_path, compile_cache)
    assert alone["smc"]["resampled_steps"] and first["smc"]["resampled_steps"] == alone["smc"]["resampled_steps"]
    assert first["smc"]["particles"] == 256
    assert abs(first["log_z"] - alone["log_z"]) < LOG_Z_ATOL, (first["log_z"], alone["log_z"])
