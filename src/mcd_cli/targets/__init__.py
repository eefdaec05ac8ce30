"""Targets: unnormalised log densities on R^d, loaded from Python or YAML files, and checked.

Public names:
    Target, TargetError: the target and the one-line error every bad input raises.
    load_target(spec, params, stdin_text=...): a .py/.yaml file, a bundled name, or "-" (stdin).
    bundled_targets(): the ready-to-run targets shipped in the repository's `targets/` folder.
    check(target): evaluates the density and gradient at draws from the initial distribution.
    CheckReport: what `check` found.
    FAMILIES: the built-in families a YAML file can name with `family:`.
"""

from mcd_cli.targets.base import Target, TargetError
from mcd_cli.targets.check import CheckReport, check
from mcd_cli.targets.families import FAMILIES
from mcd_cli.targets.loading import bundled_targets, load_target

__all__ = ["Target", "TargetError", "load_target", "bundled_targets", "check", "CheckReport", "FAMILIES"]
