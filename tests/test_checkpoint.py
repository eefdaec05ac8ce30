"""Parameter and checkpoint files, atomic writes, and whole-line appends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mcd_cli.io import checkpoint
from mcd_cli.io import files
from mcd_cli.config import SamplerConfig, TrainConfig
from mcd_cli.targets.base import Target
from mcd_cli.train.loop import init_train_state


def tiny_target(name="t", dim=2, params=None):
    return Target.create(lambda x: -0.5 * jnp.sum(x**2), dim=dim, name=name, params=params or {"dim": dim})


SCONF = SamplerConfig(sampler="uha", steps=2, hidden=4)
TCONF = TrainConfig(iterations=3, batch_size=4)


def fresh_state(seed=0, target=None, sconf=SCONF):
    return init_train_state(jax.random.key(seed), target or tiny_target(), sconf, TCONF)


def trees_equal(a, b) -> bool:
    la, ta = jax.tree_util.tree_flatten(a)
    lb, tb = jax.tree_util.tree_flatten(b)
    if ta != tb:
        return False
    for x, y in zip(la, lb):
        if hasattr(x, "dtype") and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        if not np.array_equal(np.asarray(x), np.asarray(y)):
            return False
    return True


def test_params_round_trip(tmp_path):
    params = fresh_state(1).params
    path = tmp_path / "p.npz"
    checkpoint.save_params(path, params, {"target": checkpoint.target_identity(tiny_target())})
    template = fresh_state(2).params
    restored, meta = checkpoint.load_params(path, template)
    assert trees_equal(restored, params)
    assert meta["format"] == checkpoint.FORMAT and meta["kind"] == checkpoint.PARAMS_KIND


def test_train_state_round_trip_including_key_and_counters(tmp_path):
    state = fresh_state(1)._replace(iteration=7, lr_scale=0.25, skipped=3, recoveries=1)
    path = tmp_path / "s.npz"
    checkpoint.save_state(path, state, {"seed": 1})
    restored, meta = checkpoint.load_state(path, fresh_state(2))
    assert meta["iteration"] == 7
    assert restored.iteration == 7 and isinstance(restored.iteration, int)
    assert restored.lr_scale == 0.25 and restored.skipped == 3 and restored.recoveries == 1
    for field in ("params", "opt_state", "key", "snapshot_params", "snapshot_opt_state"):
        assert trees_equal(getattr(restored, field), getattr(state, field)), field
    assert jax.random.key_impl(restored.key) == jax.random.key_impl(state.key)
    assert "elbo_history" not in meta  # saved without one


def test_train_state_keeps_its_elbo_history(tmp_path):
    history = np.array([-3.5, np.nan, -2.25, -1.0 / 3.0])
    checkpoint.save_state(tmp_path / "s.npz", fresh_state(1)._replace(iteration=4), history=history)
    _, meta = checkpoint.load_state(tmp_path / "s.npz", fresh_state(2))
    np.testing.assert_array_equal(meta["elbo_history"], history)  # bit for bit, NaN included


def test_params_can_be_read_from_a_checkpoint(tmp_path):
    state = fresh_state(1)
    checkpoint.save_state(tmp_path / "s.npz", state)
    restored, _ = checkpoint.load_params(tmp_path / "s.npz", fresh_state(2).params)
    assert trees_equal(restored, state.params)


def test_a_params_file_is_not_a_checkpoint(tmp_path):
    checkpoint.save_params(tmp_path / "p.npz", fresh_state().params)
    with pytest.raises(checkpoint.CheckpointError, match="--load"):
        checkpoint.load_state(tmp_path / "p.npz", fresh_state())


@pytest.mark.parametrize("kind", ["truncated", "text", "foreign_npz", "empty", "bad_meta", "directory"])
def test_files_that_are_not_ours_are_rejected_in_one_line(tmp_path, kind):
    good = tmp_path / "good.npz"
    checkpoint.save_params(good, fresh_state().params)
    path = tmp_path / "bad.npz"
    if kind == "truncated":
        path.write_bytes(good.read_bytes()[:200])
    elif kind == "text":
        path.write_text("hello")
    elif kind == "foreign_npz":
        np.savez(path, a=np.ones(3))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "bad_meta":
        np.savez(path, __meta__=np.frombuffer(b'{"format": "other"}', np.uint8))
    elif kind == "directory":
        path.mkdir()
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.load_params(path, fresh_state().params)
    assert "\n" not in str(err.value) and "bad.npz" in str(err.value)


@pytest.mark.parametrize("version", [1, checkpoint.FORMAT_VERSION + 1])
def test_other_format_versions_are_rejected_naming_the_version(tmp_path, version):
    """Files of the previous format (dict parameters, version 1) and of newer ones: one clear line."""
    path = tmp_path / "p.npz"
    checkpoint.save_params(path, fresh_state().params, {"mcd_cli_version": "0.1.0"})
    with zipfile.ZipFile(path) as z:
        arrays = {n[:-4]: np.load(z.open(n)) for n in z.namelist()}
    meta = json.loads(arrays["__meta__"].tobytes())
    meta["version"] = version
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez(path, **arrays)
    with pytest.raises(checkpoint.CheckpointError, match=f"version {version} .mcd-cli 0.1.0.") as err:
        checkpoint.load_params(path, fresh_state().params)
    assert "\n" not in str(err.value) and "refit" in str(err.value)


def test_file_from_other_settings_is_rejected(tmp_path):
    path = tmp_path / "p.npz"
    checkpoint.save_params(path, fresh_state().params)
    other = init_train_state(jax.random.key(0), tiny_target(dim=3), SCONF, TCONF).params
    with pytest.raises(checkpoint.CheckpointError, match="other settings"):
        checkpoint.load_params(path, other)


def test_target_identity_check():
    meta = {"target": checkpoint.target_identity(tiny_target("a", 2))}
    checkpoint.check_target(meta, tiny_target("a", 2), "f.npz")
    with pytest.raises(checkpoint.CheckpointError, match="'a'"):
        checkpoint.check_target(meta, tiny_target("b", 2), "f.npz")
    with pytest.raises(checkpoint.CheckpointError, match="parameters"):
        checkpoint.check_target(meta, tiny_target("a", 2, {"dim": 2, "loc": 1.0}), "f.npz")


def test_atomic_write_keeps_the_old_file_when_the_write_fails(tmp_path, monkeypatch):
    path = tmp_path / "p.npz"
    checkpoint.save_params(path, fresh_state(1).params)
    before = path.read_bytes()

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        checkpoint.save_params(path, fresh_state(2).params)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["p.npz"]  # no temporary file left behind


# A writer process: `files.append_line` without the package's `__init__` (JAX and the rest: seconds
# per process). It says it is ready, then waits for the go file, so that the four writers append at
# the same time (lines written in two pieces, say, interleave here).
_APPEND_MANY = """
import json, os, sys, types
package = types.ModuleType("mcd_cli")
package.__path__ = [sys.argv[1]]
sys.modules["mcd_cli"] = package
from mcd_cli.io import files
path, go, worker, count = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
open(go + "-ready-" + str(worker), "w").close()
while not os.path.exists(go):
    pass
for i in range(count):
    files.append_line(path, json.dumps({"worker": worker, "i": i, "pad": "x" * (500 + 37 * worker)}))
"""


def test_concurrent_appends_never_interleave(tmp_path):
    path, go = tmp_path / "out.jsonl", tmp_path / "go"
    path.write_text('{"first": 1}\n')
    package = os.path.dirname(files.__file__)
    procs = [
        subprocess.Popen([sys.executable, "-c", _APPEND_MANY, package, str(path), str(go), str(w), "100"])
        for w in range(4)
    ]
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("go-ready-*"))) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    for p in procs:
        assert p.wait(60) == 0
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {"first": 1} and len(lines) == 401
    for w in range(4):
        assert [r["i"] for r in lines if r.get("worker") == w] == list(range(100))


def test_ensure_writable(tmp_path):
    assert files.ensure_writable(tmp_path / "new.jsonl", "out") == tmp_path / "new.jsonl"
    assert not (tmp_path / "new.jsonl").exists()  # checking creates nothing
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(checkpoint.CheckpointError, match="does not exist"):
        files.ensure_writable(tmp_path / "missing" / "x", "out")
    with pytest.raises(checkpoint.CheckpointError, match="directory"):
        files.ensure_writable(tmp_path, "out")
    with pytest.raises(checkpoint.CheckpointError):
        files.ensure_writable("/proc/not-here.jsonl", "out")
    (tmp_path / "file").write_text("x")
    with pytest.raises(checkpoint.CheckpointError, match="not a directory"):
        files.ensure_directory(tmp_path / "file", "--checkpoint directory")
    assert files.ensure_directory(tmp_path / "a" / "b", "dir").is_dir()
