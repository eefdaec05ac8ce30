"""Files that must survive crashes: trained parameters, training checkpoints, and JSON-lines results.

A parameter or checkpoint file is an `.npz` archive: one entry per array leaf (`<tree>/<index>`)
and a `__meta__` entry holding JSON with a format tag and version, what kind of file it is, the
target it was fitted to (name, dimension, parameters) and the `SamplerConfig`. A file written by
something else, cut short, or fitted to another target is rejected with a one-line
`CheckpointError` before any work starts.

Arrays are restored into the pytree structure of a freshly initialised template (the same
target and settings), so no Python objects are ever unpickled.

Writes are atomic: the archive goes to a temporary file in the destination's directory, is
flushed to disk, and then replaces the destination with `os.replace`; a crash or a full disk
mid-write leaves the previous file intact and no temporary file behind. Result lines are appended
all or nothing on an `O_APPEND` descriptor under an exclusive `flock`: concurrent writers never
interleave, a failed append is cut back off, and the fragment a killed writer left is cut off by the
next append (docs/reliability.md).

Example:
    >>> import numpy as np, tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> save_params(os.path.join(d, "p.npz"), {"w": np.ones(2)}, {"target": {"name": "t", "dim": 2}})
    >>> load_params(os.path.join(d, "p.npz"), {"w": np.zeros(2)})[0]["w"].tolist()
    [1.0, 1.0]
"""

from __future__ import annotations

import dataclasses
import errno
import io
import json
import os
import stat
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from mcd_cli.errors import UsageError

FORMAT = "mcd-cli"
FORMAT_VERSION = 4  # 2: NamedTuple pytrees; 3: the training state carries the recent ELBOs (--iterations auto);
# 4: step sizes started from the pilot are one parameter per step (`schedules.per_step_sizes`)
PARAMS_KIND = "params"
STATE_KIND = "train-state"
_META = "__meta__"

try:
    import fcntl
except ImportError:  # not on Windows; O_APPEND alone still keeps single writes whole there
    fcntl = None


class CheckpointError(UsageError):
    """A parameter, checkpoint or output file that cannot be used. The message is one line."""


# --------------------------------------------------------------------------------------------
# Plain files


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes `data` to `path` so that readers see either the old file or the whole new one.

    On any failure (a full disk at the write, the fsync or the rename; a signal) the temporary file
    is removed, `path` is as it was, and the `OSError` names `path`.
    """
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise _named(err, path)
    try:
        try:
            _write_all(fd, data)
            _fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(err, OSError):
            raise _named(err, path)
        raise
    _fsync_dir(path.parent)


def _named(err: OSError, path: "str | os.PathLike") -> OSError:
    """`err`, naming `path` when it names no file (errors of `write` and `fsync` name none)."""
    if err.filename is None or str(err.filename).endswith(".tmp"):
        err.filename = str(path)
    return err


def _write_all(fd: int, data: bytes) -> None:
    """Writes all of `data` (a write may be short: a signal, a file-size limit)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync(fd: int) -> None:
    """`os.fsync`, except where the file system has none (a full disk or an I/O error is raised)."""
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise


def _tail(fd: int, start: int) -> bytes:
    """The file's bytes from `start` on (a NUL, which no text line starts with, when unreadable)."""
    try:
        return os.pread(fd, max(0, os.fstat(fd).st_size - start), start)
    except OSError:
        return b"\0"


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _open_for_append(path: str | os.PathLike) -> int:
    """A descriptor for appending that can also read a regular file's end; write-only where reading
    is refused, and for a pipe or a terminal (a reader end would keep a closed pipe from failing)."""
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        regular = True  # (created here, or failing at the open below)
    if regular:
        try:
            return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        except PermissionError:
            pass
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)


def _lock(fd: int) -> bool:
    """Takes the exclusive lock; False where the platform or the file system has none."""
    if fcntl is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:  # a file system without locks: O_APPEND still keeps one write whole
        return False
    return True


def _cut_fragment(fd: int, size: int) -> int:
    """Cuts a last line without its newline (what a writer killed mid-write leaves) back off the
    file; the bytes cut (0 when the file ends in a newline, or cannot be read)."""
    if size == 0:
        return 0
    try:
        if os.pread(fd, 1, size - 1) == b"\n":
            return 0
        end = size
        while end > 0:
            begin = max(0, end - 65536)
            newline = os.pread(fd, end - begin, begin).rfind(b"\n")
            if newline >= 0:
                end = begin + newline + 1
                break
            end = begin
        os.ftruncate(fd, end)
        _fsync(fd)
    except OSError:  # write-only, or the file system refuses: append after it as before
        return 0
    return size - end


def append_line(path: str | os.PathLike, line: str) -> int:
    """Appends one line (a newline is added) to `path`, creating it if needed: all of it or nothing.

    Under an exclusive `flock` (where the platform has one), so that processes appending to the same
    file at the same time (array jobs on a cluster) never interleave their lines:

    - a last line without its newline — the fragment of a writer killed mid-write, which cannot
      clean up after itself — is first cut back off;
    - the line is written on an `O_APPEND` descriptor and fsynced; on any failure (a full disk, a
      quota, a file-size limit, an I/O error, a signal) the file is truncated back to its length
      before the append, so nothing else in it changes, and the error is raised.

    Returns:
        The number of bytes of a killed writer's fragment that were cut off (0 almost always).

    Raises:
        OSError: the line could not be written (it is not in the file); the error names `path`.
    """
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    try:
        fd = _open_for_append(path)
    except OSError as err:
        raise _named(err, path)
    try:
        locked = _lock(fd)
        regular = stat.S_ISREG(os.fstat(fd).st_mode)  # not a pipe, a terminal or /dev/full
        cut = _cut_fragment(fd, os.fstat(fd).st_size) if regular and locked else 0
        size = os.fstat(fd).st_size if regular else 0
        try:
            _write_all(fd, data)
            if regular:
                _fsync(fd)
        except BaseException as err:
            # Under the lock nobody else appended since; without it, only if what follows is ours.
            if regular and (locked or data.startswith(_tail(fd, size))):
                try:
                    os.ftruncate(fd, size)
                except OSError:
                    pass
            if isinstance(err, OSError):
                raise _named(err, path)
            raise
        return cut
    finally:
        os.close(fd)  # closing releases the lock


def ensure_writable(path: str | os.PathLike, what: str) -> Path:
    """Checks, without changing anything, that a file can be written at `path`.

    Used before any training starts, so that a run never fails at the very end because its
    results have nowhere to go. The check really tries: it opens an existing file for appending,
    or creates and removes a probe file in the directory (permission bits alone mislead root).

    Raises:
        CheckpointError: with one line naming the problem and the fix.
    """
    p = Path(path)
    if str(path) == "" or p.is_dir():
        raise CheckpointError(f"{what} '{path}' is a directory; give a file name")
    parent = p.parent
    if not parent.is_dir():
        raise CheckpointError(
            f"cannot write {what} '{path}': directory '{parent}' does not exist; create it first"
        )
    try:
        if p.exists():
            os.close(os.open(p, os.O_WRONLY | os.O_APPEND))
        else:
            fd, probe = tempfile.mkstemp(dir=parent, prefix=".mcd-probe-")
            os.close(fd)
            os.unlink(probe)
    except OSError as err:
        raise CheckpointError(
            f"cannot write {what} '{path}' ({err.strerror or err}); choose a writable location"
        ) from None
    return p


def ensure_directory(path: str | os.PathLike, what: str) -> Path:
    """Creates directory `path` if needed and checks that files can be written in it."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise CheckpointError(f"{what} '{path}' exists and is not a directory; choose another path")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CheckpointError(
            f"cannot create {what} '{path}' ({err.strerror or err}); choose a writable location"
        ) from None
    ensure_writable(p / "probe", what)
    return p


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
