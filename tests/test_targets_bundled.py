"""The bundled target library: what it lists, that each target loads and passes `check`, packaging."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from mcd_cli.targets import bundled_targets, check, load_target
from mcd_cli.targets.bundled import bundled_dir

ROOT = Path(__file__).resolve().parents[1]

# name -> (dim, log Z, initial scale)
EXPECTED = {
    "gauss_shift": (20, 0.0, 1.0),
    "gauss_narrow": (20, 0.0, 3.0),
    "gmm8": (20, 0.0, 3.0),
    "laplace": (20, 0.0, 1.0),
    "student_t3": (20, 0.0, 1.0),
    "funnel": (10, 0.0, 1.0),
    "many_well": (32, pytest.approx(164.6956753, abs=1e-6), 1.0),
    "nice_flow": (16, 0.0, 1.0),
    "longley_linreg": (7, pytest.approx(-14.48387, abs=1e-4), 1.0),
    "diabetes_linreg": (10, pytest.approx(-496.5845444, abs=1e-6), 1.0),
    "brownian_motion": (32, pytest.approx(1.1877491, abs=1e-6), 1.0),
    "nice_mnist": (49, 0.0, 1.0),
    "lgcp_pines": (1600, pytest.approx(501.7128015, abs=1e-6), math.sqrt(1.91)),  # data/lgcp_reference_cpu/grid40.json
}
# name -> initial mean, where it is not 0 (the prior's mean, log 126 − 1.91/2)
INITIAL_MEAN = {"lgcp_pines": math.log(126) - 1.91 / 2}


@pytest.fixture(scope="module")
def listing():
    return {item["name"]: item for item in bundled_targets()}


def test_listing_has_every_bundled_target(listing):
    assert set(EXPECTED) | {"logreg_breast_cancer", "vae_mnist"} == set(listing)
    for name, item in listing.items():
        assert set(item) == {"name", "dim", "log_z", "description", "path"}
        assert item["description"] and "\n" not in item["description"]
        assert Path(item["path"]).is_file() and Path(item["path"]).stem == name
        if name in EXPECTED:
            dim, log_z, _ = EXPECTED[name]
            assert (item["dim"], item["log_z"]) == (dim, log_z), name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bundled_target_loads_and_checks(name):
    t = load_target(name)
    dim, log_z, scale = EXPECTED[name]
    assert (t.name, t.dim, t.log_z) == (name, dim, log_z)
    np.testing.assert_allclose(t.initial_mean, np.full(dim, INITIAL_MEAN.get(name, 0.0)), rtol=1e-12, atol=0)
    np.testing.assert_array_equal(t.initial_scale, np.full(dim, scale))
    report = check(t, num_points=8)
    assert report.ok, report.problems


@pytest.mark.parametrize("name", ["gauss_shift", "gauss_narrow", "gmm8", "laplace", "student_t3"])
def test_paper_targets_take_the_dimension_as_a_parameter(name):
    t = load_target(name, {"dim": "200"})
    assert (t.dim, t.log_z, t.initial_scale.shape) == (200, 0.0, (200,))


def test_paper_target_details():
    shift = load_target("gauss_shift", {"dim": "3"})
    assert float(shift.log_density(np.full(3, 10.0, np.float32))) == pytest.approx(
        -1.5 * np.log(2 * np.pi), rel=1e-6
    )
    narrow = load_target("gauss_narrow", {"dim": "2"})
    assert narrow.params["scale"] ** 2 == pytest.approx(0.1)
    gmm = load_target("gmm8", {"dim": "500"})
    assert gmm.params | {"dim": 20} == load_target("gmm8").params
    assert (gmm.params["num_components"], gmm.params["seed"], gmm.params["scale"]) == (8, 0, 1.0)


def test_logistic_regression_reference(listing):
    t = load_target("logreg_breast_cancer")
    assert t.dim == 31
    data = bundled_dir() / "data"
    summary = json.loads((data / "reference_logreg.json").read_text())
    assert t.log_z == pytest.approx(summary["log_z"], abs=1e-9)
    # The shipped value is the importance-sampling estimate, and a second method agrees with it.
    check, smc = summary["cross_check"], summary["mcd_smc"]
    assert t.log_z == pytest.approx(round(check["log_z"], 2), abs=1e-9) and check["pareto_k"] < 0.7
    assert abs(smc["log_z"] - check["log_z"]) <= 2 * math.hypot(smc["log_z_stderr"], check["log_z_stderr"])
    assert summary["laplace_log_z"] < t.log_z  # the posterior is skewed: Laplace is close but low
    assert listing["logreg_breast_cancer"]["log_z"] == t.log_z
    # Changing the model drops the reference value.
    assert load_target("logreg_breast_cancer", {"prior_scale": "5"}).log_z is None
    table = np.loadtxt(data / "breast_cancer.csv", delimiter=",", skiprows=1)
    assert table.shape == (569, 31) and set(np.unique(table[:, -1])) == {0.0, 1.0}


def test_pyproject_lists_every_package():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {
        ".".join(p.relative_to(ROOT / "src").parts)
        for p in (ROOT / "src").rglob("*")
        if p.is_dir() and p.name != "__pycache__" and any(p.glob("*.py"))
    }
    assert found <= listed, f"add {sorted(found - listed)} to [tool.setuptools] packages in pyproject.toml"
    assert config["package-dir"]["mcd_cli._bundled"] == "targets"


def _venv(tmp_path: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(tmp_path / "venv")], check=True
    )
    return tmp_path / "venv" / "bin" / "python"


LIST = (
    "import mcd_cli.targets as t, mcd_cli.targets.bundled as b;"
    "print(b.bundled_dir()); print(sorted(x['name'] for x in t.bundled_targets()))"
)


@pytest.mark.slow
@pytest.mark.parametrize("editable", [True, False])
def test_bundled_targets_resolve_after_install(tmp_path, editable):
    """A copy of the repository, installed editable or as a wheel, finds the bundled targets."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    copy = tmp_path / "repo"
    for name in files:
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            (copy / name).write_bytes((ROOT / name).read_bytes())
    python = _venv(tmp_path)
    target = ["-e", str(copy)] if editable else [str(copy)]
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", *target], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [python, "-c", LIST], cwd=tmp_path, capture_output=True, text=True, env=env, check=True
    ).stdout
    where, names = out.splitlines()
    if editable:
        assert Path(where) == copy / "targets"
    else:
        assert re.search(r"site-packages/mcd_cli/_bundled$", where), where
    assert "'gmm8'" in names and "'logreg_breast_cancer'" in names and "'nice_flow'" in names
