"""Loading targets from Python and YAML files, stdin and bundled names, and every bad input.

Every bad input must raise `TargetError` whose message is one line naming what is wrong. Loading
only traces the log density (`jax.eval_shape`), so these tests compile nothing.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from conftest import target_error as error_of
from conftest import write_file as write
from mcd_cli.targets import Target, load_target


MODULE_LEVEL = """\
    \"\"\"A shifted Gaussian written at module level.\"\"\"
    import jax.numpy as jnp
    from jax.scipy.stats import norm

    dim = 3
    log_z = 0.0
    initial = {"mean": 1.0, "scale": [1.0, 2.0, 3.0]}

    def log_density(x):
        return jnp.sum(norm.logpdf(x, 2.0, 1.0))
"""

MAKE_TARGET = """\
    import jax.numpy as jnp

    def make_target(dim=2, scale=1.0, centred=True, label="a"):
        shift = 0.0 if centred else 1.0
        return {
            "log_density": lambda x: -0.5 * jnp.sum(((x - shift) / scale) ** 2),
            "dim": dim,
            "log_z": dim * (0.5 * jnp.log(2 * jnp.pi) + jnp.log(scale)),  # a jax scalar is fine
            "name": f"gauss_{label}",
            "description": "a Gaussian kernel",
        }
"""


# ---------------------------------------------------------------- Python files


def test_module_level_python_file(tmp_path):
    t = load_target(str(write(tmp_path, "shifted.py", MODULE_LEVEL)))
    assert isinstance(t, Target)
    assert (t.dim, t.log_z, t.name) == (3, 0.0, "shifted")
    assert t.description == "A shifted Gaussian written at module level."
    np.testing.assert_array_equal(t.initial_mean, [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(t.initial_scale, [1.0, 2.0, 3.0])
    assert float(t.log_density(np.full(3, 2.0, np.float32))) == pytest.approx(
        -1.5 * np.log(2 * np.pi), rel=1e-6
    )
    assert t.source.endswith("shifted.py") and t.params == {}


def test_make_target_params_are_typed_by_their_defaults(tmp_path):
    path = str(write(tmp_path, "kernel.py", MAKE_TARGET))
    t = load_target(path, {"dim": "4", "scale": "2", "centred": "false", "label": "b"})
    assert t.params == {"dim": 4, "scale": 2.0, "centred": False, "label": "b"}
    assert (t.dim, t.name) == (4, "gauss_b")
    assert t.log_z == pytest.approx(4 * (0.5 * np.log(2 * np.pi) + np.log(2.0)))
    assert load_target(path).params == {"dim": 2, "scale": 1.0, "centred": True, "label": "a"}


def test_make_target_may_return_a_target(tmp_path):
    path = write(
        tmp_path,
        "returns_target.py",
        """\
        import jax.numpy as jnp
        from mcd_cli.targets import Target

        def make_target(dim=2):
            return Target.create(lambda x: -jnp.sum(x**2), dim, initial_scale=3.0, name="tt")
        """,
    )
    t = load_target(str(path), {"dim": "5"})
    assert (t.dim, t.name, t.params) == (5, "tt", {"dim": 5})
    np.testing.assert_array_equal(t.initial_scale, np.full(5, 3.0))


def test_python_file_imports_relative_to_its_folder(tmp_path):
    write(
        tmp_path,
        "helpers_for_mcd_test.py",
        "import jax.numpy as jnp\ndef quad(x):\n    return -0.5 * jnp.sum(x**2)\n",
    )
    path = write(
        tmp_path, "uses_helper.py", "from helpers_for_mcd_test import quad\ndim = 2\nlog_density = quad\n"
    )
    assert load_target(str(path)).dim == 2


def test_two_files_with_the_same_name_are_separate_modules(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one = load_target(
        str(
            write(
                tmp_path / "a",
                "t.py",
                "import jax.numpy as jnp\ndim = 1\ndef log_density(x):\n    return jnp.sum(x)\n",
            )
        )
    )
    two = load_target(
        str(
            write(
                tmp_path / "b",
                "t.py",
                "import jax.numpy as jnp\ndim = 2\ndef log_density(x):\n    return jnp.sum(x)\n",
            )
        )
    )
    assert (one.dim, two.dim) == (1, 2)


# ---------------------------------------------------------------- YAML files and stdin


def test_yaml_family_with_initial_name_and_cli_override(tmp_path):
    path = write(
        tmp_path,
        "g.yaml",
        """\
        family: normal
        params: {dim: 3, loc: 1.0, scale: 2.0, normalized: false}
        initial: {mean: 0, scale: 3}
        name: my_gauss
        description: a test
        """,
    )
    t = load_target(str(path))
    assert (t.name, t.description, t.dim) == ("my_gauss", "a test", 3)
    assert t.log_z == pytest.approx(1.5 * np.log(2 * np.pi) + 3 * np.log(2.0))
    np.testing.assert_array_equal(t.initial_scale, np.full(3, 3.0))
    t = load_target(str(path), {"dim": "5"})
    assert t.dim == 5 and t.params["dim"] == 5 and t.params["loc"] == 1.0
    assert t.log_z == pytest.approx(2.5 * np.log(2 * np.pi) + 5 * np.log(2.0))


def test_yaml_python_with_params(tmp_path):
    write(tmp_path, "kernel.py", MAKE_TARGET)
    path = write(tmp_path, "k.yaml", "python: kernel.py\nparams: {dim: 3}\nname: from_yaml\n")
    t = load_target(str(path), {"scale": "0.5"})
    assert (t.dim, t.name, t.params["scale"]) == (3, "from_yaml", 0.5)


def test_yaml_log_z_holds_only_for_the_file_params(tmp_path):
    write(
        tmp_path,
        "plain.py",
        "import jax.numpy as jnp\n"
        "def make_target(dim=2, a=1.0):\n"
        "    return {'log_density': lambda x: -a * jnp.sum(x**2), 'dim': dim}\n",
    )
    path = write(tmp_path, "p.yaml", "python: plain.py\nparams: {dim: 2}\nlog_z: 1.25\n")
    assert load_target(str(path)).log_z == 1.25
    assert load_target(str(path), {"dim": "2"}).log_z == 1.25
    assert load_target(str(path), {"a": "2.0"}).log_z is None


def test_yaml_log_z_must_agree_with_an_exact_one(tmp_path):
    path = write(tmp_path, "wrong.yaml", "family: laplace\nparams: {dim: 2}\nlog_z: 3.0\n")
    assert "exact log Z = 0.0" in error_of(str(path))


def test_stdin_yaml_and_data_paths(tmp_path, monkeypatch):
    t = load_target("-", stdin_text="family: funnel\nparams: {dim: 4}\n")
    assert (t.dim, t.log_z, t.name, t.source) == (4, 0.0, "stdin", "<stdin>")
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "d.csv", "a,b,y\n1,2,0\n2,1,1\n0,1,1\n3,1,0\n")
    path = write(tmp_path, "lr.yaml", "family: logistic_regression\nparams: {data: sub/d.csv}\n")
    t = load_target(str(path))  # data relative to the YAML file
    assert t.dim == 3 and t.log_z is None and t.params["data"] == str((tmp_path / "sub" / "d.csv").resolve())
    monkeypatch.chdir(tmp_path / "sub")
    t = load_target("-", stdin_text="family: logistic_regression\nparams: {data: d.csv, intercept: false}\n")
    assert t.dim == 2  # stdin paths are relative to the working directory


def test_bundled_name_with_params():
    t = load_target("gmm8", {"dim": "3"})
    assert (t.name, t.dim, t.log_z) == ("gmm8", 3, 0.0)
    np.testing.assert_array_equal(t.initial_scale, np.full(3, 3.0))


# ---------------------------------------------------------------- bad input: files


def test_missing_file():
    assert error_of("no/such/target.py") == "target file not found: no/such/target.py"
    assert "target file not found" in error_of("absent.yaml")


def test_unknown_bundled_name_lists_the_bundled_ones():
    message = error_of("gmm9")
    assert "no target file or bundled target named 'gmm9'" in message and "gmm8" in message


def test_directory_and_unreadable_file(tmp_path, monkeypatch):
    assert "is a directory" in error_of(str(tmp_path))
    path = write(tmp_path, "locked.yaml", "family: normal\n")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "open", refuse)  # chmod does not stop root, so refuse the read
    assert error_of(str(path)) == f"cannot read {path}: permission denied"


def test_not_python_not_yaml(tmp_path):
    assert "must be Python (.py) or YAML (.yaml, .yml), got '.txt'" in error_of(
        str(write(tmp_path, "notes.txt", "hi"))
    )
    binary = tmp_path / "blob.py"
    binary.write_bytes(b"\x7fELF\x00\x01\x02")
    assert "is not a Python file" in error_of(str(binary))
    binary_yaml = tmp_path / "blob.yaml"
    binary_yaml.write_bytes(b"\xff\xfe\x00\x01garbage")
    assert "is not a YAML text file" in error_of(str(binary_yaml))
    code = write(tmp_path, "code.yaml", "import jax\n")
    assert "must be a YAML mapping" in error_of(str(code))


def test_syntax_error_names_file_and_line(tmp_path):
    path = write(tmp_path, "bad_syntax.py", "dim = 2\n\ndef log_density(x)\n    return x\n")
    message = error_of(str(path))
    assert message.startswith(f"{path} line 3: syntax error")


def test_import_error_names_the_missing_module(tmp_path):
    path = write(tmp_path, "needs.py", "import math\nimport no_such_module_for_mcd\ndim = 2\n")
    message = error_of(str(path))
    assert f"{path} line 2" in message and "cannot import module 'no_such_module_for_mcd'" in message


def test_exception_while_importing(tmp_path):
    path = write(tmp_path, "raises_at_import.py", "dim = 2\nraise RuntimeError('no data here')\n")
    assert error_of(str(path)) == f"error in {path}, top level (line 2): RuntimeError: no data here"


def test_no_log_density_nor_make_target(tmp_path):
    path = write(tmp_path, "empty.py", "dim = 2\n")
    assert "defines neither log_density(x) (with dim) nor make_target(**params)" in error_of(str(path))
    path = write(tmp_path, "no_dim.py", "def log_density(x):\n    return x.sum()\n")
    assert "defines log_density but not dim" in error_of(str(path))


def test_non_scalar_output_reports_the_shape(tmp_path):
    path = write(tmp_path, "vector.py", "dim = 3\ndef log_density(x):\n    return -0.5 * x**2\n")
    message = error_of(str(path))
    assert "must return one scalar per point, got shape (3,)" in message and "jnp.sum" in message


def test_non_numeric_output(tmp_path):
    path = write(tmp_path, "text.py", "dim = 2\ndef log_density(x):\n    return 'high'\n")
    assert "must return a number (a jax scalar), got a str" in error_of(str(path))
    path = write(tmp_path, "none.py", "dim = 2\ndef log_density(x):\n    pass\n")
    assert "got a NoneType" in error_of(str(path))
    path = write(tmp_path, "integer.py", "dim = 2\ndef log_density(x):\n    return (x > 0).sum()\n")
    assert "must return a floating-point number, got dtype int32" in error_of(str(path))


@pytest.mark.parametrize("dim", ["0", "-3", "2.5", "'3'", "True"])
def test_dim_must_be_a_positive_integer(tmp_path, dim):
    path = write(tmp_path, "dims.py", f"dim = {dim}\ndef log_density(x):\n    return x.sum()\n")
    assert "dim must be a positive integer, got" in error_of(str(path))


def test_dim_not_matching_the_function(tmp_path):
    path = write(
        tmp_path,
        "fixed.py",
        """\
        import jax.numpy as jnp
        W = jnp.ones((5, 5))
        dim = 3
        def log_density(x):
            return -jnp.sum((W @ x) ** 2)
        """,
    )
    message = error_of(str(path))
    assert message.startswith(f"error in {path}, function log_density (line 5): TypeError")
    assert message.endswith("(x has shape (3,); does dim = 3 match the function?)")


@pytest.mark.parametrize(
    "body",
    [
        "if x[0] > 0:\n        return -jnp.sum(x**2)\n    return -jnp.sum(x**4)",
        "return -float(x[0]) ** 2",
        "return -jnp.sum(np.asarray(x) ** 2)",
        "return -jnp.sum(x[x > 0])",
    ],
)
def test_python_control_flow_on_the_traced_input(tmp_path, body):
    path = tmp_path / "branchy.py"
    path.write_text(
        f"import jax.numpy as jnp\nimport numpy as np\ndim = 2\ndef log_density(x):\n    {body}\n"
    )
    message = error_of(str(path))
    assert message.startswith(f"{path} line 5:") and "use jnp.where" in message


def test_exception_raised_by_the_users_function(tmp_path):
    path = write(
        tmp_path,
        "raiser.py",
        """\
        dim = 2
        def log_density(x):
            raise ValueError("temperature must be set first")
        """,
    )
    assert error_of(str(path)) == (
        f"error in {path}, function log_density (line 3): ValueError: temperature must be set first"
    )
    path = write(tmp_path, "mk.py", "def make_target(dim=2):\n    raise RuntimeError('boom')\n")
    assert error_of(str(path)) == f"error in {path}, function make_target (line 2): RuntimeError: boom"


# ---------------------------------------------------------------- bad input: parameters


def test_unknown_and_mistyped_parameters(tmp_path):
    path = str(write(tmp_path, "kernel.py", MAKE_TARGET))
    assert error_of(path, {"dims": "3"}) == (
        f"unknown parameter 'dims' for {path}; allowed parameters: centred, dim, label, scale"
    )
    assert error_of(path, {"dim": "three"}) == f"parameter 'dim' of {path} must be an integer, got 'three'"
    assert "must be a number, got 'x'" in error_of(path, {"scale": "x"})
    assert "must be true/false, got 'maybe'" in error_of(path, {"centred": "maybe"})
    module_level = str(write(tmp_path, "shifted.py", MODULE_LEVEL))
    assert "takes no parameters (it has no make_target), got dim" in error_of(module_level, {"dim": "3"})


def test_make_target_parameters_need_defaults(tmp_path):
    path = write(tmp_path, "nodefault.py", "def make_target(dim):\n    pass\n")
    assert "parameter 'dim' needs a default value" in error_of(str(path))


def test_yaml_parameter_of_the_wrong_type(tmp_path):
    path = write(tmp_path, "w.yaml", "family: normal\nparams: {dim: 2.5}\n")
    assert error_of(str(path)) == f"parameter 'dim' of family normal in {path} must be an integer, got 2.5"
    path = write(tmp_path, "w2.yaml", "family: normal\nparams: {dim: 2}\n")
    assert "parameter 'loc' of family normal" in error_of(str(path), {"loc": "far"})
    assert "unknown parameter 'mean' for family normal" in error_of(str(path), {"mean": "1"})


def test_family_rejects_bad_values(tmp_path):
    path = write(tmp_path, "v.yaml", "family: many_well\nparams: {dim: 3}\n")
    assert error_of(str(path)) == f"{path}: family many_well needs an even dim, got 3"
    path = write(tmp_path, "s.yaml", "family: student_t\nparams: {df: -1}\n")
    assert "parameter 'df' must be a positive number" in error_of(str(path))


# ---------------------------------------------------------------- bad input: YAML


def test_malformed_yaml_names_the_line(tmp_path):
    path = write(tmp_path, "broken.yaml", "family: normal\nparams: {dim: 2\ninitial: 3\n")
    message = error_of(str(path))
    assert message.startswith(f"{path} line 3: malformed YAML")


def test_repeated_yaml_keys_are_refused(tmp_path):
    path = write(tmp_path, "twice.yaml", "family: normal\nparams: {dim: 2, scale: 1, dim: 3}\n")
    assert error_of(str(path)) == f"{path} line 2: duplicate key 'dim' (first on line 2); keep one of the two"
    path = write(tmp_path, "twice2.yaml", "family: normal\nname: a\nname: b\n")
    assert error_of(str(path)).startswith(f"{path} line 3: duplicate key 'name' (first on line 2)")
    # a merge key followed by an override is plain YAML, not a repeat
    path = write(tmp_path, "merge.yaml", "family: normal\nbase: &b {dim: 2, scale: 1}\n")
    assert "unknown key 'base'" in error_of(str(path))
    from mcd_cli.io import safeyaml

    assert safeyaml.load("b: &b {dim: 2, scale: 1}\np: {<<: *b, dim: 3}\n")["p"] == {"dim": 3, "scale": 1}


def test_unknown_family_lists_the_allowed_ones(tmp_path):
    path = write(tmp_path, "f.yaml", "family: gausian\n")
    assert error_of(str(path)) == (
        f"{path}: unknown family 'gausian'; allowed families: funnel, gaussian_mixture, laplace, "
        "linear_regression, logistic_regression, many_well, normal, student_t"
    )


def test_yaml_schema_errors_name_the_key(tmp_path):
    path = write(tmp_path, "k.yaml", "family: normal\nparms: {dim: 2}\n")
    assert (
        "unknown key 'parms'; allowed keys: family, python, params, initial, log_z, name, description"
        in error_of(str(path))
    )
    path = write(tmp_path, "both.yaml", "family: normal\npython: x.py\n")
    assert "needs exactly one of the keys family" in error_of(str(path))
    path = write(tmp_path, "i.yaml", "family: normal\ninitial: {mean: 0, sigma: 2}\n")
    assert "unknown key 'sigma' in initial; allowed keys: mean, scale" in error_of(str(path))
    path = write(tmp_path, "i2.yaml", "family: normal\ninitial: {scale: -1}\n")
    assert "initial scale must be finite and positive" in error_of(str(path))
    path = write(tmp_path, "l.yaml", "family: normal\nlog_z: big\n")
    assert "log_z must be a finite number, got 'big'" in error_of(str(path))
    path = write(tmp_path, "p.yaml", "family: normal\nparams: [1, 2]\n")
    assert "params must be a mapping" in error_of(str(path))
    path = write(tmp_path, "py.yaml", "python: missing.py\n")
    assert "python file not found" in error_of(str(path))


def test_yaml_tags_are_refused_and_nothing_runs(tmp_path):
    marker = tmp_path / "ran"
    path = write(
        tmp_path,
        "evil.yaml",
        f"family: normal\nname: !!python/object/apply:os.system ['touch {marker}']\n",
    )
    message = error_of(str(path))
    assert message == (
        f"{path} line 2: YAML tag !!python/object/apply:os.system is not plain data; only plain YAML is "
        "accepted (nothing was executed)"
    )
    assert not marker.exists()
    assert "YAML tag !custom is not plain data" in error_of("-", stdin_text="family: !custom normal\n")


def test_empty_stdin():
    assert "no YAML text on standard input" in error_of("-", stdin_text="  \n")
    assert "no YAML text on standard input" in error_of("-")


def test_prints_in_a_target_file_go_to_stderr(tmp_path, capsys):
    path = write(
        tmp_path, "chatty.py", "print('loading')\ndim = 1\ndef log_density(x):\n    return -x.sum() ** 2\n"
    )
    load_target(str(path))
    out, err = capsys.readouterr()
    assert out == "" and "loading" in err


def test_the_examples_in_the_docs_load(tmp_path):
    docs = (Path(__file__).resolve().parents[1] / "docs" / "targets.md").read_text()
    blocks = re.findall(r"```(python|yaml)\n(.*?)```", docs, re.S)
    python = [text for kind, text in blocks if kind == "python"]
    yaml_text = next(text for kind, text in blocks if kind == "yaml")
    banana = load_target(str(write(tmp_path, "banana.py", python[0])))
    assert (banana.dim, banana.log_z, banana.initial_scale.tolist()) == (2, 0.0, [10.0, 1.0])
    funnel = load_target(str(write(tmp_path, "funnel.py", python[1])), {"dim": "4"})
    assert (funnel.dim, funnel.name) == (4, "my_funnel")
    mixture = load_target("-", stdin_text=yaml_text)
    assert (mixture.name, mixture.dim, mixture.log_z) == ("my_mixture", 20, 0.0)


@pytest.mark.parametrize("value", ["[]", "{}", "3"])
def test_family_that_is_not_a_name_is_rejected(tmp_path, value):
    path = write(tmp_path, "f.yaml", f"family: {value}\n")
    assert "unknown family" in error_of(str(path))
