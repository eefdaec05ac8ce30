"""From parsed options to the library's settings, with one precedence, highest first:

explicit flags, then the `--config` file, then `--preset`, then the command line's SMC defaults
(`estimation_defaults`), then the library's defaults (`SamplerConfig()`, `TrainConfig()`, `RunPlan`). A --config file may also hold `target`, `param`
and any `SamplerConfig`/`TrainConfig` field, so a record's `config` reproduces its run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import os
import signal
import sys
from pathlib import Path
from typing import Any, Iterator, Optional

import typer
import yaml

from mcd_cli.runtime import devices
from mcd_cli.io import safeyaml
from mcd_cli.cli.app import one_line
from mcd_cli.cli.options import DEFAULT_CHECKPOINT_EVERY, METHOD_OPTIONS, TRAINING_ONLY
from mcd_cli.config import PRESETS, SamplerConfig, TrainConfig, hidden_for
from mcd_cli.errors import UsageError
from mcd_cli.run import RunPlan, method_defaults

SAMPLER_FIELDS = {f.name for f in dataclasses.fields(SamplerConfig)}
TRAIN_FIELDS = {f.name for f in dataclasses.fields(TrainConfig)}


def _explicit(ctx: typer.Context, name: str) -> bool:
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT", "PROMPT")


def read_config(path: Path) -> dict:
    """The mapping in a --config file (YAML; JSON is YAML too)."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise UsageError(f"cannot read --config '{path}' ({err.strerror or err}); check the path") from None
    try:
        data = safeyaml.load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = None if mark is None else mark.line + 1
        if isinstance(err, safeyaml.DuplicateKeyError):
            raise UsageError(f"--config '{path}' line {line}: {err.problem}; keep one of the two") from None
        at = "" if line is None else f" at line {line}"
        raise UsageError(f"--config '{path}' is not valid YAML{at}; fix the file") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"--config '{path}' must be a mapping of option: value, got {type(data).__name__}")
    return data


def _config_value(ctx: typer.Context, name: str, value: Any, path: Path) -> Any:
    """Converts a YAML value with the option's own parameter type (so it is checked the same way)."""
    param = next(p for p in ctx.command.params if p.name == name)
    if name == "param":
        if isinstance(value, dict):
            return value
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return parse_params(value)
        raise UsageError(f"--config '{path}': 'param' must be a mapping of target parameters, e.g. param: {{dim: 20}}")
    if name == "target" and getattr(param, "nargs", 1) == -1:  # `mcd compare A [B ...]`
        # One name, as a record's `config` holds it, is a list of one target.
        if isinstance(value, list):
            return [str(v) for v in value]
        if isinstance(value, str):
            return [value]
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    if value is None or isinstance(value, (dict, list)):
        raise UsageError(f"--config '{path}': '{name}' must be a single value, got {value!r}")
    if isinstance(value, bool) != bool(getattr(param, "is_flag", False)):
        kind = "true or false" if getattr(param, "is_flag", False) else "a value, not true/false"
        raise UsageError(f"--config '{path}': '{name}' must be {kind}, got {value!r}")
    try:
        converted = param.process_value(ctx, value)
    except Exception as err:  # click.BadParameter
        detail = err.format_message() if hasattr(err, "format_message") else str(err)
        raise UsageError(f"--config '{path}': '{name}': {one_line(detail)}") from None
    return converted.value if isinstance(converted, enum.Enum) else converted


def _field_value(name: str, value: Any, path: Path) -> Any:
    """A config field that is not an option (e.g. `time_dim`): a plain scalar, checked by the config."""
    if value is None or isinstance(value, (dict, list)):
        raise UsageError(f"--config '{path}': '{name}' must be a single value, got {value!r}")
    return value


def parse_params(items: Optional[list[str]]) -> dict:
    """`["dim=20", ...]` -> `{"dim": "20", ...}` (values are parsed by the target)."""
    params: dict = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--param expects key=value (e.g. --param dim=20), got {item!r}")
        params[key.strip()] = value
    return params


def resolve(ctx: typer.Context, given: dict) -> dict:
    """Option values after merging: explicit flags > --config file > --preset > library defaults.

    Values still None afterwards mean "the library's default".
    """
    values = {k: (v.value if isinstance(v, enum.Enum) else v) for k, v in given.items()}
    params = parse_params(values.get("param"))
    config_params: dict = {}
    names = {p.name for p in ctx.command.params}
    fields = (SAMPLER_FIELDS | TRAIN_FIELDS) - names
    if values.get("config") is not None:
        path = values["config"]
        for raw_key, value in read_config(path).items():
            key = str(raw_key).replace("-", "_")
            key = {"params": "param", "checkpoint_dir": "checkpoint"}.get(key, key)
            if key in fields:
                values[key] = _field_value(key, value, path)
            elif key == "config" or key not in names:
                known = ", ".join(sorted((names | fields) - {"config"}))
                raise UsageError(f"--config '{path}': unknown option '{raw_key}'; known options: {known}")
            elif key == "param":
                config_params = _config_value(ctx, key, value, path)
            elif not _explicit(ctx, key):
                values[key] = _config_value(ctx, key, value, path)
    values["param"] = {**config_params, **params}
    preset = values.get("preset")
    if preset is not None:
        for key, value in PRESETS[preset].items():
            if values.get(key) is None:
                values[key] = value
    policy_or_method(values, names)
    estimation_defaults(values, names)
    start_runtime(values)  # before `auto` values ask JAX for its devices
    return _automatic(ctx, values)


def policy_or_method(values: dict, names: set) -> None:
    """`values["policy"]`: a `policy.Policy` for the commands that take --max-se when no method option
    was given, else None (and --max-se/--time-limit/--learn are refused as having nothing to act on)."""
    from mcd_cli import policy as default_policy

    if "max_se" not in names:
        return
    # `adaptive` is the --config key of --schedule adaptive; --amortise and --separate both choose training.
    # `is not`, not `in`: --resample 0 (importance sampling) is a method too, though 0 == False.
    fixed = [n for n in (*METHOD_OPTIONS, "adaptive") if values.get(n) is not None and values.get(n) is not False]
    fixed += ["amortise"] if values.get("amortise") is not None else []
    limit = values.get("time_limit")
    if fixed:
        values["policy"] = None
        steering = policy_options(values)
        if steering:
            flag = "--" + fixed[0].replace("_", "-")
            raise UsageError(
                f"--{steering[0].replace('_', '-')} steers the default policy, which {flag} turns off (it fixes the "
                f"method); drop one"
            )
        return
    if values.get("learn") and limit is None:
        raise UsageError(
            "--learn spends the time --time-limit leaves beside adaptive SMC's final run; give a --time-limit "
            "(e.g. --time-limit 10m)"
        )
    idle = training_only(values, names)
    if idle:
        what = "writes trained MCD kernels, which the default policy does not make" if idle == "--save" else (
            "sets the training of MCD kernels, which the default policy does not do"
        )
        raise UsageError(
            f"{idle} {what} (its adaptive SMC trains nothing); name the kernels to train them (e.g. --sampler uha "
            "--steps 64) or drop it"
        )
    try:
        seconds = None if limit is None else default_policy.parse_duration(limit)
        values["policy"] = default_policy.Policy(
            max_se=default_policy.DEFAULT_MAX_SE if values.get("max_se") is None else float(values["max_se"]),
            time_limit=seconds,
            learn=bool(values.get("learn")),
        )
    except ValueError as err:
        flag = "--time-limit" if "duration" in str(err) else "--max-se"
        raise UsageError(f"{flag}: {err}") from None


# The --config keys of the kernels and their training that are no option of their own.
_TRAINING_FIELDS = frozenset(
    {"time_dim", "blocks", "learn_mass", "init_step_size", "max_step_size", "init_damping", "score_linear",
     "learn_backward_variance", "schedule_start", "stop", "plateau_window", "chunk", "objective", "clip_norm",
     "max_bad_steps", "max_recoveries", "snapshot_every", "batch_backward", "max_seconds", "min_updates"}
)


def training_only(values: dict, names: set) -> Optional[str]:
    """The first option (as its flag, or its --config key) given that only the training of MCD
    kernels reads, which a default-policy run would drop; None when there is none. With --learn the
    policy's learning pilot trains kernels and reads them all but --save."""
    flags = [n for n in TRAINING_ONLY if n in names and values.get(n) is not None]
    keys = sorted(n for n in _TRAINING_FIELDS - names if values.get(n) is not None)
    if values.get("learn"):
        flags, keys = [n for n in flags if n == "save"], []
    if flags:
        return "--" + flags[0].replace("_", "-")
    return f"'{keys[0]}' (a --config key)" if keys else None


def adaptive_kernels(values: dict) -> None:
    """Adaptive tempered SMC moves the particles by its refinement moves alone, whose reversal is its
    backward kernel: a forward kernel (--sampler) or learned backward kernels (--backward mcd) named
    beside it (flag or --config key) would not run, so they are refused; `backward` becomes "ais"."""
    if not values.get("adaptive"):
        return
    moves = f"--refine {values.get('refine') or 'hmc'}"
    if values.get("sampler") is not None:
        raise UsageError(
            f"--sampler names the forward kernel of the annealed path, which --schedule adaptive does not run (its "
            f"moves are {moves}); drop --sampler, or drop --schedule adaptive to train MCD kernels"
        )
    if values.get("backward") not in (None, "ais"):
        raise UsageError(
            f"--backward {values['backward']} needs trained kernels on a fixed schedule, which --schedule adaptive "
            f"does not run (its moves are {moves}, reversed by ais); drop one"
        )
    values["backward"] = "ais"


def policy_options(values: dict) -> list:
    """The options given that steer the default policy: --max-se, --time-limit, --learn."""
    given = [name for name in ("max_se", "time_limit") if values.get(name) is not None]
    return given + (["learn"] if values.get("learn") else [])


def estimation_defaults(values: dict, names: set) -> None:
    """The library's estimation method (`run.method_defaults`) for the commands that take SMC options,
    where none of flags, --config or --preset chose otherwise."""
    if "resample" in names:
        method_defaults(values)


def _whole(name: str, value: Any) -> Any:
    """`value` as an int (or "auto"); a one-line usage error otherwise."""
    text = str(value).strip()
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"--{name.replace('_', '-')} must be a whole number or auto, got {value!r}") from None


def _automatic(ctx: typer.Context, values: dict) -> dict:
    """The options that take `auto` or a number, turned into the library's fields.

    `--iterations auto` -> `stop="plateau"` with the cap `--max-iterations`; `--iterations N`
    -> `stop="fixed"`. `--batch-size auto` -> `run.auto_batch_size()`. `--step-size auto` ->
    `step_size="pilot"`; a number -> `step_size="fixed"`, `init_step_size=` it. `--loss` ->
    `objective`. `--unroll` defaults to `run.auto_unroll()`.
    """
    from mcd_cli import run

    names = {p.name for p in ctx.command.params}
    if values.get("loss") is not None:
        values["objective"] = values.pop("loss")
    values.pop("loss", None)
    if "iterations" in names or values.get("iterations") is not None:
        iterations = values.get("iterations")
        cap = values.pop("max_iterations", None)
        if iterations is not None:
            iterations = _whole("iterations", iterations)
            if iterations == "auto":
                values["stop"] = "plateau"
                iterations = cap
            else:
                if cap is not None:
                    raise UsageError(
                        f"--max-iterations is the cap of --iterations auto, but --iterations is {iterations}; drop one"
                    )
                if _explicit(ctx, "iterations") or values.get("stop") is None:
                    values["stop"] = "fixed"
        elif cap is not None:
            if values.get("stop", TrainConfig.stop) != "plateau":
                raise UsageError("--max-iterations is the cap of --iterations auto; add --iterations auto")
            iterations = cap
        values["iterations"] = iterations
    batch = values.get("batch_size")
    if batch is not None:
        batch = _whole("batch_size", batch)
        values["batch_size"] = run.auto_batch_size() if batch == "auto" else batch
    elif "batch_size" in names:
        values["batch_size"] = run.auto_batch_size()
    step = values.get("step_size")
    if step is None and "step_size" in names:
        step = "auto"
    if step is not None:
        text = str(step).strip()
        if text in ("auto", "pilot"):
            values["step_size"] = "pilot"
        elif text == "fixed":
            values["step_size"] = "fixed"
        else:
            try:
                size = float(text)
            except ValueError:
                raise UsageError(f"--step-size must be auto or a number such as 0.05, got {step!r}") from None
            values["step_size"], values["init_step_size"] = "fixed", size
    if values.get("unroll") is None and "unroll" in names:
        values["unroll"] = run.auto_unroll()
    return values


@functools.cache
def _option_names() -> frozenset:
    """The parameter names of every command's options."""
    from mcd_cli.cli.app import app  # the commands register themselves on import of mcd_cli.cli

    group = typer.main.get_command(app)
    commands = getattr(group, "commands", {}).values() or [group]
    return frozenset(p.name for command in commands for p in command.params)


def _field_error(err: ValueError) -> UsageError:
    """The config's error, naming the option (`--batch-size ...`) where the command has one, else
    the configuration-file key (`'time_dim' in --config ...`)."""
    text = str(err)
    options = _option_names()
    for name in sorted(SAMPLER_FIELDS | TRAIN_FIELDS, key=len, reverse=True):
        if text.startswith(name + " "):
            label = "--" + name.replace("_", "-") if name in options else f"'{name}' (a --config key)"
            text = label + text[len(name):]
            break
    return UsageError(text)


def build_configs(values: dict, dim: int) -> tuple[SamplerConfig, TrainConfig]:
    """The library's config objects from resolved values (None means the library default, except
    the score width, which follows the target's dimension `dim`: `hidden_for(dim)`)."""
    skw = {k: values[k] for k in SAMPLER_FIELDS if values.get(k) is not None}
    skw.setdefault("hidden", hidden_for(dim))
    tkw = {k: values[k] for k in TRAIN_FIELDS if values.get(k) is not None}
    try:
        return SamplerConfig(**skw), TrainConfig(**tkw)
    except (TypeError, ValueError) as err:
        raise _field_error(ValueError(str(err))) from None


@dataclasses.dataclass(frozen=True)
class LoadedTarget:
    """A target and how it was named (for the record)."""

    target: Any
    spec: str
    text: Optional[str] = None  # the YAML read from stdin
    args: Optional[dict] = None  # --param
    model: Optional[str] = None  # --model
    data: Optional[Path] = None  # --data


def load_target(
    spec: Optional[str], params: dict, model: Optional[str] = None, data: Optional[Path] = None
) -> LoadedTarget:
    """A `Target` from a path, a bundled name or '-' (stdin); `data` is a --data file."""
    from mcd_cli.targets import load_target as _load
    from mcd_cli.targets.datafile import read_data

    if not spec:
        raise UsageError(
            "no TARGET given; name a bundled target (see `mcd targets`), a .py/.yaml file, or - for stdin"
        )
    stdin_text = None
    if spec == "-":
        stdin_text = sys.stdin.read()
        if not stdin_text.strip():
            raise UsageError("TARGET is '-' but stdin is empty; pipe a YAML target into mcd")
    try:
        arrays = read_data(data) if data is not None else None
        target = _load(spec, params, stdin_text=stdin_text, model=model, data=arrays)
    except MemoryError:
        raise UsageError(f"not enough memory to build target '{spec}' with {params}; use a smaller dimension") from None
    except RecursionError:
        raise UsageError(f"target '{spec}' is nested too deeply to read; simplify it") from None
    return LoadedTarget(target, spec, stdin_text, dict(params), model, data)


def positive(values: dict, *names: str) -> None:
    """Usage error unless each named value is None or at least 1."""
    for name in names:
        value = values.get(name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {value}")


# Options that are `RunPlan` fields under another name.
_RUN_FIELDS = {"samples": "num_samples", "seed": "seed", "repeats": "repeats"}


def run_plan(loaded: LoadedTarget, sconf: SamplerConfig, tconf: TrainConfig, values: dict, **extra) -> RunPlan:
    """The `RunPlan` of one run from resolved values: the fields `estimate` and `compare` share
    (an option not given leaves `RunPlan`'s default)."""
    given = {field: values[name] for name, field in _RUN_FIELDS.items() if values.get(name) is not None}
    return RunPlan(
        target=loaded.target,
        sconf=sconf,
        tconf=tconf,
        **given,
        output=values.get("output"),
        x64=bool(values["x64"]),
        target_spec=loaded.spec,
        target_text=loaded.text,
        target_args=loaded.args,
        target_model=loaded.model,
        target_data=str(loaded.data) if loaded.data is not None else None,
        devices=devices.parse_count(values.get("devices")),
        model_index=values.get("model_index"),
        stage=values.get("stage"),
        train_stage=values.get("train_stage"),
        **extra,
    )


def start_runtime(values: dict) -> None:
    """Joins the multi-process runtime under --distributed (before any JAX computation)."""
    cluster = [f"--{n.replace('_', '-')}" for n in ("coordinator", "num_processes", "process_id") if values.get(n) is not None]
    if not values.get("distributed"):
        if cluster:
            verb = "needs" if len(cluster) == 1 else "need"
            raise UsageError(f"{', '.join(cluster)} {verb} --distributed; add it or drop them")
        return
    results_only_on_stdout()
    devices.initialize(values.get("coordinator"), values.get("num_processes"), values.get("process_id"))


def results_only_on_stdout() -> None:
    """Keeps stdout for results: the runtime's native libraries (Gloo, between CPU processes) print
    to file descriptor 1, which from here on goes to stderr, while `sys.stdout` writes to a
    duplicate of the original stdout."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # not a real file (a test runner's capture)
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    os.dup2(sys.stderr.fileno(), fd)
    sys.stdout = os.fdopen(saved, "w", buffering=1, encoding=sys.stdout.encoding, errors=sys.stdout.errors)


def checkpoint_every(values: dict) -> int:
    every = values.get("checkpoint_every")
    return DEFAULT_CHECKPOINT_EVERY if every is None else every


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
