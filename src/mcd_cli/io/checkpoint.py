"""Trained parameters and training checkpoints: archives that must survive crashes.

A parameter or checkpoint file is an `.npz` archive: one entry per array leaf (`<tree>/<index>`)
and a `__meta__` entry holding JSON with a format tag and version, what kind of file it is, the
target it was fitted to (name, dimension, parameters) and the `SamplerConfig`. A file written by
something else, cut short, or fitted to another target is rejected with a one-line
`CheckpointError` before any work starts.

Arrays are restored into the pytree structure of a freshly initialised template (the same
target and settings), so no Python objects are ever unpickled.

Archives are written atomically (`files.atomic_write_bytes`): a crash or a full disk mid-write
leaves the previous file intact and no temporary file behind (docs/reliability.md).

Example:
    >>> import numpy as np, tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> save_params(os.path.join(d, "p.npz"), {"w": np.ones(2)}, {"target": {"name": "t", "dim": 2}})
    >>> load_params(os.path.join(d, "p.npz"), {"w": np.zeros(2)})[0]["w"].tolist()
    [1.0, 1.0]
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import zipfile
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from mcd_cli.io.files import CheckpointError, atomic_write_bytes

FORMAT = "mcd-cli"
FORMAT_VERSION = 4  # 2: NamedTuple pytrees; 3: the training state carries the recent ELBOs (--iterations auto);
# 4: step sizes started from the pilot are one parameter per step (`schedules.per_step_sizes`)
PARAMS_KIND = "params"
STATE_KIND = "train-state"
_META = "__meta__"

# --------------------------------------------------------------------------------------------
# Pytrees <-> arrays


def _is_key(leaf: Any) -> bool:
    dtype = getattr(leaf, "dtype", None)
    return dtype is not None and jnp.issubdtype(dtype, jax.dtypes.prng_key)


def _flatten(name: str, tree: Any, out: dict, keys: list) -> None:
    for i, leaf in enumerate(jax.tree_util.tree_leaves(tree)):
        entry = f"{name}/{i}"
        if _is_key(leaf):
            keys.append(entry)
            leaf = jax.random.key_data(leaf)
        out[entry] = np.asarray(leaf)


def _restore(name: str, arrays: dict, template: Any, keys: set, path: str) -> Any:
    leaves, treedef = jax.tree_util.tree_flatten(template)
    found = sum(1 for k in arrays if k.rsplit("/", 1)[0] == name)
    if found != len(leaves):
        raise CheckpointError(
            f"'{path}' holds {found} arrays for '{name}' where this run has {len(leaves)}: "
            "it was written for other settings; use a file from the same settings"
        )
    restored = []
    for i, like in enumerate(leaves):
        entry = f"{name}/{i}"
        value = arrays[entry]
        if entry in keys:
            if not _is_key(like):
                raise CheckpointError(f"'{path}' does not match this run's settings ({entry})")
            value = jax.random.wrap_key_data(jnp.asarray(value), impl=jax.random.key_impl(like))
        elif isinstance(like, (bool, np.bool_)):
            value = bool(value)
        elif isinstance(like, (int, np.integer)) and not hasattr(like, "shape"):
            value = int(value)
        elif isinstance(like, float):
            value = float(value)
        else:
            shape = tuple(np.shape(like))
            if tuple(value.shape) != shape:
                raise CheckpointError(
                    f"'{path}' has an array of shape {tuple(value.shape)} where this run needs "
                    f"{shape} ({entry}): it was written for other settings"
                )
            if isinstance(like, np.ndarray):
                value = value.astype(like.dtype)
            else:
                value = jnp.asarray(value, dtype=getattr(like, "dtype", value.dtype))
        restored.append(value)
    return jax.tree_util.tree_unflatten(treedef, restored)


def _write(path: str | os.PathLike, kind: str, trees: dict, meta: dict) -> None:
    arrays: dict = {}
    keys: list = []
    for name, tree in trees.items():
        _flatten(name, tree, arrays, keys)
    header = {"format": FORMAT, "version": FORMAT_VERSION, "kind": kind, "key_leaves": keys}
    header.update(meta)
    arrays[_META] = np.frombuffer(json.dumps(json_ready(header)).encode(), np.uint8)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    atomic_write_bytes(path, buffer.getvalue())


def json_ready(value: Any) -> Any:
    """`value` as plain JSON data: non-finite floats become None, unknown objects their str()."""
    if isinstance(value, (np.generic, np.ndarray)):
        value = value.tolist()
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return str(value)


def _read(path: str | os.PathLike) -> tuple[dict, dict]:
    path = str(path)
    if not os.path.exists(path):
        raise CheckpointError(f"'{path}' does not exist; check the path")
    if os.path.isdir(path):
        raise CheckpointError(f"'{path}' is a directory; give the file that --save wrote")
    not_ours = (
        f"'{path}' is not an mcd-cli parameter file (or it is truncated); "
        "use a file written by 'mcd estimate --save'"
    )
    try:
        with open(path, "rb"):
            pass
    except OSError as err:
        raise CheckpointError(f"cannot read '{path}' ({err.strerror or err}); check its permissions") from None
    try:
        with np.load(path, allow_pickle=False) as archive:
            if _META not in archive.files:
                raise CheckpointError(not_ours)
            meta = json.loads(archive[_META].tobytes().decode("utf-8"))
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                raise CheckpointError(not_ours)
            arrays = {k: archive[k] for k in archive.files if k != _META}
    except CheckpointError:
        raise
    except OSError as err:
        if err.errno is not None:  # the disk, not the contents (numpy's own errors carry no errno)
            raise CheckpointError(f"cannot read '{path}' ({err.strerror or err}); check the disk and retry") from None
        raise CheckpointError(not_ours) from None
    except (ValueError, EOFError, KeyError, zipfile.BadZipFile, UnicodeDecodeError):
        raise CheckpointError(not_ours) from None
    if meta.get("version") != FORMAT_VERSION:
        raise CheckpointError(
            f"'{path}' uses file format version {meta.get('version')} (mcd-cli "
            f"{meta.get('mcd_cli_version', 'unknown')}), this mcd-cli reads version {FORMAT_VERSION}; "
            "refit with this version"
        )
    return arrays, meta


def read_meta(path: str | os.PathLike) -> dict:
    """The metadata of a parameter or checkpoint file (validates the format first)."""
    return _read(path)[1]


# --------------------------------------------------------------------------------------------
# Identity checks


def target_identity(target: Any) -> dict:
    """What identifies a target in a file: name, dimension and the parameters it was built with."""
    return {
        "name": target.name,
        "dim": int(target.dim),
        "params": json_ready(dict(target.params)),
    }


def check_target(meta: dict, target: Any, path: str) -> None:
    """Raises CheckpointError unless the file at `path` was written for `target`."""
    saved = meta.get("target") or {}
    here = target_identity(target)
    if saved.get("name") != here["name"] or saved.get("dim") != here["dim"]:
        raise CheckpointError(
            f"'{path}' was fitted to target '{saved.get('name')}' (d={saved.get('dim')}), not "
            f"'{here['name']}' (d={here['dim']}); use a file saved for this target"
        )
    if saved.get("params", {}) != here["params"]:
        raise CheckpointError(
            f"'{path}' was fitted to {saved.get('name')} with parameters {saved.get('params')}, "
            f"not {here['params']}; pass the same --param values or refit"
        )


def config_differences(saved: dict, current: Any, ignore: tuple = ()) -> list[str]:
    """`name=saved (now current)` for each dataclass field of `current` that differs from `saved`."""
    out = []
    for field in dataclasses.fields(current):
        if field.name in ignore:
            continue
        now = getattr(current, field.name)
        if field.name in saved and saved[field.name] != now:
            out.append(f"{field.name}={saved[field.name]!r} (this run: {now!r})")
    return out


# --------------------------------------------------------------------------------------------
# Parameters and training state


def save_params(path: str | os.PathLike, params: Any, meta: Optional[dict] = None) -> None:
    """Saves trained sampler parameters atomically, with `meta` (target, sampler config, ...)."""
    _write(path, PARAMS_KIND, {"params": params}, dict(meta or {}))


def load_params(path: str | os.PathLike, template: Any) -> tuple[Any, dict]:
    """Loads parameters into the structure of `template`; also accepts a training checkpoint.

    Returns:
        (params, meta). Check `meta` against the run (`check_target`) before trusting it.
    """
    arrays, meta = _read(path)
    keys = set(meta.get("key_leaves", ()))
    return _restore("params", arrays, template, keys, str(path)), meta


def save_state(
    path: str | os.PathLike, state: Any, meta: Optional[dict] = None, history: Optional[np.ndarray] = None
) -> None:
    """Saves a whole training state (a NamedTuple pytree with a `params` field) atomically, with
    `history`, the training ELBO of its iterations so far, so that a resumed run reports the whole
    training curve (and the same `train_elbo_last`) as one that ran through."""
    meta = dict(meta or {})
    meta["iteration"] = int(getattr(state, "iteration", 0))
    # The parameters are stored apart, under the name a parameter file uses, so --load reads them.
    trees = {"params": state.params, "state": state._replace(params=())}
    if history is not None:
        trees["history"] = np.asarray(history, dtype=np.float64)
    _write(path, STATE_KIND, trees, meta)


def load_state(path: str | os.PathLike, template: Any) -> tuple[Any, dict]:
    """Restores a training state saved by `save_state` into the structure of `template`.

    `template` is a freshly initialised state for the same target and settings; Python scalars in
    it (the iteration, the counters) come back as the same Python types. The saved ELBO history,
    when the file has one, is `meta["elbo_history"]` (an array; absent otherwise).
    """
    arrays, meta = _read(path)
    if meta.get("kind") != STATE_KIND:
        raise CheckpointError(
            f"'{path}' holds trained parameters, not a training checkpoint; use it with --load"
        )
    keys = set(meta.get("key_leaves", ()))
    params = _restore("params", arrays, template.params, keys, str(path))
    rest = _restore("state", arrays, template._replace(params=()), keys, str(path))
    if "history/0" in arrays:
        meta = {**meta, "elbo_history": np.asarray(arrays["history/0"], dtype=np.float64)}
    return rest._replace(params=params), meta
