"""Bayesian logistic regression, breast cancer (569 × 31), prior N(0, 10² I), as a NumPyro model.

The same target as the bundled `logreg_breast_cancer` (its log density is equal at every point):
the Wisconsin diagnostic breast-cancer data of ../data/breast_cancer.csv, the 30 features divided
by their standard deviation, an intercept column of ones first, label 1 = benign, and weights
w ~ N(0, 10² I). No closed form exists; `log_z` is the bundled target's reference value from long
tempered-SMC runs (standard error 0.04; see ../data/README.md).
"""

from pathlib import Path

import numpy as np
import numpyro
import numpyro.distributions as dist

PRIOR_SCALE = 10.0

_table = Path(__file__).resolve().parent.parent / "data" / "breast_cancer.csv"
_header = _table.read_text(encoding="utf-8").splitlines()[0].split(",")
_values = np.loadtxt(_table, delimiter=",", skiprows=1)
_features = np.delete(_values, _header.index("label"), axis=1)

x = np.hstack([np.ones((len(_values), 1)), _features / _features.std(axis=0)])
y = _values[:, _header.index("label")]


def model(x, y):
    w = numpyro.sample("w", dist.Normal(0.0, PRIOR_SCALE).expand([x.shape[1]]).to_event(1))
    with numpyro.plate("patients", x.shape[0]):
        numpyro.sample("y", dist.Bernoulli(logits=x @ w), obs=y)


log_z = -77.57
