"""What people and pipelines see: rich tables on stdout, JSON lines, progress bars on stderr.

Nothing here computes an estimate; the functions take a record's JSON form (`RunRecord.as_dict()`,
documented in docs/json.md, every number finite or `None`) and turn it into text. `ProgressDisplay`
implements the run layer's `Progress` protocol with rich progress bars.

Modules: `format` (numbers, verdicts, warnings as text; consoles), `tables`, `progress`.
"""

from mcd_cli.report.format import (
    SPARK_BARS, fmt, fmt_log_z, fmt_pareto, fmt_status, method_name, moves_text, per_datum_smc_line, smc_line,
    sparkline, stderr_console, stdout_console, to_json, warnings_for,
)
from mcd_cli.report.progress import ProgressDisplay
from mcd_cli.report.tables import (
    bayes_factor_table, check_table, compare_table, estimate_table, per_datum_table, targets_table,
)

__all__ = [
    "SPARK_BARS", "fmt", "fmt_log_z", "fmt_pareto", "fmt_status", "method_name", "moves_text", "per_datum_smc_line", "smc_line", "sparkline",
    "stderr_console", "stdout_console", "to_json", "warnings_for", "ProgressDisplay", "bayes_factor_table",
    "check_table", "compare_table", "estimate_table", "per_datum_table", "targets_table",
]
