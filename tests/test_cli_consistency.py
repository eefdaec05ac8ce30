"""One command line: every command takes -q/--quiet and --debug, and --json when it prints a result;
an option of one name means the same thing in every command (compare's list-valued options, as
docs/cli.md documents, excepted); `mcd --version` initialises no device.

The rules are checked by walking the commands the app registers, so a new command is held to them
without a change here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

import pytest
import typer

from conftest import records

from mcd_cli._version import __version__
from mcd_cli.cli import app

COMMANDS = typer.main.get_command(app).commands
# Commands that print no result, so need no --json: none yet.
NO_RESULT: frozenset[str] = frozenset()
# `mcd compare` reads these its own way (docs/cli.md, "mcd compare"): comma-separated lists to make
# a grid of (--sampler, --backward, --steps), one --load file per target, several TARGETs.
COMPARE_LISTS = {"target", "sampler", "backward", "steps", "load"}


def meaning(param) -> tuple:
    """What a parameter is, as far as the command line shows it: its flags, whether it is an
    argument, an on/off switch or repeatable, its type, help text and help panel."""
    return (
        param.param_type_name,
        tuple(param.opts),
        tuple(param.secondary_opts),
        getattr(param, "is_flag", False),
        param.multiple,
        param.nargs,
        kind(param),
        getattr(param, "help", None),
        getattr(param, "rich_help_panel", None),
    )


def kind(param) -> str:
    """The parameter's type: the annotation typer read (recent typer builds click's type lazily), or
    click's type."""
    descriptor = getattr(param, "type_descriptor", None)
    return repr(descriptor.annotation) if descriptor is not None else repr(param.type)


def test_the_commands_are_walked():
    assert {"estimate", "compare", "check", "targets"} <= set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_takes_quiet_and_debug_and_json_where_it_prints_a_result(name):
    params = {p.name: p for p in COMMANDS[name].params}
    shared = {"quiet": ["--quiet", "-q"], "debug": ["--debug"]}
    if name not in NO_RESULT:
        shared["json"] = ["--json"]
    for option, flags in shared.items():
        assert option in params, f"mcd {name} has no --{option}"
        assert sorted(params[option].opts) == sorted(flags) and params[option].is_flag, (name, option)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_parses_the_shared_flags(name):
    args = ["-q", "--debug"] + ([] if name in NO_RESULT else ["--json"])
    with COMMANDS[name].make_context(name, args) as ctx:
        assert ctx.params["quiet"] is True and ctx.params["debug"] is True
        assert name in NO_RESULT or ctx.params["json"] is True


def test_an_option_means_the_same_thing_in_every_command():
    meanings: dict[str, dict[str, tuple]] = {}
    for command, cmd in COMMANDS.items():
        for param in cmd.params:
            meanings.setdefault(param.name, {})[command] = meaning(param)
    for name, by_command in meanings.items():
        ruled = {c: m for c, m in by_command.items() if not (c == "compare" and name in COMPARE_LISTS)}
        assert len(set(ruled.values())) <= 1, (name, ruled)


def test_a_flag_names_one_option_in_every_command():
    owner: dict[str, str] = {}
    for command, cmd in COMMANDS.items():
        for param in cmd.params:
            for flag in (*param.opts, *param.secondary_opts):
                if flag.startswith("-"):
                    assert owner.setdefault(flag, param.name) == param.name, (command, flag)


def test_targets_takes_quiet_and_json(mcd):
    code, table, err = mcd(["targets"])
    assert code == 0, err
    code, out, err = mcd(["targets", "-q"])
    assert code == 0, err
    assert out == table and "gmm8" in out and err == ""  # quiet never hides the result
    code, out, err = mcd(["targets", "-q", "--json"])
    assert code == 0 and err == ""
    rows = records(out)
    assert rows and all(set(r) == {"name", "dim", "log_z", "description", "path"} for r in rows)
    assert "gmm8" in {r["name"] for r in rows}


def test_check_takes_quiet(mcd, gauss_yaml):
    code, out, err = mcd(["check", gauss_yaml, "-q", "--json"])
    assert code == 0, err
    (report,) = records(out)
    assert report["ok"] is True and err == ""


def test_version_names_mcd_cli_jax_and_jaxlib(mcd):
    code, out, err = mcd(["--version"])
    assert code == 0, err
    assert out == f"mcd-cli {__version__} (jax {metadata.version('jax')}, jaxlib {metadata.version('jaxlib')})\n"


# Runs `mcd --version` in a fresh process (this one may have used a device already) and reports
# whether JAX's backends were initialised afterwards.
_VERSION_THEN_BACKENDS = """
import json
from typer.testing import CliRunner
from mcd_cli.cli import app
result = CliRunner().invoke(app, ["--version"])
from jax._src import xla_bridge
probe = getattr(xla_bridge, "backends_are_initialized", None)
initialised = probe() if probe is not None else bool(xla_bridge._backends)
print(json.dumps({"code": result.exit_code, "out": result.stdout, "initialised": initialised}))
"""


def test_version_initialises_no_device():
    done = subprocess.run(
        [sys.executable, "-c", _VERSION_THEN_BACKENDS], capture_output=True, text=True, timeout=120, check=True
    )
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["code"] == 0 and report["out"].startswith(f"mcd-cli {__version__} (jax ")
    assert report["initialised"] is False
