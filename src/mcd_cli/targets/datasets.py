"""Reading the numeric CSV tables that the regression families are built from.

A table is a CSV file with one header row of column names and one row of numbers per observation.
The response (label) column is named by the caller, or is the last column.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from mcd_cli.targets.base import TargetError


def read_table(path: str | Path) -> tuple[list[str], np.ndarray]:
    """Reads a numeric CSV file with a header row.

    Returns:
        `(column_names, values)` with `values` of shape `(rows, columns)`, float64.

    Raises:
        TargetError: the file is missing or unreadable, empty, ragged, or holds a non-number.
    """
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except FileNotFoundError:
        raise TargetError(f"data file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as err:
        raise TargetError(f"cannot read data file {path}: {err}") from None
    rows = [r for r in rows if r]
    if len(rows) < 2:
        raise TargetError(f"data file {path} needs a header row and at least one row of numbers")
    header, body = [c.strip() for c in rows[0]], rows[1:]
    values = np.empty((len(body), len(header)))
    for i, row in enumerate(body):
        if len(row) != len(header):
            raise TargetError(
                f"{path} line {i + 2}: {len(row)} values but the header has {len(header)} columns"
            )
        try:
            values[i] = [float(v) for v in row]
        except ValueError:
            raise TargetError(f"{path} line {i + 2}: not a number in {','.join(row)[:80]!r}") from None
    if not np.all(np.isfinite(values)):
        raise TargetError(f"data file {path} holds NaN or infinite values")
    return header, values


def split_response(
    header: list[str], values: np.ndarray, column: str, path: str | Path
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Splits a table into features and the response column (the last one when `column` is "").

    Returns:
        `(features (n, p), response (n,), feature_names)`.
    """
    if column == "":
        index = len(header) - 1
    elif column in header:
        index = header.index(column)
    else:
        raise TargetError(f"no column {column!r} in {path}; columns: {', '.join(header)}")
    if len(header) < 2:
        raise TargetError(f"{path} needs at least one feature column besides the response")
    keep = [j for j in range(len(header)) if j != index]
    return values[:, keep], values[:, index], [header[j] for j in keep]
