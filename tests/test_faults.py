"""Nothing lost when the machine misbehaves: full disks, I/O errors, file-size limits, signals.

Faults are injected where the files are written: `checkpoint`'s calls of `os.open`, `os.write`,
`os.fsync`, `os.replace` and `tempfile.mkstemp` are made to fail (ENOSPC, EIO) at each point of an
append, an atomic save (checkpoint, --save, --plot), and real kernel errors are provoked without
root (`/dev/full`, RLIMIT_FSIZE). Each test asserts what is on disk afterwards — the previous bytes
intact, no partial file, no temporary file — and the exit status and the one line on stderr.
The randomized SIGKILL campaign is a benchmark: `python benchmarks/run.py faults`.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from conftest import NO_TRAIN, TINY, records

from mcd_cli.io import checkpoint
from mcd_cli.io import files
from mcd_cli.cli import message
from mcd_cli.cli import output as out
from mcd_cli.errors import RunFailed

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


class FaultyOs(types.ModuleType):
    """`os` as `checkpoint` sees it, except that call number `at` (from 0) of `name` fails with
    `error` — after writing half of its data first when `half` (a short write, then the error) —
    for files whose name contains `only`."""

    def __init__(self, name: str, at: int = 0, error: BaseException = ENOSPC, half: bool = False, only: str = ""):
        super().__init__("os")
        self.name, self.at, self.error, self.half, self.only = name, at, error, half, only
        self.calls, self.failed = 0, 0

    def __getattr__(self, attr):
        return getattr(os, attr)

    def _matches(self, args) -> bool:
        if not self.only:  # (a write names no file: `only` is for open and replace)
            return True
        return any(self.only in str(a) for a in args if isinstance(a, (str, os.PathLike)))

    def _call(self, real, *args):
        if not self._matches(args):
            return real(*args)
        number, self.calls = self.calls, self.calls + 1
        if number < self.at:
            return real(*args)
        if self.half and number == self.at:  # the first half goes to disk, the rest fails next call
            fd, data = args
            return real(fd, bytes(data[: max(1, len(data) // 2)]))
        self.failed += 1
        raise type(self.error)(*self.error.args)  # a fresh one, as the kernel's are

    def open(self, *args):
        return self._call(os.open, *args) if self.name == "open" else os.open(*args)

    def write(self, *args):
        return self._call(os.write, *args) if self.name == "write" else os.write(*args)

    def fsync(self, *args):
        return self._call(os.fsync, *args) if self.name == "fsync" else os.fsync(*args)

    def replace(self, *args):
        return self._call(os.replace, *args) if self.name == "replace" else os.replace(*args)


def inject(monkeypatch, name: str, **kwargs) -> FaultyOs:
    faulty = FaultyOs(name, **kwargs)
    monkeypatch.setattr(files, "os", faulty)
    return faulty


def lines_of(n: int) -> bytes:
    """A results file already holding `n` whole records."""
    return b"".join(json.dumps({"seed": i, "log_z": -0.1 * i, "pad": "x" * 40}).encode() + b"\n" for i in range(n))


# --------------------------------------------------------------------------------------------
# Appends: all or nothing, at every point


APPEND_FAULTS = {
    "open": dict(name="open"),
    "first write": dict(name="write"),
    "mid write (short write, then ENOSPC)": dict(name="write", half=True),
    "mid write EIO": dict(name="write", half=True, error=OSError(errno.EIO, "Input/output error")),
    "fsync EIO": dict(name="fsync", error=OSError(errno.EIO, "Input/output error")),
    "Ctrl-C mid write": dict(name="write", half=True, error=KeyboardInterrupt()),
}


@pytest.mark.parametrize("fault", APPEND_FAULTS, ids=list(APPEND_FAULTS))
def test_a_failed_append_leaves_the_file_byte_identical(tmp_path, monkeypatch, fault):
    path = tmp_path / "results.jsonl"
    path.write_bytes(lines_of(200))
    before = path.read_bytes()
    spec = APPEND_FAULTS[fault]
    inject(monkeypatch, **spec)
    with pytest.raises(type(spec.get("error", ENOSPC))) as raised:
        files.append_line(path, json.dumps({"seed": 999, "pad": "y" * 5000}))
    monkeypatch.undo()
    assert path.read_bytes() == before
    if isinstance(raised.value, OSError):
        assert raised.value.filename == str(path)  # the error names the file
    files.append_line(path, '{"seed": 1000}')  # the next append works and starts a line
    assert path.read_bytes() == before + b'{"seed": 1000}\n'


def test_an_append_cuts_off_the_fragment_a_killed_writer_left(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(lines_of(3) + b'{"seed": 7, "log_z": -0.')  # a writer killed mid-write
    assert files.append_line(path, '{"seed": 8}') == len(b'{"seed": 7, "log_z": -0.')
    assert path.read_bytes() == lines_of(3) + b'{"seed": 8}\n'
    assert files.append_line(path, '{"seed": 9}') == 0
    path.write_bytes(b"no newline at all")
    assert files.append_line(path, "{}") == len(b"no newline at all") and path.read_bytes() == b"{}\n"


def test_output_warns_when_it_cuts_a_fragment(tmp_path, capsys):
    path = tmp_path / "results.jsonl"
    path.write_bytes(lines_of(2) + b'{"seed"')
    out.append({"output": path}, {"seed": 3})
    assert "partial line (7 bytes" in capsys.readouterr().err
    assert [json.loads(x)["seed"] for x in path.read_text().splitlines()] == [0, 1, 3]


@pytest.mark.parametrize("as_json", [False, True])
def test_a_failed_output_append_puts_the_record_on_stdout_or_stderr(tmp_path, monkeypatch, capsys, as_json):
    path = tmp_path / "results.jsonl"
    path.write_bytes(lines_of(200))
    before = path.read_bytes()
    inject(monkeypatch, "write", half=True)
    with pytest.raises(RunFailed) as raised:
        out.append({"output": path, "json": as_json}, {"seed": 42, "log_z": 1.5})
    assert path.read_bytes() == before
    captured = capsys.readouterr()
    rescued = captured.err if as_json else captured.out  # stdout, unless it carries --json lines
    assert json.loads(rescued.strip().splitlines()[-1]) == {"seed": 42, "log_z": 1.5}
    text = message(raised.value)
    assert str(path) in text and "No space left on device" in text and "unchanged" in text
    assert ("stderr" if as_json else "stdout") in text and "\n" not in text


def test_dev_full_is_a_real_full_disk():
    with pytest.raises(OSError) as raised:
        files.append_line("/dev/full", '{"a": 1}')
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == "/dev/full"


_UNDER_LIMIT = """
import resource, sys
from mcd_cli.io import checkpoint
from mcd_cli.io import files
path, limit, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
try:
    if mode == "append":
        files.append_line(path, "z" * 5000)
    else:
        files.atomic_write_bytes(path, b"z" * 5000)
except OSError as err:
    print(err.errno, err.filename)
"""


@pytest.mark.parametrize("mode", ["append", "atomic"])
def test_a_file_size_limit_leaves_the_file_as_it_was(tmp_path, mode):
    """RLIMIT_FSIZE (`ulimit -f`): the kernel writes up to the limit, then refuses with EFBIG."""
    path = tmp_path / "results.jsonl"
    path.write_bytes(lines_of(20))
    before = path.read_bytes()
    done = subprocess.run(
        [sys.executable, "-c", _UNDER_LIMIT, str(path), str(len(before) + 1000), mode],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(errno.EFBIG), str(path)]
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.jsonl"]


# --------------------------------------------------------------------------------------------
# Atomic files (checkpoints, --save, --plot): the old file or the whole new one, nothing else


SAVE_FAULTS = {
    "temporary file": None,
    "write": dict(name="write"),
    "mid write": dict(name="write", half=True),
    "fsync": dict(name="fsync", error=OSError(errno.EIO, "Input/output error")),
    "rename": dict(name="replace"),
    "Ctrl-C at the rename": dict(name="replace", error=KeyboardInterrupt()),
}


@pytest.mark.parametrize("fault", SAVE_FAULTS, ids=list(SAVE_FAULTS))
def test_a_failed_save_keeps_the_previous_file_and_no_temporary(tmp_path, monkeypatch, fault):
    path = tmp_path / "state-r0.npz"
    checkpoint.save_params(path, {"w": np.ones(3)})
    before = path.read_bytes()
    spec = SAVE_FAULTS[fault]
    if spec is None:
        def no_space(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / ".state-r0.npz.x.tmp"))

        monkeypatch.setattr(files, "tempfile", types.SimpleNamespace(mkstemp=no_space))
        spec = {}
    else:
        inject(monkeypatch, **spec)
    with pytest.raises(type(spec.get("error", ENOSPC))) as raised:
        checkpoint.save_params(path, {"w": np.zeros(3)})
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["state-r0.npz"]
    if isinstance(raised.value, OSError):
        assert raised.value.filename == str(path)


def test_an_unreadable_load_file_says_so(tmp_path, monkeypatch):
    path = tmp_path / "p.npz"
    checkpoint.save_params(path, {"w": np.ones(3)})

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(checkpoint, "open", denied, raising=False)
    with pytest.raises(checkpoint.CheckpointError, match="cannot read .*Permission denied"):
        checkpoint.read_meta(path)


# --------------------------------------------------------------------------------------------
# The command line: what the user sees, what is left on disk


def tmp_files(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*") if p.name.endswith(".tmp")]


def test_full_disk_output_in_a_real_run(mcd, gauss_yaml, tmp_path, monkeypatch):
    results = tmp_path / "results.jsonl"
    results.write_bytes(lines_of(200))
    before = results.read_bytes()
    inject(monkeypatch, "write", half=True)
    code, stdout, err = mcd(["estimate", gauss_yaml, *NO_TRAIN, "--json", "-q", "--output", results])
    assert code == 1 and stdout == ""
    assert results.read_bytes() == before
    rescued, line = err.strip().splitlines()
    assert json.loads(rescued)["target"] == "tiny_gauss"  # the result is not lost
    assert line.startswith("mcd: error: cannot append to --output") and str(results) in line
    assert "Traceback" not in err


def test_dev_full_output_in_a_real_run_prints_the_record(mcd, gauss_yaml):
    code, stdout, err = mcd(["estimate", gauss_yaml, *NO_TRAIN, "-q", "--output", "/dev/full"])
    assert code == 1
    assert records(stdout)[0]["target"] == "tiny_gauss"
    (line,) = err.strip().splitlines()
    assert "'/dev/full'" in line and "No space left on device [ENOSPC]" in line


def test_a_checkpoint_that_cannot_be_written_is_a_warning_and_resume_uses_the_last_good_one(
    mcd, gauss_yaml, tmp_path, monkeypatch
):
    directory = tmp_path / "ckpt"
    args = ["estimate", gauss_yaml, *TINY, "--iterations", "4", "--step-size", "0.05", "--seed", "5",
            "--checkpoint", directory, "--checkpoint-every", "1", "--json"]
    faulty = inject(monkeypatch, "replace", at=1)  # iteration 1 is saved, then the disk is full
    code, stdout, err = mcd(args)
    monkeypatch.undo()
    assert code == 0, err
    (rec,) = records(stdout)
    assert rec["checkpoint_failures"] == faulty.failed >= 3
    warnings = [line for line in err.splitlines() if "checkpoint" in line]
    assert len(warnings) == 1 and "No space left on device" in warnings[0] and "iteration 1" in warnings[0]
    assert checkpoint.read_meta(directory / "state-r0.npz")["iteration"] == 1
    assert tmp_files(tmp_path) == []
    code, stdout, err = mcd(args + ["--resume"])
    assert code == 0, err
    (resumed,) = records(stdout)
    assert resumed["iterations_run"] == 3 and resumed["checkpoint_failures"] == 0
    assert resumed["log_z"] == rec["log_z"]  # the same training, continued from iteration 1


def test_a_failed_save_keeps_the_estimate_and_exits_1_naming_the_file(mcd, gauss_yaml, tmp_path, monkeypatch):
    save, results = tmp_path / "trained.npz", tmp_path / "results.jsonl"
    inject(monkeypatch, "replace", only="trained.npz")
    code, stdout, err = mcd(["estimate", gauss_yaml, *TINY, "--iterations", "2", "--step-size", "0.05", "--json",
                             "-q", "--save", save, "--output", results])
    assert code == 1
    (rec,) = records(stdout)
    assert records(results.read_text()) == [rec]  # printed and recorded
    (line,) = err.strip().splitlines()
    assert line.startswith(f"mcd: error: cannot write --save file '{save}'") and "No space left" in line
    assert "same --seed" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.jsonl", "tiny_gauss.yaml"]


def test_a_failed_plot_leaves_no_partial_figure(mcd, gauss_yaml, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    figure = tmp_path / "run.png"
    inject(monkeypatch, "write", half=True)
    code, stdout, err = mcd(["estimate", gauss_yaml, *NO_TRAIN, "-q", "--plot", figure])
    assert code == 1
    (line,) = err.strip().splitlines()
    assert f"cannot write '{figure}'" in line and "No space left on device" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny_gauss.yaml"]


# --------------------------------------------------------------------------------------------
# Errors say whose they are


HELPER = "def column(table, name):\n    return table[name]\n"
TARGET = """\
import jax.numpy as jnp
from helper_columns import column
dim = 2
calls = []
def log_density(x):
    calls.append(1)
    table = {"x": 1.0} if len(calls) == 1 else {}  # the check passes; the run then asks for 'income'
    return -0.5 * jnp.sum(x ** 2) * column(table, "x" if len(calls) == 1 else "income")
"""


def test_an_exception_in_the_target_file_during_a_run_names_file_and_function(mcd, tmp_path, monkeypatch):
    (tmp_path / "helper_columns.py").write_text(HELPER)
    (tmp_path / "model.py").write_text(TARGET)
    monkeypatch.chdir(tmp_path)
    code, stdout, err = mcd(["estimate", "model.py", *NO_TRAIN, "-q"])
    assert code == 1 and stdout == ""
    (line,) = err.strip().splitlines()
    assert line == "mcd: error in helper_columns.py, function column (line 2): KeyError: 'income'"


def test_an_exception_while_loading_the_target_names_the_file(mcd, tmp_path):
    (tmp_path / "helper_broken.py").write_text("raise RuntimeError('no database')\n")
    target = tmp_path / "model.py"
    target.write_text("import helper_broken\ndim = 2\ndef log_density(x):\n    return -x @ x\n")
    code, _, err = mcd(["estimate", target, *NO_TRAIN])
    (line,) = err.strip().splitlines()
    assert code == 2 and line == (
        f"mcd: error in {tmp_path / 'helper_broken.py'}, top level (line 1): RuntimeError: no database "
        f"(while loading {target})"
    )


def test_os_errors_name_the_file_and_the_reason():
    err = OSError(errno.EDQUOT, "Disk quota exceeded", "/scratch/fig.png")
    assert message(err) == (
        "mcd: error: cannot write '/scratch/fig.png': Disk quota exceeded [EDQUOT]; "
        "free space within your quota or choose another location"
    )
    text = message(OSError(errno.EIO, "Input/output error"))
    assert "[EIO]" in text and "internal error" not in text and "\n" not in text
