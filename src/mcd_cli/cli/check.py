"""`mcd check`: does a target work? Finite values and gradients, jit, vmap, speed."""

from __future__ import annotations

import json as jsonlib

from mcd_cli import report
from mcd_cli.cli import settings
from mcd_cli.cli.app import app
from mcd_cli.cli.options import takes
from mcd_cli.errors import RunFailed
from mcd_cli.record import finite
from mcd_cli.targets.conditional import ConditionalTarget, first_datum


@app.command()
@takes("target", "param", "model", "data", "json", "quiet", "x64", "debug")
def check(target, param, model, data, json, quiet, x64, debug) -> None:
    """Validate TARGET: its log density and gradient at draws from the initial distribution.

    Exits 1 when the target is not usable as it stands.
    """
    from mcd_cli.targets import check as check_target

    with settings.precision(x64):
        target_obj = settings.load_target(target, settings.parse_params(param), model, data).target
        if isinstance(target_obj, ConditionalTarget):
            target_obj = first_datum(target_obj)
        result = check_target(target_obj)
    if json:
        data = result.as_dict()
        data["reference_log_z"] = finite(target_obj.log_z)
        print(jsonlib.dumps(data, default=str))
    else:
        report.stdout_console().print(report.check_table(target_obj, result))
    if not result.ok:
        more = f" (and {len(result.problems) - 1} more)" if len(result.problems) > 1 else ""
        raise RunFailed(f"target '{target_obj.name}' failed its check: {result.problems[0]}{more}")
