"""Files that must survive crashes and full disks: atomic writes, all-or-nothing appends, and
checks that a path can be written before any work starts.

A whole file (a parameter file, a checkpoint, a figure, posterior draws) is written atomically: it
goes to a temporary file in the destination's directory, is flushed to disk, and then replaces the
destination with `os.replace`; a crash or a full disk mid-write leaves the previous file intact and
no temporary file behind. Result lines are appended all or nothing on an `O_APPEND` descriptor
under an exclusive `flock`: concurrent writers never interleave, a failed append is cut back off,
and the fragment a killed writer left is cut off by the next append (docs/reliability.md).
`checkpoint` builds the parameter and checkpoint archives on top of these.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "results.jsonl")
    >>> append_line(path, '{"log_z": 0.5}'), append_line(path, '{"log_z": 0.25}')
    (0, 0)
    >>> open(path).read().splitlines()
    ['{"log_z": 0.5}', '{"log_z": 0.25}']
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from mcd_cli.errors import UsageError

try:
    import fcntl
except ImportError:  # not on Windows; O_APPEND alone still keeps single writes whole there
    fcntl = None


class CheckpointError(UsageError):
    """A parameter, checkpoint or output file that cannot be used. The message is one line."""


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Writes `data` to `path` so that readers see either the old file or the whole new one.

    On any failure (a full disk at the write, the fsync or the rename; a signal) the temporary file
    is removed, `path` is as it was, and the `OSError` names `path`.
    """
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as err:
        raise _named(err, path)
    try:
        try:
            _write_all(fd, data)
            _fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as err:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(err, OSError):
            raise _named(err, path)
        raise
    _fsync_dir(path.parent)


def _named(err: OSError, path: "str | os.PathLike") -> OSError:
    """`err`, naming `path` when it names no file (errors of `write` and `fsync` name none)."""
    if err.filename is None or str(err.filename).endswith(".tmp"):
        err.filename = str(path)
    return err


def _write_all(fd: int, data: bytes) -> None:
    """Writes all of `data` (a write may be short: a signal, a file-size limit)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync(fd: int) -> None:
    """`os.fsync`, except where the file system has none (a full disk or an I/O error is raised)."""
    try:
        os.fsync(fd)
    except OSError as err:
        if err.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise


def _tail(fd: int, start: int) -> bytes:
    """The file's bytes from `start` on (a NUL, which no text line starts with, when unreadable)."""
    try:
        return os.pread(fd, max(0, os.fstat(fd).st_size - start), start)
    except OSError:
        return b"\0"


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _open_for_append(path: str | os.PathLike) -> int:
    """A descriptor for appending that can also read a regular file's end; write-only where reading
    is refused, and for a pipe or a terminal (a reader end would keep a closed pipe from failing)."""
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        regular = True  # (created here, or failing at the open below)
    if regular:
        try:
            return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        except PermissionError:
            pass
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)


def _lock(fd: int) -> bool:
    """Takes the exclusive lock; False where the platform or the file system has none."""
    if fcntl is None:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:  # a file system without locks: O_APPEND still keeps one write whole
        return False
    return True


def _cut_fragment(fd: int, size: int) -> int:
    """Cuts a last line without its newline (what a writer killed mid-write leaves) back off the
    file; the bytes cut (0 when the file ends in a newline, or cannot be read)."""
    if size == 0:
        return 0
    try:
        if os.pread(fd, 1, size - 1) == b"\n":
            return 0
        end = size
        while end > 0:
            begin = max(0, end - 65536)
            newline = os.pread(fd, end - begin, begin).rfind(b"\n")
            if newline >= 0:
                end = begin + newline + 1
                break
            end = begin
        os.ftruncate(fd, end)
        _fsync(fd)
    except OSError:  # write-only, or the file system refuses: append after it as before
        return 0
    return size - end


def append_line(path: str | os.PathLike, line: str) -> int:
    """Appends one line (a newline is added) to `path`, creating it if needed: all of it or nothing.

    Under an exclusive `flock` (where the platform has one), so that processes appending to the same
    file at the same time (array jobs on a cluster) never interleave their lines:

    - a last line without its newline — the fragment of a writer killed mid-write, which cannot
      clean up after itself — is first cut back off;
    - the line is written on an `O_APPEND` descriptor and fsynced; on any failure (a full disk, a
      quota, a file-size limit, an I/O error, a signal) the file is truncated back to its length
      before the append, so nothing else in it changes, and the error is raised.

    Returns:
        The number of bytes of a killed writer's fragment that were cut off (0 almost always).

    Raises:
        OSError: the line could not be written (it is not in the file); the error names `path`.
    """
    data = (line.rstrip("\n") + "\n").encode("utf-8")
    try:
        fd = _open_for_append(path)
    except OSError as err:
        raise _named(err, path)
    try:
        locked = _lock(fd)
        regular = stat.S_ISREG(os.fstat(fd).st_mode)  # not a pipe, a terminal or /dev/full
        cut = _cut_fragment(fd, os.fstat(fd).st_size) if regular and locked else 0
        size = os.fstat(fd).st_size if regular else 0
        try:
            _write_all(fd, data)
            if regular:
                _fsync(fd)
        except BaseException as err:
            # Under the lock nobody else appended since; without it, only if what follows is ours.
            if regular and (locked or data.startswith(_tail(fd, size))):
                try:
                    os.ftruncate(fd, size)
                except OSError:
                    pass
            if isinstance(err, OSError):
                raise _named(err, path)
            raise
        return cut
    finally:
        os.close(fd)  # closing releases the lock


def ensure_writable(path: str | os.PathLike, what: str) -> Path:
    """Checks, without changing anything, that a file can be written at `path`.

    Used before any training starts, so that a run never fails at the very end because its
    results have nowhere to go. The check really tries: it opens an existing file for appending,
    or creates and removes a probe file in the directory (permission bits alone mislead root).

    Raises:
        CheckpointError: with one line naming the problem and the fix.
    """
    p = Path(path)
    if str(path) == "" or p.is_dir():
        raise CheckpointError(f"{what} '{path}' is a directory; give a file name")
    parent = p.parent
    if not parent.is_dir():
        raise CheckpointError(
            f"cannot write {what} '{path}': directory '{parent}' does not exist; create it first"
        )
    try:
        if p.exists():
            os.close(os.open(p, os.O_WRONLY | os.O_APPEND))
        else:
            fd, probe = tempfile.mkstemp(dir=parent, prefix=".mcd-probe-")
            os.close(fd)
            os.unlink(probe)
    except OSError as err:
        raise CheckpointError(
            f"cannot write {what} '{path}' ({err.strerror or err}); choose a writable location"
        ) from None
    return p


def ensure_directory(path: str | os.PathLike, what: str) -> Path:
    """Creates directory `path` if needed and checks that files can be written in it."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise CheckpointError(f"{what} '{path}' exists and is not a directory; choose another path")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise CheckpointError(
            f"cannot create {what} '{path}' ({err.strerror or err}); choose a writable location"
        ) from None
    ensure_writable(p / "probe", what)
    return p
