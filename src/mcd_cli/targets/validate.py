"""Load-time validation of a user's log density, and one-line messages for the errors it raises.

`probe` traces the log density once on an abstract point with `jax.eval_shape` (no compilation,
no evaluation) and turns every way that can fail into a `TargetError` whose message is one line
naming the file and line where the user's code went wrong.
"""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path
from types import TracebackType
from typing import Any, Iterable, Optional

import jax
import jax.numpy as jnp
import numpy as np

from mcd_cli.targets.base import LogDensity, TargetError

# Errors raised when Python needs a concrete value of the traced input x.
_TRACER_ERRORS = (
    jax.errors.ConcretizationTypeError,
    jax.errors.TracerIntegerConversionError,
    jax.errors.TracerArrayConversionError,
    jax.errors.NonConcreteBooleanIndexError,
)


class _BadOutput(Exception):
    """The log density returned something that is not an array."""


def one_line(err: BaseException, limit: int = 300) -> str:
    """`Type: first line of the message`, shortened to `limit` characters."""
    text = str(err).strip().splitlines()
    message = text[0].strip() if text else ""
    out = f"{type(err).__name__}: {message}" if message else type(err).__name__
    return out if len(out) <= limit else out[: limit - 3] + "..."


def user_line(tb: Optional[TracebackType], files: Iterable[str]) -> Optional[int]:
    """The line number of the innermost traceback frame inside one of `files`, if any."""
    wanted = {os.path.realpath(f) for f in files}
    line = None
    while tb is not None:
        if os.path.realpath(tb.tb_frame.f_code.co_filename) in wanted:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def where(display: str, err: BaseException, files: Iterable[str]) -> str:
    """`file line N` for the innermost frame of `err` in `files`, else `display` alone."""
    line = user_line(err.__traceback__, files)
    return f"{display} line {line}" if line is not None else display


# `pyfile` imports a target file as a module of this name prefix (`_mcd_target_<stem>_<n>`).
TARGET_MODULE_PREFIX = "_mcd_target_"


def user_frame(tb: Optional[TracebackType]) -> Optional[tuple[str, str, int]]:
    """`(file, function, line)` of the innermost traceback frame in the user's code, if any.

    The user's code is a loaded target file (a module `pyfile` imported) or a helper module in the
    folder of one (a file it imports from next to it), never a file of mcd-cli (bundled targets
    included) or of an installed package. Used at the command line's boundary, so that an exception
    raised in a target's function while a run traces it is reported as the user's, not as a bug.
    """
    targets = [m for name, m in list(sys.modules.items()) if name.startswith(TARGET_MODULE_PREFIX)]
    folders = {os.path.dirname(os.path.realpath(f)) for f in (getattr(m, "__file__", None) for m in targets) if f}
    ours = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    installed = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    found = None
    while tb is not None:
        frame = tb.tb_frame
        file = os.path.realpath(frame.f_code.co_filename)
        own = str(frame.f_globals.get("__name__", "")).startswith(TARGET_MODULE_PREFIX)
        helper = os.path.dirname(file) in folders and not any(file.startswith(p + os.sep) for p in installed)
        if (own or helper) and not file.startswith(ours + os.sep):  # (a bundled target is ours)
            found = (file, frame.f_code.co_name, tb.tb_lineno)
        tb = tb.tb_next
    return found


def user_error(err: BaseException, loading: Optional[tuple[str, Any]] = None) -> Optional[str]:
    """`error in FILE, function NAME (line N): Type: message` when `err` was raised in the user's
    code (`user_frame`), else None; `top level` for code outside any function (a module being
    imported). `loading`: `(display, path)` of the target file being loaded, named as
    `(while loading DISPLAY)` when the error is in another file (a helper it imports). FILE is
    relative to the working directory when inside it.

    Example:
        >>> user_error(ValueError("not from a user's file")) is None
        True
    """
    found = user_frame(err.__traceback__)
    if found is None:
        return None
    file, function, line = found
    shown = os.path.relpath(file)
    shown = file if shown.startswith("..") else shown
    place = "top level" if function == "<module>" else f"function {function}"
    other = loading is not None and os.path.realpath(str(loading[1])) != file
    suffix = f" (while loading {loading[0]})" if other else ""
    return f"error in {shown}, {place} (line {line}): {one_line(err)}{suffix}"


def default_float() -> Any:
    """The floating dtype JAX uses now (float64 under `jax_enable_x64`, else float32)."""
    return jnp.zeros(()).dtype


def probe(log_density: LogDensity, dim: int, display: str, files: Iterable[str] = ()) -> None:
    """Traces `log_density` on an abstract point of shape `(dim,)` and checks its output.

    Args:
        log_density: the user's function of one point.
        dim: the declared dimension.
        display: how to name the target in messages (a file name).
        files: source files of the user's code, to point at the failing line.

    Raises:
        TargetError: the function cannot be traced (Python control flow on x, an exception, a
            shape mismatch with `dim`), or does not return one floating-point scalar.
    """
    files = tuple(files)
    if not callable(log_density):
        raise TargetError(
            f"{display}: log_density must be a function of one point x, got {type(log_density).__name__}"
        )

    def checked(x):
        out = log_density(x)
        if isinstance(out, (bool, np.bool_)) or not isinstance(
            out, (jax.Array, np.ndarray, np.generic, float, int)
        ):
            raise _BadOutput(type(out).__name__)
        return out

    point = jax.ShapeDtypeStruct((dim,), default_float())
    try:
        out = jax.eval_shape(checked, point)
    except _BadOutput as err:
        raise TargetError(
            f"{display}: log_density must return a number (a jax scalar), got a {err.args[0]}"
        ) from None
    except _TRACER_ERRORS as err:
        raise TargetError(
            f"{where(display, err, files)}: log_density uses the value of x in Python control flow or a "
            f"Python/numpy conversion ({type(err).__name__}); use jnp.where or jax.lax.cond instead "
            f"of if/while, and jax.numpy instead of numpy/float()"
        ) from None
    except Exception as err:  # the user's code may raise anything; report it in one line
        hint = ""
        if any(w in str(err).lower() for w in ("shape", "dimension", "broadcast", "index")):
            hint = f" (x has shape ({dim},); does dim = {dim} match the function?)"
        named = user_error(err, (display, files[0]) if files else None)
        raise TargetError(
            named + hint if named else f"{where(display, err, files)}: log_density raised {one_line(err)}{hint}"
        ) from None
    if out.shape != ():
        hint = " (sum over coordinates with jnp.sum)" if out.shape == (dim,) else ""
        raise TargetError(
            f"{display}: log_density must return one scalar per point, got shape {out.shape} "
            f"for a point of shape ({dim},){hint}"
        )
    if not jnp.issubdtype(out.dtype, jnp.floating):
        raise TargetError(
            f"{display}: log_density must return a floating-point number, got dtype {out.dtype}"
        )


def require_readable(path: Path, display: str, kind: str, suffixes: str) -> None:
    """Raises a one-line `TargetError` unless `path` is a readable file; `kind` names what the file
    should be ("target", "data") and `suffixes` the extensions it may have."""
    if path.is_dir():
        raise TargetError(f"{display} is a directory, not a {kind} file ({suffixes})")
    if not path.exists():
        raise TargetError(f"{kind} file not found: {display}")
    try:
        with path.open("rb"):
            pass
    except OSError as err:
        reason = "permission denied" if err.errno == errno.EACCES else (err.strerror or str(err))
        raise TargetError(f"cannot read {display}: {reason}") from None


def require_mapping(value: Any, display: str, should: str) -> dict:
    """`value` if it is a mapping, else a one-line `TargetError`: "`display` must `should`"."""
    if not isinstance(value, dict):
        raise TargetError(f"{display} must {should}")
    return value
