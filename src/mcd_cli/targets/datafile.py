"""Reading a data file (`--data`) into named arrays, which are bound to a target's data arguments.

Three formats, chosen by the file's extension:

* `.npz` (`numpy.savez`): one array per name, kept as stored (object arrays are refused);
* `.json`: one object mapping each name to a number or a (nested, rectangular) list of numbers;
* `.csv`: a header row of names and one row per observation; each column is a 1-D array named by
  its header. Columns named `x[0]`, `x[1]`, …, `x[k-1]` are gathered, in index order, into one
  2-D array `x` of shape `(rows, k)` (a design matrix). A column whose every value is written as
  an integer is read as int64, any other as float64.

Every failure is a `TargetError` with a one-line message naming the file.
"""

from __future__ import annotations

import csv
import json
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from mcd_cli.targets.base import TargetError
from mcd_cli.targets.validate import require_mapping, require_readable

DATA_SUFFIXES = (".npz", ".csv", ".json")

_INDEXED = re.compile(r"^(?P<name>.+)\[(?P<index>\d+)\]$")


def _array(value: Any, name: str, display: str) -> np.ndarray:
    """A numeric (or boolean) array, or a one-line error naming the entry."""
    try:
        array = np.asarray(value)
    except ValueError:
        raise TargetError(f"{display}: {name!r} is not a rectangular array (rows of unequal length)") from None
    if array.dtype == object or not (
        np.issubdtype(array.dtype, np.number) or np.issubdtype(array.dtype, np.bool_)
    ):
        raise TargetError(f"{display}: {name!r} must hold numbers, got {array.dtype} values")
    if np.issubdtype(array.dtype, np.complexfloating):
        raise TargetError(f"{display}: {name!r} must hold real numbers, got complex values")
    if np.issubdtype(array.dtype, np.floating) and not np.all(np.isfinite(array)):
        raise TargetError(f"{display}: {name!r} holds NaN or infinite values")
    return array


def _read_npz(path: Path, display: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as archive:
            names = list(archive.files)
            arrays = {}
            for name in names:
                try:
                    arrays[name] = archive[name]
                except ValueError:
                    raise TargetError(
                        f"{display}: {name!r} is an object array; store numeric arrays only"
                    ) from None
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as err:
        raise TargetError(f"{display} is not a readable .npz file ({err})") from None
    return {name: _array(value, name, display) for name, value in arrays.items()}


def _read_json(path: Path, display: str) -> dict[str, np.ndarray]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise TargetError(f"{display} is not a JSON text file (it is not UTF-8 text)") from None
    except json.JSONDecodeError as err:
        raise TargetError(f"{display} line {err.lineno}: not valid JSON: {err.msg}") from None
    value = require_mapping(value, display, 'hold one JSON object of name -> array, e.g. {"y": [1, 0, 1]}')
    return {str(name): _array(v, str(name), display) for name, v in value.items()}


def _column(tokens: list[str], name: str, display: str) -> np.ndarray:
    try:
        return np.array([int(t) for t in tokens], dtype=np.int64)
    except ValueError:
        pass
    try:
        values = np.array([float(t) for t in tokens], dtype=np.float64)
    except ValueError:
        bad = next(t for t in tokens if not _is_float(t))
        raise TargetError(f"{display}: column {name!r} holds {bad!r}, which is not a number") from None
    return _array(values, name, display)


def _is_float(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _read_csv(path: Path, display: str) -> dict[str, np.ndarray]:
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = [row for row in csv.reader(f) if row]
    except UnicodeDecodeError:
        raise TargetError(f"{display} is not a CSV text file (it is not UTF-8 text)") from None
    if len(rows) < 2:
        raise TargetError(f"{display} needs a header row of names and at least one row of numbers")
    header = [c.strip() for c in rows[0]]
    for i, row in enumerate(rows[1:]):
        if len(row) != len(header):
            raise TargetError(
                f"{display} line {i + 2}: {len(row)} values but the header has {len(header)} names"
            )
    if any(not h for h in header):
        raise TargetError(f"{display}: the header row has an empty column name")
    duplicate = next((h for h in header if header.count(h) > 1), None)
    if duplicate is not None:
        raise TargetError(f"{display}: column {duplicate!r} appears twice in the header row")
    columns = {h: _column([row[j].strip() for row in rows[1:]], h, display) for j, h in enumerate(header)}
    out: dict[str, np.ndarray] = {}
    indexed: dict[str, dict[int, np.ndarray]] = {}
    for h, column in columns.items():
        match = _INDEXED.match(h)
        if match is None:
            out[h] = column
        else:
            indexed.setdefault(match["name"], {})[int(match["index"])] = column
    for name, parts in indexed.items():
        if name in out:
            raise TargetError(f"{display}: {name!r} is both a column and the name of indexed columns {name}[j]")
        missing = sorted(set(range(len(parts))) - set(parts))
        if missing:
            raise TargetError(
                f"{display}: columns {name}[0] … {name}[{len(parts) - 1}] are needed for a {len(parts)}-column "
                f"array {name!r}; {name}[{missing[0]}] is missing"
            )
        out[name] = np.stack([parts[j] for j in range(len(parts))], axis=1)
    return out


def read_data(path: str | Path) -> dict[str, np.ndarray]:
    """Reads a `.npz`, `.csv` or `.json` data file into `{name: array}`.

    Args:
        path: the file. Its extension picks the format (see the module docstring).

    Returns:
        One numpy array per name, in the file's order.

    Raises:
        TargetError: the file is missing or unreadable, has another extension, or its content is not
            named numeric arrays; the message is one line.

    Example:
        >>> import pathlib, tempfile
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (folder / "d.csv").write_text("x[0],x[1],y\\n1.5,2,0\\n0.5,1,1\\n")
        >>> data = read_data(folder / "d.csv")
        >>> data["x"].shape, data["y"].dtype.name
        ((2, 2), 'int64')
    """
    path = Path(path).expanduser()
    display = str(path)
    if path.suffix.lower() not in DATA_SUFFIXES:
        raise TargetError(
            f"{display}: a data file must be .npz, .csv or .json, got {path.suffix or 'no extension'!r}"
        )
    require_readable(path, display, "data", ".npz, .csv or .json")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        data = _read_npz(path, display)
    elif suffix == ".json":
        data = _read_json(path, display)
    else:
        data = _read_csv(path, display)
    if not data:
        raise TargetError(f"{display} holds no arrays")
    return data
