"""Errors carry their exit status; a bug in the project's own code is not passed off as bad input."""

import pytest
from conftest import one_line_error

from mcd_cli.io.checkpoint import CheckpointError
from mcd_cli.cli import exit_code, message
from mcd_cli.errors import Interrupted, RunFailed, Unreliable, UsageError
from mcd_cli.stats import AllWeightsNonFinite
from mcd_cli.targets import TargetError
from mcd_cli.train.loop import TrainingDiverged


@pytest.mark.parametrize(
    "error,code",
    [
        (UsageError("x"), 2),
        (TargetError("x"), 2),
        (CheckpointError("x"), 2),
        (RunFailed("x"), 1),
        (TrainingDiverged("x"), 1),
        (AllWeightsNonFinite("x"), 1),
        (Unreliable("x"), 3),
        (Interrupted(None, 3, 10, "read-only"), 130),
        (KeyboardInterrupt(), 130),
        (KeyError("x"), 1),
        (ValueError("x"), 1),
    ],
)
def test_exit_codes(error, code):
    assert exit_code(error) == code
    assert "\n" not in message(error)


def test_a_bug_in_the_loader_is_an_internal_error_not_a_usage_error(mcd, monkeypatch):
    import mcd_cli.targets

    def broken(*args, **kwargs):
        raise KeyError("family")

    monkeypatch.setattr(mcd_cli.targets, "load_target", broken)
    code, out, err = mcd(["estimate", "gmm8", "--iterations", "0"])
    assert code == 1 and out == ""
    line = one_line_error(err)
    assert "internal error" in line and "--debug" in line and "KeyError" in line
