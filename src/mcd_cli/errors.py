"""The errors mcd-cli raises on purpose, each carrying the exit status the command line uses.

Every message is one line: what is wrong and how to fix it. Anything that is not an `McdError`
is a bug (or an error of the machine) and is reported as such, with the traceback under --debug.

| class           | exit | meaning                                                             |
| --------------- | ---- | ------------------------------------------------------------------- |
| `UsageError`    | 2    | bad input: an option, a target, a file; raised before work starts  |
| `RunFailed`     | 1    | the run started but could not produce an answer                     |
| `Unreliable`    | 3    | the run finished, but its verdict is `unreliable` and --strict was given |
| `Interrupted`   | 130  | Ctrl-C or SIGTERM; training was checkpointed                        |
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional


class McdError(Exception):
    """Base of the errors mcd-cli raises on purpose."""

    exit_code = 1


class UsageError(McdError, ValueError):
    """Input that cannot work (exit status 2)."""

    exit_code = 2


class RunFailed(McdError, RuntimeError):
    """A run that started but could not produce an answer (exit status 1)."""

    exit_code = 1


class Unreliable(McdError):
    """An estimate whose verdict is `unreliable`, under --strict (exit status 3).

    Raised after the record was written and printed, so nothing is lost.
    """

    exit_code = 3


class Interrupted(McdError):
    """Ctrl-C (or SIGTERM) during a run; the training state was saved at `path` (None if not)."""

    exit_code = 130

    def __init__(self, path: Optional[Path], iteration: int, total: int, reason: str = ""):
        super().__init__(f"interrupted at iteration {iteration} of {total}")
        self.path, self.iteration, self.total, self.reason = path, iteration, total, reason
