"""One-off script: copies the two data sets the bundled regression targets use into this folder.

Run once, with scikit-learn and statsmodels installed (they ship the data; nothing is downloaded):

    python targets/data/extract_data.py

It writes
    breast_cancer.csv  Wisconsin diagnostic breast cancer (569 rows, 30 features, `label`),
                       from scikit-learn's bundled copy (sklearn/datasets/data/breast_cancer.csv);
                       label 1 = benign, 0 = malignant, as in `sklearn.datasets.load_breast_cancer`.
    longley.csv        Longley (1967) macroeconomic data (16 rows), from statsmodels' bundled copy
                       (statsmodels/datasets/longley/longley.csv); the response TOTEMP is the last column.

Values are written exactly as the packages hold them (shortest round-trip float text). Sources and
licences are in README.md next to this script.
"""

from __future__ import annotations

import csv
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _write(path: Path, header: list[str], rows) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        for row in rows:
            writer.writerow([repr(float(v)) if not float(v).is_integer() else str(int(v)) for v in row])
    print(f"wrote {path} ({len(header)} columns)")


def breast_cancer() -> None:
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    header = [name.replace(" ", "_") for name in data.feature_names] + ["label"]
    rows = [list(x) + [y] for x, y in zip(data.data, data.target, strict=True)]
    assert len(rows) == 569 and len(header) == 31
    _write(HERE / "breast_cancer.csv", header, rows)


def longley() -> None:
    from statsmodels.datasets import longley as source

    frame = source.load_pandas().data
    columns = ["GNPDEFL", "GNP", "UNEMP", "ARMED", "POP", "YEAR", "TOTEMP"]
    assert len(frame) == 16
    _write(HERE / "longley.csv", columns, frame[columns].to_numpy())


if __name__ == "__main__":
    breast_cancer()
    longley()
