"""Posterior draws in a file (`--posterior`): `.npz` with numpy, `.nc` with ArviZ's own converter.

The draws are a run's final SMC populations, each resampled to equal weights and mapped to the
user's named values (`run.draws`, carried by the record as `RunRecord.draws`): `{name: (chains,
draws, ...)}`, one chain per population. The file holds the whole result: the draws, and as
attributes the estimate, its standard error, the verdict, the settings and the JSON record.

- `.npz`: one array per variable, shape `(chains, draws, ...)`, and `__attrs__`, a JSON string of
  the attributes (`numpy.load(path)`; `read_npz` gives both back).
- `.nc`: an ArviZ `InferenceData` with a `posterior` group (dims `chain`, `draw`, then the
  variable's own), made by `arviz.from_dict` and written by its `to_netcdf`; the attributes are
  the file's own (`idata.attrs`, its root group), those that are not numbers or strings (lists,
  mappings) as JSON strings, and a missing standard error as NaN. ArviZ is an optional extra (`pip install
  'mcd-cli[posterior]'`, ArviZ 0.x: the InferenceData layout); `require` is called before any work.

Files are written atomically: a temporary file in the destination's directory, then `os.replace`.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "draws.npz")
    >>> rec = {"log_z": -1.5, "log_z_stderr": 0.01, "status": "ok", "reasons": [], "seed": 0, "config": {}}
    >>> write(path, {"x": np.zeros((2, 3, 1))}, rec)
    >>> draws, attrs = read_npz(path)
    >>> draws["x"].shape, attrs["log_z"], attrs["status"], attrs["chains"]
    ((2, 3, 1), -1.5, 'ok', 2)
"""

from __future__ import annotations

import io
import json
import math
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from mcd_cli.errors import UsageError
from mcd_cli.run.draws import DRAWS_STREAM

FORMATS = (".npz", ".nc")
ATTRS_KEY = "__attrs__"  # the .npz entry holding the attributes as JSON
INSTALL_HINT = "pip install 'mcd-cli[posterior]'"
HOW = (
    "each SMC population's final weighted particles, resampled to equal weights by systematic resampling "
    f"(population j with key fold_in(fold_in(estimation key, {DRAWS_STREAM:#x}), j)) and mapped to the target's "
    "own variables; one chain per population; approximate draws whose quality follows the verdict"
)


def check_path(path: "str | os.PathLike") -> None:
    """Usage error unless `path` names a .npz or .nc file that can be written (and, for .nc, ArviZ
    is installed): called before any work starts."""
    from mcd_cli.io import files

    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise UsageError(f"--posterior '{path}': give a file ending in .nc (ArviZ) or .npz (numpy)")
    files.ensure_writable(Path(path), "--posterior file")
    if suffix == ".nc":
        require()


def require() -> Any:
    """The `arviz` module (0.x), or a one-line UsageError naming the extra (or the .npz way)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # ArviZ 0.23 announces its 1.0 refactor on import
            import arviz
    except ImportError:
        raise UsageError(
            f"--posterior FILE.nc needs ArviZ; install it with: {INSTALL_HINT} (or write FILE.npz, which needs numpy only)"
        ) from None
    if int(str(arviz.__version__).split(".")[0]) >= 1:
        raise UsageError(
            f"--posterior FILE.nc is written with ArviZ 0.x (InferenceData), but ArviZ {arviz.__version__} is "
            f"installed; install 'arviz<1' ({INSTALL_HINT}) or write FILE.npz"
        )
    return arviz


def attributes(rec: Mapping[str, Any], draws: Mapping[str, np.ndarray]) -> dict:
    """What the file says about the draws: the estimate, its SE, the verdict, the seed, the
    settings (`config`, which reproduces the run), how the draws were made, and the JSON record.

    Example:
        >>> rec = {"log_z": 0.1, "log_z_stderr": None, "status": "unreliable", "reasons": ["r"], "seed": 3, "config": {}}
        >>> a = attributes(rec, {"x": np.zeros((4, 8, 2))})
        >>> a["log_z_stderr"], a["chains"], a["draws"], a["variables"]
        (None, 4, 8, ['x'])
    """
    first = next(iter(draws.values()))
    return {
        "log_z": rec.get("log_z"),
        "log_z_stderr": rec.get("log_z_stderr"),
        "status": rec.get("status"),
        "reasons": list(rec.get("reasons") or ()),
        "seed": rec.get("seed"),
        "target": rec.get("target"),
        "label": rec.get("label"),
        "chains": int(first.shape[0]),
        "draws": int(first.shape[1]),
        "variables": list(draws),
        "method": HOW,
        "mcd_cli_version": rec.get("version"),
        "config": rec.get("config"),
        "record": json.dumps(rec, allow_nan=False),
    }


def write(path: "str | os.PathLike", draws: Mapping[str, np.ndarray], rec: Mapping[str, Any]) -> None:
    """Writes `draws` (`{name: (chains, draws, ...)}`) with the record `rec`'s attributes to
    `path`, .npz or .nc by its suffix, atomically. Raises OSError when the file cannot be written."""
    from mcd_cli.io import files

    path = Path(path)
    attrs = attributes(rec, draws)
    if path.suffix.lower() == ".npz":
        arrays = {name: np.asarray(v) for name, v in draws.items()}
        arrays[ATTRS_KEY] = np.array(json.dumps(attrs, allow_nan=False))
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        files.atomic_write_bytes(path, buffer.getvalue())
        return
    arviz = require()
    data = arviz.from_dict(posterior={name: np.asarray(v) for name, v in draws.items()}, attrs=netcdf_attrs(attrs))
    _replace(path, lambda tmp: data.to_netcdf(str(tmp)))


def netcdf_attrs(attrs: Mapping[str, Any]) -> dict:
    """Attributes as netCDF holds them: numbers and strings as they are, None as NaN, anything else
    (lists, mappings) as a JSON string.

    Example:
        >>> netcdf_attrs({"log_z_stderr": None, "seed": 0, "reasons": ["a"], "status": "ok"})
        {'log_z_stderr': nan, 'seed': 0, 'reasons': '["a"]', 'status': 'ok'}
    """
    out: dict = {}
    for key, value in attrs.items():
        if value is None:
            out[key] = math.nan
        elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
            out[key] = value
        else:
            out[key] = json.dumps(value, allow_nan=False)
    return out


def read_npz(path: "str | os.PathLike") -> tuple[dict[str, np.ndarray], dict]:
    """The draws and the attributes of a .npz file `write` made."""
    with np.load(path, allow_pickle=False) as f:
        draws = {name: f[name] for name in f.files if name != ATTRS_KEY}
        attrs = json.loads(str(f[ATTRS_KEY]))
    return draws, attrs


def _replace(path: Path, write_to: Callable[[Path], None]) -> None:
    """`write_to(tmp)` on a temporary file beside `path`, flushed to disk, then moved onto `path`;
    on any failure the temporary file is removed and `path` is as it was."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write_to(Path(tmp))
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
