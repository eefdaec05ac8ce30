"""Parameters typed by their defaults: text conversion, type checks, unknown keys."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcd_cli.targets import TargetError
from mcd_cli.targets.params import bind_params, declared_params, from_text


def test_text_converts_by_the_default_type():
    assert from_text("20", 2) == 20
    assert from_text("2", 1.0) == 2.0 and isinstance(from_text("2", 1.0), float)
    assert from_text("1e-3", 1.0) == 1e-3
    assert from_text("Yes", False) is True and from_text("off", True) is False
    assert from_text("abc", "x") == "abc"
    assert from_text("[1, 2]", None) == [1, 2]
    assert from_text("[[1, 0], [0, 1]]", None) == [[1, 0], [0, 1]]
    assert from_text("[3]", [1]) == [3]
    for text, default in (("2.5", 1), ("x", 1.0), ("maybe", True), ("3", [1]), ("[1", None)):
        with pytest.raises(ValueError):
            from_text(text, default)


@given(st.integers(-(10**12), 10**12))
def test_integers_round_trip(n):
    assert bind_params({"n": 0}, {"n": str(n)}, "f") == {"n": n}


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_floats_round_trip(v):
    assert bind_params({"v": 0.0}, {"v": repr(v)}, "f") == {"v": v}


def test_typed_values_are_checked():
    declared = {"dim": 2, "scale": 1.0, "flag": True, "name": "a", "extra": None}
    assert bind_params(declared, {"dim": 3, "scale": 2, "flag": False, "extra": {"k": 1}}, "f") == {
        "dim": 3,
        "scale": 2.0,
        "flag": False,
        "name": "a",
        "extra": {"k": 1},
    }
    for key, bad in (("dim", 2.5), ("dim", True), ("scale", "x"), ("flag", 1), ("name", 3)):
        with pytest.raises(TargetError, match=f"parameter '{key}' of f must be"):
            bind_params(declared, {key: bad}, "f")
    with pytest.raises(
        TargetError, match="unknown parameter 'dimm' for f; allowed parameters: dim, extra, flag, name, scale"
    ):
        bind_params(declared, {"dimm": 3}, "f")


def test_declared_params_need_defaults():
    def ok(dim=2, *, scale=1.0, **rest):
        pass

    assert declared_params(ok, "ok") == {"dim": 2, "scale": 1.0}

    def no_default(dim, scale=1.0):
        pass

    with pytest.raises(TargetError, match="parameter 'dim' needs a default value"):
        declared_params(no_default, "f")

    def star(*dims):
        pass

    with pytest.raises(TargetError, match=r"\*dims is not allowed"):
        declared_params(star, "f")
