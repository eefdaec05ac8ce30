"""`mcd estimate`, `mcd compare`, the library's `execute` and the benchmark cells make one record.

For the same seed and settings every entry point runs the same plan, so its record equals the one
`mcd estimate` prints, field for field, except the fields that name the machine, the time or the
path (`golden_cases.VOLATILE`) and, for a model of `mcd compare A B ...`, `kind` ("model").
Model i of a comparison uses the root key `fold_in(key(seed), i)`, which `mcd estimate
--model-index i` and `RunPlan(model_index=i)` reproduce.

The runs pass every estimation setting explicitly because the entry points' defaults are not meant
to agree on the method: `mcd estimate` estimates by SMC unless told otherwise
(`run.method_defaults`: `--resample 0.5 --refine hmc --refine-steps 5`), while `mcd compare` and the
library keep the paper's importance sampling (`SamplerConfig()`; docs/cli.md, "Sequential Monte
Carlo"), and `mcd compare` takes no SMC flags: SMC settings reach it only through `--config` (a
record's `config` holds all of them). `test_compare_defaults_are_estimate_defaults_but_the_method`
checks that this is the only difference between the two commands' defaults. The library's own
`SamplerConfig()` also starts the step sizes at a fixed 0.05 (the command line's `--step-size auto`
is the pilot) and unrolls one step (the command line picks `run.auto_unroll()` by device), so the
plans below name `step_size="pilot"` and the command lines `--unroll 1`.

Benchmark cells: the question modules that run one estimate through the library use
`paper_tables.run_cell` (paper_tables, compare_estimators, score_variants), which returns the
record's numbers; calibration and learned_smc call `mcd estimate` itself (CliRunner).

Compilation dominates the cost, so the runs share the persistent compilation cache of the session
(the same target family compiles to the same programs) and tiny settings.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import pytest
from jax.experimental.compilation_cache import compilation_cache

from golden_cases import comparable, run_case
from mcd_cli import run
from mcd_cli.config import ESTIMATION_FIELDS, SamplerConfig, TrainConfig
from mcd_cli.targets import load_target

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"

SEED = 3
PARAMS = {"dim": "2"}  # as the command line hands --param dim=2 to the target
# The golden case smc_ula_mcd's settings (tests/golden_cases.py) but the seed: the same programs, which
# the session's persistent compilation cache then compiles once for both.
SAMPLES = 1024
SETTINGS = [
    "--param", "dim=2", "--steps", "4", "--hidden", "8", "--batch-size", "16", "--iterations", "20",
    "--samples", str(SAMPLES), "--seed", str(SEED), "--unroll", "1",
]
IS = ["--resample", "0"]  # estimate's flag for compare's (and the library's) importance sampling
SMC = ["--resample", "0.5", "--refine", "hmc", "--refine-steps", "5"]

SAMPLER = SamplerConfig(sampler="ula", backward="mcd", steps=4, hidden=8, step_size="pilot", unroll=1)
SAMPLER_SMC = dataclasses.replace(SAMPLER, resample=0.5, refine="hmc", refine_steps=5)
TRAINING = TrainConfig(iterations=20, batch_size=16)


def differences(new: dict, old: dict, ignore: tuple = ()) -> list[str]:
    """The paths at which two records differ, outside the volatile fields and `ignore`."""
    a, b = comparable(new), comparable(old)
    out: list[str] = []

    def walk(x, y, where):
        if isinstance(x, dict) and isinstance(y, dict):
            for key in sorted(set(x) | set(y)):
                if where == "" and key in ignore:
                    continue
                if key not in x or key not in y:
                    out.append(f"{where}{key} (only in {'the first' if key in x else 'the second'})")
                else:
                    walk(x[key], y[key], f"{where}{key}.")
        elif x != y:
            out.append(f"{where.rstrip('.')}: {x!r} != {y!r}")

    walk(a, b, "")
    return out


def assert_same(new: dict, old: dict, ignore: tuple = ()) -> None:
    diff = differences(new, old, ignore)
    assert not diff, "records differ at " + "; ".join(diff[:10])


@pytest.fixture(scope="module", autouse=True)
def persistent_cache(compile_cache):
    """The session's persistent compilation cache, in this process, for this module's runs."""
    names = (
        "jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
        "jax_persistent_cache_min_entry_size_bytes",
    )
    before = {name: getattr(jax.config, name) for name in names}
    for name, value in zip(names, (str(compile_cache), 0, 0)):
        jax.config.update(name, value)
    compilation_cache.reset_cache()  # the cache is set up once per process: again, with the directory
    yield
    for name, value in before.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("same-record")


@pytest.fixture(scope="module")
def paper_tables():
    """`benchmarks/questions/paper_tables.py`, imported as `benchmarks/run.py` imports question modules."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(BENCHMARKS / "questions"))
        patch.syspath_prepend(str(BENCHMARKS / "lib"))
        import paper_tables

        yield paper_tables


@pytest.fixture(scope="module")
def target():
    """The target of the library's plans, loaded once (its compiled programs are kept with it)."""
    return load_target("gmm8", PARAMS)


def library_plan(target, sconf: SamplerConfig, **extra) -> run.RunPlan:
    """The plan `mcd estimate gmm8 SETTINGS` builds, written out with the library's types."""
    return run.RunPlan(
        target, sconf, TRAINING, num_samples=SAMPLES, seed=SEED, target_spec="gmm8", target_args=dict(PARAMS), **extra
    )


@pytest.fixture(scope="module")
def estimate_is(workdir) -> dict:
    return run_case(["estimate", "gmm8", *SETTINGS, *IS], workdir)[-1]


@pytest.fixture(scope="module")
def estimate_smc(workdir) -> dict:
    return run_case(["estimate", "gmm8", *SETTINGS, *SMC], workdir)[-1]


def test_compare_defaults_are_estimate_defaults_but_the_method(workdir):
    """Without estimation flags the two commands plan the same run, except the method that
    `run.method_defaults` gives `mcd estimate` (SMC) and `mcd compare` leaves at importance sampling."""
    small = ["--param", "dim=2", "--dry-run"]
    grid = run_case(["compare", "gmm8", *small], workdir)
    models = run_case(["compare", "gmm8", "gmm8", *small], workdir)
    estimate = run_case(["estimate", "gmm8", *small], workdir)[0]
    estimate_is = run_case(["estimate", "gmm8", *small, *IS], workdir)[0]
    for plan in [*grid, *models]:
        assert plan == estimate_is
    smc = {k for k, v in estimate["sampler_config"].items() if estimate_is["sampler_config"][k] != v}
    assert smc == {"resample", "refine", "refine_steps"} and smc <= set(ESTIMATION_FIELDS)
    assert estimate["sampler_config"]["resample"] == run.SMC_RESAMPLE
    assert {k: v for k, v in estimate.items() if k != "sampler_config"} == {
        k: v for k, v in estimate_is.items() if k != "sampler_config"
    }


def test_the_plans_are_the_command_lines(estimate_is, estimate_smc, paper_tables):
    """The library's configs and the benchmark's sampler are those the command line built."""
    for record, sconf in ((estimate_is, SAMPLER), (estimate_smc, SAMPLER_SMC)):
        config = record["config"]
        assert {k: config[k] for k in dataclasses.asdict(sconf)} == dataclasses.asdict(sconf)
        assert {k: config.get(k) for k in dataclasses.asdict(TRAINING)} == dataclasses.asdict(TRAINING)
        assert (config["samples"], config["seed"], config["param"]) == (SAMPLES, SEED, PARAMS)
    assert dataclasses.replace(paper_tables.sampler_config("ula-mcd", 4, 8, "pilot"), unroll=1) == SAMPLER


def test_compare_grid_is_the_estimate(estimate_is, workdir):
    """`mcd compare TARGET` with one setting: the record of `mcd estimate` (importance sampling)."""
    (cell,) = run_case(["compare", "gmm8", *SETTINGS], workdir)
    assert cell["kind"] == "estimate" and cell["model_index"] is None
    assert_same(cell, estimate_is)


def test_compare_config_reproduces_an_smc_estimate(estimate_smc, workdir):
    """SMC reaches compare through --config: an estimate's `config` gives its record again."""
    assert estimate_smc["label"] == "ULA-MCD+SMC" and estimate_smc["smc"] is not None
    path = workdir / "smc.json"
    path.write_text(json.dumps(estimate_smc["config"]))
    (cell,) = run_case(["compare", "--config", str(path)], workdir)
    assert_same(cell, estimate_smc)


@pytest.mark.slow  # 16 s; test_policy's compare test checks that an estimate reproduces a compared model
def test_compare_models_are_estimates_with_their_model_index(target, workdir):
    """Model i of `mcd compare A B` is `mcd estimate --model-index i` and `RunPlan(model_index=i)`."""
    *models, summary = run_case(["compare", "gmm8", "gmm8", *SETTINGS], workdir)
    assert [m["kind"] for m in models] == ["model", "model"] and summary["kind"] == "comparison"
    assert [m["model_index"] for m in models] == [0, 1]
    assert models[0]["log_z"] != models[1]["log_z"]  # keys fold_in(key(seed), 0) and 1: independent
    one = run_case(["estimate", "gmm8", *SETTINGS, *IS, "--model-index", "1"], workdir)[-1]
    assert one["model_index"] == 1
    assert_same(models[1], one, ignore=("kind",))
    zero = run.execute(library_plan(target, SAMPLER, model_index=0)).as_dict()
    assert_same(models[0], zero, ignore=("kind",))


@pytest.mark.parametrize("method", ["importance sampling", "smc"])
def test_library_execute_is_the_estimate(method, target, request):
    record = request.getfixturevalue("estimate_is" if method == "importance sampling" else "estimate_smc")
    sconf = SAMPLER if method == "importance sampling" else SAMPLER_SMC
    assert_same(run.execute(library_plan(target, sconf)).as_dict(), record)


@pytest.mark.parametrize("method", ["importance sampling", "smc"])
def test_benchmark_cell_is_the_estimate(method, target, paper_tables, request):
    """`paper_tables.run_cell` ("exactly the run `mcd estimate <target> --seed <seed>` makes")
    returns the numbers of the estimate's record."""
    record = request.getfixturevalue("estimate_is" if method == "importance sampling" else "estimate_smc")
    sconf = SAMPLER if method == "importance sampling" else SAMPLER_SMC
    cell = paper_tables.run_cell(target, sconf, TRAINING, SEED, SAMPLES)
    assert "failed" not in cell, cell
    fields = {
        "log_z": "log_z", "log_z_stderr": "log_z_stderr", "elbo": "elbo", "ess": "ess", "pareto_k": "pareto_k",
        "num_samples": "num_samples", "num_nonfinite": "nonfinite_weights",
        "train_elbo_last_10pct": "train_elbo_last", "train_skipped": "skipped_steps",
        "train_recoveries": "recoveries",
    }
    numbers = {name: None if cell[name] is None else float(cell[name]) for name in fields}
    assert numbers == {name: None if record[key] is None else float(record[key]) for name, key in fields.items()}
    assert cell["abs_error"] == pytest.approx(abs(record["error"]), abs=0.0)
