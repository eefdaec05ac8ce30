"""The errors mcd-cli raises on purpose, each carrying the exit status the command line uses.

Every message is one line: what is wrong and how to fix it. Anything that is not an `McdError`
is a bug (or an error of the machine) and is reported as such, with the traceback under --debug.

| class           | exit | meaning                                                             |
| --------------- | ---- | ------------------------------------------------------------------- |
| `UsageError`    | 2    | bad input: an option, a target, a file; raised before work starts  |
| `RunFailed`     | 1    | the run started but could not produce an answer                     |
| `Unreliable`    | 3    | the run finished, but its verdict is `unreliable` and --strict was given |
| `Interrupted`   | 130  | Ctrl-C or SIGTERM; training was checkpointed                        |

`TooSlow` (a `RunFailed`) is training stopped because it could not make the updates it needed in
its time (a policy's learning pilot). `FileFailed` (a `RunFailed`) is an OS error on a user's file
found during a run: its line names the path, the operation, the OS's reason and what to do
(`os_reason`, `os_advice`). A failure that must not stop the run (a `--save` file that cannot be
written once the estimate is in hand) is `defer`red: the command line prints it after the results
are out and exits with its status.
"""

from __future__ import annotations

import errno
import os
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


class TooSlow(RunFailed):
    """Training with a time bound stopped early: at its rate it would not make the updates it needs
    in its time (`training.fit`'s `min_updates`; only a policy's learning pilot sets them)."""

    def __init__(self, updates: int, seconds: float, needed: int, allowed: float):
        super().__init__(
            f"{updates} updates in {seconds:.0f} s: at that rate fewer than {needed} in the {allowed:.0f} s allowed"
        )
        self.updates, self.seconds, self.needed, self.allowed = updates, seconds, needed, allowed


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


class FileFailed(RunFailed):
    """An OS error on a user's file during a run (exit status 1), in one line.

    Example:
        >>> import errno
        >>> str(FileFailed("r.jsonl", "append to --output", OSError(errno.ENOSPC, "No space left on device")))
        "cannot append to --output 'r.jsonl': No space left on device [ENOSPC]; free space or choose another location"
    """

    def __init__(self, path: "str | os.PathLike", operation: str, err: OSError, advice: str = ""):
        super().__init__(f"cannot {operation} '{path}': {os_reason(err)}; {advice or os_advice(err)}")
        self.path, self.operation, self.errno = str(path), operation, err.errno


def os_reason(err: OSError) -> str:
    """The OS's reason, with its symbolic name: `No space left on device [ENOSPC]`."""
    if err.errno in errno.errorcode:
        return f"{err.strerror or os.strerror(err.errno)} [{errno.errorcode[err.errno]}]"
    return str(err) or type(err).__name__


# What a user can do about an OS error, by errno (the ones a file system hands a batch job).
_ADVICE = {
    errno.ENOSPC: "free space or choose another location",
    errno.EDQUOT: "free space within your quota or choose another location",
    errno.EFBIG: "the file-size limit (ulimit -f) was reached; raise it or choose another location",
    errno.EROFS: "the file system is read-only; choose a writable location",
    errno.EACCES: "check the permissions or choose a writable location",
    errno.EPERM: "check the permissions or choose a writable location",
    errno.ENOENT: "check the path",
    errno.ENOTDIR: "check the path",
    errno.EISDIR: "give a file name, not a directory",
    errno.EIO: "the device reported an I/O error; check the disk and retry",
}


def os_advice(err: OSError) -> str:
    """What to do about `err`, in a few words."""
    return _ADVICE.get(err.errno, "check the file system and retry")


_DEFERRED: list[McdError] = []


def defer(error: McdError) -> None:
    """Records a failure that must not stop the run: the command line reports it after the results
    are printed and written, and exits with its status."""
    _DEFERRED.append(error)


def deferred() -> list[McdError]:
    """The failures deferred since the last call, each once (and forgets them)."""
    out = list({str(e): e for e in _DEFERRED}.values())
    _DEFERRED.clear()
    return out
