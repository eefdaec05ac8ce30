"""The Typer application and the one place where errors become exit codes and one line on stderr.

Every failure leaves through `McdGroup.main`: an `McdError` carries its exit status (2 bad input,
1 failed run, 3 unreliable under --strict, 130 interrupted); a click usage error exits 2. Of the
rest (exit 1), an exception raised in the user's target file is reported as theirs ("error in FILE,
function NAME"), an OS error as the file and the OS's reason, and anything else as a bug, in one
line that points at --debug. Failures the run deferred (`errors.defer`: a --save file that could
not be written) are reported after the results, and the command exits 1.
"""

from __future__ import annotations

import errno
import os
import shlex
import sys
import traceback
from importlib import metadata
from pathlib import Path

import typer

from mcd_cli.runtime import compile_cache, compile_clock
from mcd_cli._version import __version__
from mcd_cli.errors import Interrupted, McdError, deferred, os_advice, os_reason

# The click Typer ships with (vendored in recent versions): found from a public class.
_ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")

# The argv of the current invocation, for the "resume with" hint after Ctrl-C.
_ARGS: list[str] = []


def one_line(text: str, limit: int = 600) -> str:
    """`text` on one line, shortened to `limit` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def exit_code(exc: BaseException) -> int:
    """The exit status for an exception: 2 bad input, 1 failed run, 3 unreliable, 130 interrupted."""
    if isinstance(exc, McdError):
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return 130
    if isinstance(exc, typer.Exit):
        return exc.exit_code
    if isinstance(exc, _ClickException):
        return int(getattr(exc, "exit_code", 2))
    return 1


def message(exc: BaseException, prog: str = "mcd") -> str:
    """The one line printed on stderr for an exception."""
    if isinstance(exc, Interrupted):
        if exc.path is None:
            return f"{prog}: interrupted at iteration {exc.iteration} of {exc.total}; the state could not be saved ({exc.reason})"
        return (
            f"{prog}: interrupted at iteration {exc.iteration} of {exc.total}; training saved in "
            f"'{exc.path}'. Resume with: {resume_command(exc.path)}"
        )
    if isinstance(exc, KeyboardInterrupt):
        return f"{prog}: interrupted"
    if isinstance(exc, _ClickException):
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else prog
        hint = f" (see '{where} --help')" if ctx is not None else ""
        return f"{where}: error: {one_line(exc.format_message())}{hint}"
    if isinstance(exc, MemoryError):
        return f"{prog}: error: out of memory; lower --batch-size, --steps, --samples or the dimension"
    text = one_line(str(exc)) or type(exc).__name__
    if isinstance(exc, McdError):  # ("error in FILE, ..." names the user's code: not doubled)
        return f"{prog}: {text}" if text.startswith("error in ") else f"{prog}: error: {text}"
    from mcd_cli.targets.validate import user_error

    theirs = user_error(exc)
    if theirs is not None:
        return f"{prog}: {one_line(theirs)}"
    if isinstance(exc, OSError):
        return f"{prog}: error: {os_error(exc)}"
    if type(exc).__name__ == "XlaRuntimeError" or "RESOURCE_EXHAUSTED" in text:
        return f"{prog}: error: JAX runtime error: {text}; lower --batch-size or --steps if memory ran out"
    return f"{prog}: error: {type(exc).__name__}: {text} (an internal error; run with --debug for the traceback)"


# OS errors that only writing gives.
_WRITING = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


def os_error(exc: OSError) -> str:
    """An OS error no part of mcd-cli turned into its own message: the file, what failed, the OS's
    reason and what to do; or, naming no file, the reason as the machine's (not a bug of mcd-cli)."""
    if exc.filename is None:
        return (
            f"{os_reason(exc)} ({type(exc).__name__}): an error of the machine or the file system; "
            f"{os_advice(exc)} (run with --debug for where it happened)"
        )
    operation = "write" if exc.errno in _WRITING else "use"
    return one_line(f"cannot {operation} '{exc.filename}': {os_reason(exc)}; {os_advice(exc)}")


def resume_command(directory: Path) -> str:
    """The command that continues an interrupted run: the same argv plus --checkpoint/--resume."""
    args = list(_ARGS)
    if not any(a == "--checkpoint" or a.startswith("--checkpoint=") for a in args):
        args += ["--checkpoint", str(directory)]
    if "--resume" not in args:
        args.append("--resume")
    return "mcd " + shlex.join(args)


class McdGroup(typer.core.TyperGroup):
    """Runs the app non-standalone and turns every exception into an exit code and one line."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        global _ARGS
        args = list(sys.argv[1:] if args is None else args)
        _ARGS = args
        debug = "--debug" in args or bool(os.environ.get("MCD_DEBUG"))
        deferred()  # (left over from an earlier call in this process)
        compile_cache.enable()  # before anything compiles (JAX sets its cache up once per process)
        compile_clock.install()
        compile_clock.mark_ready()
        try:
            rv = super().main(args, prog_name or "mcd", complete_var, standalone_mode=False, **extra)
            code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
            if code == 130:
                print("mcd: interrupted", file=sys.stderr)
            for failure in deferred():  # the results are out: now the failures that waited for them
                print(message(failure), file=sys.stderr)
                code = code or exit_code(failure)
        except BaseException as exc:  # noqa: BLE001 - this is the one place errors are rendered
            if isinstance(exc, SystemExit):
                raise
            if not standalone_mode:
                raise
            if debug and not isinstance(exc, _ClickException):
                traceback.print_exception(exc, file=sys.stderr)
            if isinstance(exc, BrokenPipeError):  # `mcd ... --json | head`: the reader left
                sys.stdout = open(os.devnull, "w")
                sys.exit(1)
            if isinstance(exc, typer.Abort):
                exc, code = KeyboardInterrupt(), 130
            else:
                code = exit_code(exc)
            if not (isinstance(exc, _ClickException) and not exc.format_message()):
                print(message(exc), file=sys.stderr)  # (an empty message: help was shown instead)
            for failure in deferred():
                print(message(failure), file=sys.stderr)
        if standalone_mode:
            sys.stdout.flush()
            sys.exit(code)
        return code


app = typer.Typer(
    cls=McdGroup,
    name="mcd",
    help="Evidence (log Z) estimation with Monte Carlo Diffusion (MCD) and annealed importance sampling.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def version_line() -> str:
    """`mcd-cli X (jax Y, jaxlib Z)`: the installed versions, read from the packages' metadata, so
    that `--version` initialises no device (nor asks JAX anything)."""

    def installed(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return f"mcd-cli {__version__} (jax {installed('jax')}, jaxlib {installed('jaxlib')})"


def _version_callback(value: bool) -> None:
    if value:
        print(version_line())
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True,
        help="Print the versions of mcd-cli, jax and jaxlib and exit (no device is initialised).",
    ),
) -> None:
    """Evidence (log Z) estimation with Monte Carlo Diffusion (MCD) and annealed importance sampling."""
