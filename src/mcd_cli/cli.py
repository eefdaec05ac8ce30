"""The `mcd` command line: parse options, call the library, render the result.

Nothing numerical happens here. Settings are resolved with one precedence, highest first:
explicit flags, then the `--config` YAML file, then `--preset`, then the library's defaults
(`SamplerConfig()`, `TrainConfig()`). Every failure leaves through `McdGroup.main`, which maps it
to an exit code and one line on stderr: 2 for usage errors and bad input, 1 for runs that fail,
130 for Ctrl-C. `--debug` adds the traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import inspect
import json as jsonlib
import os
import shlex
import signal
import sys
import traceback
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer
import yaml

from mcd_cli import checkpoint as ckpt
from mcd_cli import report, runner, safeyaml
from mcd_cli.config import PRESETS, Backward, Sampler, SamplerConfig, TrainConfig, hidden_for

_S = SamplerConfig()
_T = TrainConfig()
_SAMPLER_FIELDS = {f.name for f in dataclasses.fields(SamplerConfig)}
_TRAIN_FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}
_DEFAULT_SAMPLES = inspect.signature(runner.estimate).parameters["num_samples"].default
_DEFAULT_CHECKPOINT_EVERY = 100

Preset = enum.Enum("Preset", {name: name for name in PRESETS}, type=str)

# The click Typer ships with (vendored in recent versions): found from a public class.
_ClickException = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")

# The argv of the current invocation, for the "resume with" hint after Ctrl-C.
_ARGS: list[str] = []


# --------------------------------------------------------------------------------------------
# Errors -> exit codes, in one place


def _one_line(text: str, limit: int = 600) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def exit_code(exc: BaseException) -> int:
    """The exit status for an exception: 2 bad input, 1 failed run, 130 interrupted."""
    from mcd_cli.estimate import AllWeightsNonFinite
    from mcd_cli.training import TrainingDiverged

    if isinstance(exc, (runner.Interrupted, KeyboardInterrupt)):
        return 130
    if isinstance(exc, typer.Exit):
        return exc.exit_code
    if isinstance(exc, _ClickException):
        return int(getattr(exc, "exit_code", 2))
    if isinstance(exc, (TrainingDiverged, AllWeightsNonFinite, runner.RunFailed, MemoryError)):
        return 1
    if isinstance(exc, ValueError):  # TargetError, CheckpointError, UsageProblem, config checks
        return 2
    return 1


def message(exc: BaseException, prog: str = "mcd") -> str:
    """The one line printed on stderr for an exception."""
    if isinstance(exc, runner.Interrupted):
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
        return f"{where}: error: {_one_line(exc.format_message())}{hint}"
    if isinstance(exc, MemoryError):
        return f"{prog}: error: out of memory; lower --batch-size, --steps, --samples or the dimension"
    text = _one_line(str(exc)) or type(exc).__name__
    if exit_code(exc) == 1 and not isinstance(exc, (RuntimeError,)):
        text = f"{type(exc).__name__}: {text} (run with --debug for the traceback)"
    elif type(exc).__name__ == "XlaRuntimeError" or "RESOURCE_EXHAUSTED" in text:
        text = f"JAX runtime error: {text}; lower --batch-size or --steps if memory ran out"
    return f"{prog}: error: {text}"


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
        try:
            rv = super().main(
                args, prog_name or "mcd", complete_var, standalone_mode=False, **extra
            )
            code = rv if isinstance(rv, int) and not isinstance(rv, bool) else 0
            if code == 130:
                print("mcd: interrupted", file=sys.stderr)
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


def _version_callback(value: bool) -> None:
    if value:
        print(f"mcd-cli {runner.version()}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Evidence (log Z) estimation with Monte Carlo Diffusion (MCD) and annealed importance sampling."""


# --------------------------------------------------------------------------------------------
# Options shared by `estimate` and `compare`

TargetArg = Annotated[
    Optional[str],
    typer.Argument(
        help="A target: a .py or .yaml file, a bundled target's name (see `mcd targets`), or - to "
        "read a YAML target from stdin.",
        show_default=False,
    ),
]
IterationsOpt = Annotated[
    Optional[int],
    typer.Option("--iterations", "-n", help=f"Training iterations (0: no training). (default: {_T.iterations})", show_default=False),
]
BatchOpt = Annotated[
    Optional[int],
    typer.Option("--batch-size", "-b", help=f"Particles per training step. (default: {_T.batch_size})", show_default=False),
]
LrOpt = Annotated[
    Optional[float], typer.Option("--lr", help=f"Adam learning rate. (default: {_T.lr:g})", show_default=False)
]
SamplesOpt = Annotated[
    Optional[int],
    typer.Option("--samples", "-N", help=f"Importance samples for the estimate. (default: {_DEFAULT_SAMPLES})", show_default=False),
]
SeedOpt = Annotated[Optional[int], typer.Option("--seed", help="Root random seed. (default: 0)", show_default=False)]
RepeatsOpt = Annotated[
    Optional[int],
    typer.Option("--repeats", "-r", help="Independent runs (seeds); reports mean ± standard error. (default: 1)", show_default=False),
]
HiddenOpt = Annotated[
    Optional[int],
    typer.Option("--hidden", help="Width d_h of the score network (MCD); keep it at least the target's dimension. (default: the dimension rounded up to a multiple of 32, between 32 and 512)", show_default=False),
]
LearnScheduleOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--learn-schedule/--fixed-schedule",
        help=f"Learn the annealing schedule β (else linear). (default: {'learn' if _S.learn_schedule else 'fixed'})",
        show_default=False,
    ),
]
RematOpt = Annotated[
    Optional[bool],
    typer.Option(
        "--remat/--no-remat",
        help="Recompute the trajectory in the backward pass: memory O(√K) instead of O(K), slower.",
        show_default=False,
    ),
]
ParamOpt = Annotated[
    Optional[list[str]],
    typer.Option("--param", "-p", help="Target parameter key=value (repeatable), e.g. --param dim=50.", show_default=False),
]
PresetOpt = Annotated[
    Optional[Preset],
    typer.Option("--preset", help="Named settings: default (CPU, minutes) or paper (d_h = 512, long training; GPU).", show_default=False),
]
ConfigOpt = Annotated[
    Optional[Path],
    typer.Option("--config", "-c", help="YAML file of options (keys are option names); explicit flags win.", show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print only JSON (one object per line) on stdout.")]
OutputOpt = Annotated[
    Optional[Path],
    typer.Option("--output", "-o", help="Append one JSON line per run to this file (safe for concurrent jobs).", show_default=False),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or warnings on stderr.")]
X64Opt = Annotated[bool, typer.Option("--x64", help="Compute in float64 (slower; default float32).")]
DebugOpt = Annotated[bool, typer.Option("--debug", help="Show the traceback when something fails.")]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Check the target, options, files and memory, then exit without running.")
]


# --------------------------------------------------------------------------------------------
# Settings resolution


def _explicit(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT", "PROMPT")


def _read_config(path: Path) -> dict:
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise runner.UsageProblem(f"cannot read --config '{path}' ({err.strerror or err}); check the path") from None
    try:
        data = safeyaml.load(text)
    except safeyaml.DuplicateKeyError as err:
        raise runner.UsageProblem(
            f"--config '{path}' line {err.problem_mark.line + 1}: {err.problem}; keep one of the two"
        ) from None
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        at = f" at line {where.line + 1}" if where is not None else ""
        raise runner.UsageProblem(f"--config '{path}' is not valid YAML{at}; fix the file") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise runner.UsageProblem(f"--config '{path}' must be a mapping of option: value, got {type(data).__name__}")
    return data


def _config_value(ctx: typer.Context, name: str, value: Any, path: Path) -> Any:
    """Converts a YAML value with the option's own parameter type (so it is checked the same way)."""
    param = next(p for p in ctx.command.params if p.name == name)
    if name == "param":
        if isinstance(value, dict):
            return value
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return _parse_params(value)
        raise runner.UsageProblem(f"--config '{path}': 'param' must be a mapping of target parameters, e.g. param: {{dim: 20}}")
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    if value is None or isinstance(value, (dict, list)):
        raise runner.UsageProblem(f"--config '{path}': '{name}' must be a single value, got {value!r}")
    if isinstance(value, bool) != bool(getattr(param, "is_flag", False)):
        kind = "true or false" if getattr(param, "is_flag", False) else "a value, not true/false"
        raise runner.UsageProblem(f"--config '{path}': '{name}' must be {kind}, got {value!r}")
    try:
        converted = param.process_value(ctx, value)
    except Exception as err:  # click.BadParameter
        detail = err.format_message() if hasattr(err, "format_message") else str(err)
        raise runner.UsageProblem(f"--config '{path}': '{name}': {_one_line(detail)}") from None
    return converted.value if isinstance(converted, enum.Enum) else converted


def _parse_params(items: Optional[list[str]]) -> dict:
    params: dict = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise runner.UsageProblem(f"--param expects key=value (e.g. --param dim=20), got {item!r}")
        params[key.strip()] = value
    return params


def resolve(ctx: typer.Context, given: dict) -> dict:
    """Option values after merging: explicit flags > --config file > --preset > library defaults.

    Values still None afterwards mean "the library's default".
    """
    values = {k: (v.value if isinstance(v, enum.Enum) else v) for k, v in given.items()}
    params = _parse_params(values.get("param"))
    config_params: dict = {}
    names = {p.name for p in ctx.command.params}
    if values.get("config") is not None:
        path = values["config"]
        for raw_key, value in _read_config(path).items():
            key = str(raw_key).replace("-", "_")
            key = {"params": "param", "checkpoint_dir": "checkpoint"}.get(key, key)
            if key == "config" or key not in names:
                known = ", ".join(sorted(n for n in names if n != "config"))
                raise runner.UsageProblem(f"--config '{path}': unknown option '{raw_key}'; known options: {known}")
            if key == "param":
                config_params = _config_value(ctx, key, value, path)
            elif not _explicit(ctx, key):
                values[key] = _config_value(ctx, key, value, path)
    values["param"] = {**config_params, **params}
    preset = values.get("preset")
    if preset is not None:
        for key, value in PRESETS[preset].items():
            if values.get(key) is None:
                values[key] = value
    return values


def _field_error(err: ValueError) -> runner.UsageProblem:
    text = str(err)
    for name in sorted(_SAMPLER_FIELDS | _TRAIN_FIELDS, key=len, reverse=True):
        if text.startswith(name + " "):
            text = "--" + name.replace("_", "-") + text[len(name):]
            break
    return runner.UsageProblem(text)


def build_configs(values: dict, dim: int) -> tuple[SamplerConfig, TrainConfig]:
    """The library's config objects from resolved values (None means the library default, except
    the score width, which follows the target's dimension `dim`: `hidden_for(dim)`)."""
    skw = {k: values[k] for k in _SAMPLER_FIELDS if values.get(k) is not None}
    skw.setdefault("hidden", hidden_for(dim))
    tkw = {k: values[k] for k in _TRAIN_FIELDS if values.get(k) is not None}
    try:
        return SamplerConfig(**skw), TrainConfig(**tkw)
    except ValueError as err:
        raise _field_error(err) from None


def load_target(spec: Optional[str], params: dict):
    """A `Target` from a path, a bundled name or '-' (stdin)."""
    from mcd_cli.targets import load_target as _load

    if not spec:
        raise runner.UsageProblem("no TARGET given; name a bundled target (see `mcd targets`), a .py/.yaml file, or - for stdin")
    stdin_text = None
    if spec == "-":
        stdin_text = sys.stdin.read()
        if not stdin_text.strip():
            raise runner.UsageProblem("TARGET is '-' but stdin is empty; pipe a YAML target into mcd")
    try:
        return _load(spec, params, stdin_text=stdin_text)
    except MemoryError:
        raise runner.UsageProblem(
            f"not enough memory to build target '{spec}' with {params}; use a smaller dimension"
        ) from None
    except RecursionError:
        raise runner.UsageProblem(f"target '{spec}' is nested too deeply to read; simplify it") from None
    except (TypeError, KeyError, AttributeError, IndexError, OverflowError) as err:
        # The loader should turn every bad document into a TargetError; if one slips through,
        # it is still bad input, not a failed run.
        raise runner.UsageProblem(
            f"cannot load target '{spec}': {type(err).__name__}: {_one_line(str(err), 200)}; check the target file"
        ) from err


def _positive(values: dict, *names: str) -> None:
    for name in names:
        value = values.get(name)
        if value is not None and value < 1:
            raise runner.UsageProblem(f"--{name.replace('_', '-')} must be at least 1, got {value}")


@contextlib.contextmanager
def precision(x64: bool) -> Iterator[None]:
    """float64 inside the block when asked (set before anything is traced), restored afterwards."""
    import jax

    before = bool(jax.config.read("jax_enable_x64"))
    if x64 != before:
        jax.config.update("jax_enable_x64", x64)
    try:
        yield
    finally:
        if x64 != before:
            jax.config.update("jax_enable_x64", before)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (what a cluster scheduler sends before killing a job) acts like Ctrl-C."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _progress(values: dict) -> report.ProgressDisplay:
    return report.ProgressDisplay(
        enabled=sys.stderr.isatty() and not values.get("quiet") and not values.get("json")
    )


def _emit(records: list[dict], values: dict, table) -> None:
    if values.get("json"):
        for rec in records:
            print(report.to_json(rec), flush=True)
    else:
        report.stdout_console().print(table)
    if not values.get("quiet"):
        for rec in records:
            for warning in report.warnings_for(rec):
                print(warning, file=sys.stderr)


def _warn_before(plans: list[runner.RunPlan], values: dict) -> None:
    """Warnings known from the settings alone, on stderr before any work (each line once)."""
    if values.get("quiet"):
        return
    for line in dict.fromkeys(w for plan in plans for w in runner.plan_warnings(plan)):
        print(line, file=sys.stderr)


def _append(values: dict, rec: dict) -> None:
    if values.get("output") is not None:
        ckpt.append_line(values["output"], report.to_json(rec))


# --------------------------------------------------------------------------------------------
# Commands


@app.command()
def estimate(
    ctx: typer.Context,
    target: TargetArg = None,
    sampler: Annotated[
        Optional[Sampler],
        typer.Option("--sampler", "-s", help=f"Forward kernel: ula (Langevin) or uha (Hamiltonian). (default: {_S.sampler})", show_default=False),
    ] = None,
    backward: Annotated[
        Optional[Backward],
        typer.Option("--backward", "-B", help=f"Backward kernel: mcd (learned score) or ais. (default: {_S.backward})", show_default=False),
    ] = None,
    steps: Annotated[
        Optional[int], typer.Option("--steps", "-K", help=f"Annealing steps K. (default: {_S.steps})", show_default=False)
    ] = None,
    iterations: IterationsOpt = None,
    batch_size: BatchOpt = None,
    lr: LrOpt = None,
    samples: SamplesOpt = None,
    seed: SeedOpt = None,
    repeats: RepeatsOpt = None,
    hidden: HiddenOpt = None,
    learn_schedule: LearnScheduleOpt = None,
    remat: RematOpt = None,
    param: ParamOpt = None,
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
    output: OutputOpt = None,
    save: Annotated[
        Optional[Path], typer.Option("--save", help="Save the trained parameters to this file (.npz).", show_default=False)
    ] = None,
    load: Annotated[
        Optional[Path],
        typer.Option("--load", help="Load trained parameters saved with --save and skip training.", show_default=False),
    ] = None,
    checkpoint: Annotated[
        Optional[Path],
        typer.Option("--checkpoint", help="Save the training state in this directory every --checkpoint-every iterations.", show_default=False),
    ] = None,
    checkpoint_every: Annotated[
        Optional[int],
        typer.Option("--checkpoint-every", help=f"Iterations between checkpoints. (default: {_DEFAULT_CHECKPOINT_EVERY})", show_default=False),
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue from the checkpoint in --checkpoint DIR, if there is one.")
    ] = False,
    dry_run: DryRunOpt = False,
    quiet: QuietOpt = False,
    x64: X64Opt = False,
    debug: DebugOpt = False,
) -> None:
    """Fit the estimator to TARGET, then estimate log Z.

    Example: mcd estimate gmm8 --steps 64 --sampler uha --json
    """
    given = dict(locals())
    given.pop("ctx")
    values = resolve(ctx, given)
    with precision(bool(values["x64"])):
        plan = _estimate_plan(ctx, values)
        runner.validate(plan)
        _warn_before([plan], values)
        if values["dry_run"]:
            _dry_run([plan], values)
            return
        with _progress(values) as progress, sigterm_as_interrupt():
            rec = runner.execute(plan, progress)
        _append(values, rec)
        _emit([rec], values, report.estimate_table(rec))


def _estimate_plan(ctx: typer.Context, values: dict) -> runner.RunPlan:
    _positive(values, "steps", "batch_size", "samples", "repeats", "hidden")
    target = load_target(values.get("target"), values["param"])
    if values.get("load") is not None:
        meta = ckpt.read_meta(values["load"])
        ckpt.check_target(meta, target, str(values["load"]))
        saved = runner.sampler_config_from_file(meta, values["load"])
        for name in _SAMPLER_FIELDS:
            if values.get(name) is None:
                values[name] = getattr(saved, name)
    sconf, tconf = build_configs(values, target.dim)
    every = values.get("checkpoint_every")
    return runner.RunPlan(
        target=target,
        sconf=sconf,
        tconf=tconf,
        load=values.get("load"),
        save=values.get("save"),
        checkpoint_dir=values.get("checkpoint"),
        checkpoint_every=_DEFAULT_CHECKPOINT_EVERY if every is None else every,
        resume=bool(values.get("resume")),
        **_run_settings(values),
    )


def _run_settings(values: dict) -> dict:
    """RunPlan fields shared by `estimate` and `compare` (None means the default)."""

    def pick(name: str, default: Any) -> Any:
        return default if values.get(name) is None else values[name]

    return {
        "num_samples": pick("samples", _DEFAULT_SAMPLES),
        "seed": pick("seed", 0),
        "repeats": pick("repeats", 1),
        "output": values.get("output"),
        "x64": bool(values["x64"]),
    }


def _dry_run(plans: list[runner.RunPlan], values: dict) -> None:
    rows = []
    for plan in plans:
        need = runner.memory_needed(plan)
        rows.append(
            {
                "dry_run": True,
                "target": plan.target.name,
                "dim": plan.target.dim,
                "sampler_config": dataclasses.asdict(plan.sconf),
                "train_config": dataclasses.asdict(plan.tconf),
                "num_samples": plan.num_samples,
                "seed": plan.seed,
                "repeats": plan.repeats,
                "memory_bytes": int(max(need["training"], need["estimation"]) + need["parameters"] + need["host"]),
            }
        )
    if values.get("json"):
        for row in rows:
            print(jsonlib.dumps(row))
        return
    for plan, row in zip(plans, rows):
        print(
            f"ok: {plan.sconf.label} K={plan.sconf.steps} on {plan.target.name} (d = {plan.target.dim}), "
            f"{plan.tconf.iterations} iterations × batch {plan.tconf.batch_size}, {plan.num_samples} samples, "
            f"{plan.repeats} repeat(s); about {runner._bytes(row['memory_bytes'])} of memory"
        )


def _split(value: Any, name: str, convert) -> list:
    if value is None:
        return [None]
    items = [v.strip() for v in str(value).split(",") if v.strip()]
    if not items:
        raise runner.UsageProblem(f"--{name} needs at least one value, e.g. --{name} {'64,256' if name == 'steps' else 'ula,uha'}")
    out = []
    for item in items:
        try:
            out.append(convert(item))
        except ValueError:
            choices = {"sampler": "ula, uha", "backward": "ais, mcd", "steps": "positive integers"}[name]
            raise runner.UsageProblem(f"--{name}: {item!r} is not one of {choices}; give a comma-separated list") from None
    return list(dict.fromkeys(out))


def _steps_value(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


@app.command()
def compare(
    ctx: typer.Context,
    target: TargetArg = None,
    sampler: Annotated[
        Optional[str], typer.Option("--sampler", "-s", help=f"Comma-separated forward kernels, e.g. ula,uha. (default: {_S.sampler})", show_default=False)
    ] = None,
    backward: Annotated[
        Optional[str], typer.Option("--backward", "-B", help=f"Comma-separated backward kernels, e.g. ais,mcd. (default: {_S.backward})", show_default=False)
    ] = None,
    steps: Annotated[
        Optional[str], typer.Option("--steps", "-K", help=f"Comma-separated step counts, e.g. 64,256. (default: {_S.steps})", show_default=False)
    ] = None,
    iterations: IterationsOpt = None,
    batch_size: BatchOpt = None,
    lr: LrOpt = None,
    samples: SamplesOpt = None,
    seed: SeedOpt = None,
    repeats: RepeatsOpt = None,
    hidden: HiddenOpt = None,
    learn_schedule: LearnScheduleOpt = None,
    remat: RematOpt = None,
    param: ParamOpt = None,
    preset: PresetOpt = None,
    config: ConfigOpt = None,
    json: JsonOpt = False,
    output: OutputOpt = None,
    dry_run: DryRunOpt = False,
    quiet: QuietOpt = False,
    x64: X64Opt = False,
    debug: DebugOpt = False,
) -> None:
    """Run a grid of estimators on TARGET and print one table in the paper's layout.

    Example: mcd compare gmm8 --sampler ula,uha --backward ais,mcd --steps 64,256 --repeats 3
    """
    given = dict(locals())
    given.pop("ctx")
    values = resolve(ctx, given)
    samplers_ = _split(values.get("sampler"), "sampler", lambda v: Sampler(v).value)
    backwards = _split(values.get("backward"), "backward", lambda v: Backward(v).value)
    steps_list = _split(values.get("steps"), "steps", _steps_value)
    _positive(values, "batch_size", "samples", "repeats", "hidden")
    with precision(bool(values["x64"])):
        target_obj = load_target(values.get("target"), values["param"])
        plans = []
        for s in samplers_:
            for b in backwards:
                for k in steps_list:
                    cell = {**values, "sampler": s, "backward": b, "steps": k}
                    sconf, tconf = build_configs(cell, target_obj.dim)
                    plans.append(
                        runner.RunPlan(target=target_obj, sconf=sconf, tconf=tconf, **_run_settings(values))
                    )
        available = runner.available_memory()
        for plan in plans:
            runner.validate(plan, available=available)
        _warn_before(plans, values)
        if values["dry_run"]:
            _dry_run(plans, values)
            return
        records = []
        with _progress(values) as progress, sigterm_as_interrupt():
            for plan in plans:
                rec = runner.execute(plan, progress)
                _append(values, rec)
                if values.get("json"):
                    print(report.to_json(rec), flush=True)
                records.append(rec)
        if not values.get("json"):
            report.stdout_console().print(report.compare_table(records))
        if not values.get("quiet"):
            for rec in records:
                for warning in report.warnings_for(rec):
                    print(warning, file=sys.stderr)


@app.command()
def check(
    target: TargetArg = None,
    param: ParamOpt = None,
    json: JsonOpt = False,
    x64: X64Opt = False,
    debug: DebugOpt = False,
) -> None:
    """Validate TARGET: its log density and gradient at draws from the initial distribution.

    Exits 1 when the target is not usable as it stands.
    """
    from mcd_cli.targets import check as check_target

    with precision(x64):
        target_obj = load_target(target, _parse_params(param))
        result = check_target(target_obj)
    if json:
        data = result.as_dict()
        data["reference_log_z"] = report.finite(target_obj.log_z)
        print(jsonlib.dumps(data, default=str))
    else:
        report.stdout_console().print(report.check_table(target_obj, result))
    if not result.ok:
        more = f" (and {len(result.problems) - 1} more)" if len(result.problems) > 1 else ""
        raise runner.RunFailed(f"target '{target_obj.name}' failed its check: {result.problems[0]}{more}")


@app.command()
def targets(
    json: JsonOpt = False,
    debug: DebugOpt = False,
) -> None:
    """List the bundled targets: name, dimension, known log Z, description, path."""
    from mcd_cli.targets import bundled_targets

    rows = [_target_row(t) for t in bundled_targets()]
    if json:
        for row in rows:
            print(jsonlib.dumps(row, default=str))
    else:
        report.stdout_console().print(report.targets_table(rows))


def _target_row(item: Any) -> dict:
    if isinstance(item, dict):
        row = dict(item)
    elif dataclasses.is_dataclass(item):
        row = dataclasses.asdict(item)
    else:
        row = {k: getattr(item, k) for k in ("name", "dim", "log_z", "description", "path") if hasattr(item, k)}
    row.setdefault("path", row.get("source"))
    row["log_z"] = report.finite(row.get("log_z"))
    return {k: row.get(k) for k in ("name", "dim", "log_z", "description", "path")}


def main() -> None:
    """Console-script entry point (`mcd`)."""
    app()
