"""The record of a run and its words.

`records`: the typed, frozen record of one run (`RunRecord`) and its JSON line (docs/json.md);
`data`: a conditional target's, one per datum (`DatumRecord`) and the summary (`DataRecord`). `messages`: the only
module that turns the verdict's reason codes into sentences and advice.
"""

from mcd_cli.record.data import DataRecord, DatumRecord, datum_record
from mcd_cli.record.records import SCHEMA_VERSION, RunRecord, TargetInfo, comparison_record, finite, smc_section

__all__ = [
    "SCHEMA_VERSION", "DataRecord", "DatumRecord", "RunRecord", "TargetInfo", "comparison_record", "datum_record",
    "finite", "smc_section",
]
