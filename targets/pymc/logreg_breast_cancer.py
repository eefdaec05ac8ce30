"""Bayesian logistic regression, breast cancer (569 × 31), prior N(0, 10² I), as a PyMC model.

The same target as the bundled `logreg_breast_cancer` and `../numpyro/logreg_breast_cancer.py`
(the log density is equal at every point): the Wisconsin diagnostic breast-cancer data of
../data/breast_cancer.csv, the 30 features divided by their standard deviation, an intercept column
of ones first, label 1 = benign, weights w ~ N(0, 10² I). No closed form exists; `log_z` is the
bundled target's reference (importance sampling in float64, −77.5685 ± 0.0031, checked by tempered
SMC; ../data/README.md).
"""

from pathlib import Path

import numpy as np
import pymc as pm

PRIOR_SCALE = 10.0

_table = Path(__file__).resolve().parent.parent / "data" / "breast_cancer.csv"
_header = _table.read_text(encoding="utf-8").splitlines()[0].split(",")
_values = np.loadtxt(_table, delimiter=",", skiprows=1)
_features = np.delete(_values, _header.index("label"), axis=1)

x = np.hstack([np.ones((len(_values), 1)), _features / _features.std(axis=0)])
y = _values[:, _header.index("label")]

with pm.Model() as model:
    w = pm.Normal("w", 0.0, PRIOR_SCALE, shape=x.shape[1])
    pm.Bernoulli("y", logit_p=pm.math.dot(x, w), observed=y)

log_z = -77.57
