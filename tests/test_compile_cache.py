"""The command line's persistent compilation cache (`mcd_cli.runtime.compile_cache`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys


from conftest import NO_TRAIN

from mcd_cli.runtime import compile_cache


def _run(args: list, env: dict) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "mcd_cli", *args], capture_output=True, text=True, timeout=300, env=env,
    )
    assert done.returncode == 0, done.stderr
    # Silent: no warning of JAX's about the cache (without filelock, a dependency, it warned on every run).
    assert "filelock" not in done.stderr and "compilation cache" not in done.stderr.lower(), done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_second_run_loads_its_programs_and_gives_the_same_record(gauss_yaml, tmp_path):
    """Two runs of one command in fresh processes, with the cache in a new folder: the first fills
    it, the second finds every program it needs there (no new file) and prints the same estimate."""
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
    # Every program kept, however fast it compiled (a JAX setting of the user's, which enable keeps).
    env.update(MCD_CACHE_DIR=str(cache), JAX_PLATFORMS="cpu", JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")
    args = ["estimate", str(gauss_yaml), *NO_TRAIN, "--json", "--quiet", "--seed", "4"]
    first = _run(args, env)
    kept = sorted(p.name for p in cache.iterdir())
    assert kept, "nothing was cached"
    second = _run(args, env)
    assert sorted(p.name for p in cache.iterdir()) == kept
    assert second["log_z"] == first["log_z"] and second["log_z_stderr"] == first["log_z_stderr"]

    env["MCD_CACHE_DIR"] = "off"
    off = tmp_path / "home"
    env.update(HOME=str(off), XDG_CACHE_HOME=str(off / ".cache"))
    done = subprocess.run([sys.executable, "-m", "mcd_cli", *args, "--dry-run"], env=env, capture_output=True, timeout=120)
    assert done.returncode == 0 and not off.exists()


def test_the_cache_folder_follows_the_environment():
    assert compile_cache.cache_dir({"MCD_CACHE_DIR": ""}) is None
    assert str(compile_cache.cache_dir({"MCD_CACHE_DIR": "~/c", "HOME": "/h"})).endswith("/c")
    assert str(compile_cache.cache_dir({"HOME": "/h"})) == "/h/.cache/mcd-cli/jax"
