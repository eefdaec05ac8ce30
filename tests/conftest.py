"""Shared small fixtures: tiny targets and settings, and two ways to run `mcd`.

Compilation dominates the cost of these tests, so the settings are tiny (d = 2, K = 2, a few
iterations, 64 samples) and most runs use `--iterations 0` (no training step to compile).
The tests and their subprocesses share a persistent JAX compilation cache for the run
(`persistent_compile_cache`): a program compiled by one test is loaded, not compiled, by the next
test that makes it, so tests that run the same small settings on the same tiny targets pay once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

# XLA's CPU backend without LLVM's optimisation passes (`--xla_backend_optimization_level=0`)
# compiles these many small, briefly run programs faster: test_golden.py took 94 s instead of 148 s
# on 2 cores. The programs compute the same functions; their float rounding differs in the last
# bits (and one golden case, whose training and resampling amplify it, was re-made at this level).
# Set before JAX starts its backend; an XLA_FLAGS that names a level keeps it.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()

import pytest  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from mcd_cli.cli import app

# The command line's own compilation cache (`mcd_cli.runtime.compile_cache`, in the user's home by default)
# stays off in the tests, which have theirs (`persistent_compile_cache`); its test sets a folder.
os.environ["MCD_CACHE_DIR"] = "off"

# Tiny settings: one compiled estimation of d = 2, K = 2 with AIS (no score network), by importance
# sampling (`--resample 0`): the cheapest run, for tests of the command line's mechanics. The
# default SMC estimate has its own tests (test_cli_smc.py).
# `mcd compare` estimates by importance sampling and has no --resample; `mcd estimate` defaults
# to SMC, so its tiny runs ask for importance sampling explicitly.
TINY_COMPARE = ["--steps", "2", "--hidden", "4", "--batch-size", "8", "--samples", "64", "--backward", "ais"]
NO_TRAIN_COMPARE = TINY_COMPARE + ["--iterations", "0"]
TINY = TINY_COMPARE + ["--resample", "0"]
NO_TRAIN = TINY + ["--iterations", "0"]

GAUSS_YAML = """\
name: tiny_gauss
description: "N(1, I) in d = 2, initial N(0, I); log Z = 0"
family: normal
params: {dim: 2, loc: 1.0}
initial: {mean: 0.0, scale: 1.0}
"""


# The persistent compilation cache of a test run: programs that took at least this long to compile
# are kept (most of the small ones compile faster than they are looked up and written), and the
# cache has a size limit, which turns on its file lock: pytest-xdist's workers share it.
CACHE_MIN_COMPILE_SECONDS = 0.1
CACHE_MAX_BYTES = 8 << 30


@pytest.fixture(scope="session")
def compile_cache(tmp_path_factory) -> Path:
    """The run's persistent compilation cache: one folder for the whole run, shared by the workers
    of `pytest -n` (each works in a folder of the run's own, `getbasetemp()`) and the subprocesses."""
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "jax-cache"
    path.mkdir(exist_ok=True)
    return path


PERSISTENT_CACHE_OPTIONS = (
    "jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs",
    "jax_persistent_cache_min_entry_size_bytes", "jax_compilation_cache_max_size",
)


def set_persistent_cache(values: dict) -> None:
    """Sets the persistent compilation cache's options in this process, and makes JAX take them
    (the cache is set up once per process: `reset_cache` sets it up again)."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    for name, value in values.items():
        jax.config.update(name, value)
    compilation_cache.reset_cache()


@pytest.fixture(scope="session", autouse=True)
def persistent_compile_cache(compile_cache):
    """The session's persistent compilation cache (the subprocesses' one), in this process too.

    Many tests run the same tiny settings on the same tiny targets, and a target loaded again (every
    command-line run loads its own) compiles to the same programs under new Python functions, which
    JAX's in-memory caches do not recognise: the persistent cache does, so each distinct program is
    compiled once per session. A test that needs fresh compilations turns it off
    (`no_persistent_cache`)."""
    import jax

    before = {name: getattr(jax.config, name) for name in PERSISTENT_CACHE_OPTIONS}
    set_persistent_cache(
        dict(zip(PERSISTENT_CACHE_OPTIONS, (str(compile_cache), CACHE_MIN_COMPILE_SECONDS, 0, CACHE_MAX_BYTES)))
    )
    yield
    set_persistent_cache(before)


@pytest.fixture
def no_persistent_cache():
    """The persistent compilation cache off for one test: every compilation is a fresh one."""
    import jax

    before = {name: getattr(jax.config, name) for name in PERSISTENT_CACHE_OPTIONS}
    set_persistent_cache({"jax_compilation_cache_dir": None})
    yield
    set_persistent_cache(before)


@pytest.fixture
def gauss_yaml(tmp_path) -> Path:
    """A 2-d Gaussian target file with log Z = 0."""
    path = tmp_path / "tiny_gauss.yaml"
    path.write_text(GAUSS_YAML)
    return path


def invoke(args, input=None):
    """Runs `mcd ARGS` in this process; returns (exit_code, stdout, stderr)."""
    result = CliRunner().invoke(app, [str(a) for a in args], input=input)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def mcd():
    return invoke


def subprocess_env(cache: Path) -> dict:
    env = dict(os.environ)
    env.update(
        JAX_COMPILATION_CACHE_DIR=str(cache),
        JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=str(CACHE_MIN_COMPILE_SECONDS),
        JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0",
        JAX_COMPILATION_CACHE_MAX_SIZE=str(CACHE_MAX_BYTES),
        JAX_PLATFORMS="cpu",
        PYTHONUNBUFFERED="1",
    )
    env.pop("MCD_DEBUG", None)
    return env


# `python -m mcd_cli`, except that every checkpoint save is followed by a pause, so that a test can
# interrupt training reliably in the middle however fast the machine is.
_SLOW_CHECKPOINTS = """
import sys, time
from mcd_cli.io import checkpoint
save = checkpoint.save_state
def slow_save(*args, **kwargs):
    save(*args, **kwargs)
    time.sleep(0.05)
checkpoint.save_state = slow_save
from mcd_cli.cli import main
sys.argv[0] = "mcd"
main()
"""


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def mcd_process(compile_cache):
    """`mcd_process(args, cwd=..., slow_checkpoints=False, **popen_kwargs)` starts `python -m
    mcd_cli ARGS` and returns the Popen."""

    def start(args, cwd=None, slow_checkpoints=False, **kwargs):
        program = ["-c", _SLOW_CHECKPOINTS] if slow_checkpoints else ["-m", "mcd_cli"]
        return subprocess.Popen(
            [sys.executable, *program, *[str(a) for a in args]],
            cwd=cwd,
            env=subprocess_env(compile_cache),
            # A shell starts background jobs with SIGINT ignored, and an ignored signal stays ignored
            # across exec: a test suite run as `pytest ... &` would hand that on, and Python then
            # never installs its Ctrl-C handler. The child gets SIGINT as a terminal would deliver it.
            preexec_fn=_default_sigint,
            stdout=kwargs.pop("stdout", subprocess.PIPE),
            stderr=kwargs.pop("stderr", subprocess.PIPE),
            text=True,
            **kwargs,
        )

    return start


def records(stdout: str) -> list[dict]:
    """The JSON objects of a --json run's stdout (every line must parse)."""
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def one_line_error(stderr: str) -> str:
    """The stderr of a rejected run: exactly one line, and no traceback."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, stderr
    return lines[0]


def target_error(*args, **kwargs) -> str:
    """The one-line message of the TargetError that `load_target(*args, **kwargs)` raises."""
    from mcd_cli.targets import TargetError, load_target

    with pytest.raises(TargetError) as info:
        load_target(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message and message.strip() == message and message, repr(message)
    return message


def write_file(folder: Path, name: str, text: str) -> Path:
    """Writes the dedented `text` to `folder / name`."""
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path
