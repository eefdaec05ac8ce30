"""`mcd targets`: the bundled targets."""

from __future__ import annotations

import json as jsonlib

from mcd_cli import report
from mcd_cli.cli.app import app
from mcd_cli.cli.options import takes
from mcd_cli.record import finite


@app.command()
@takes("json", "quiet", "debug")
def targets(json, quiet, debug) -> None:
    """List the bundled targets: name, dimension, known log Z, description, path."""
    from mcd_cli.targets import bundled_targets

    rows = [_row(t) for t in bundled_targets()]
    if json:
        for row in rows:
            print(jsonlib.dumps(row, default=str))
    else:
        report.stdout_console().print(report.targets_table(rows))


def _row(item: dict) -> dict:
    row = dict(item)
    row.setdefault("path", row.get("source"))
    row["log_z"] = finite(row.get("log_z"))
    return {k: row.get(k) for k in ("name", "dim", "log_z", "description", "path")}
