"""The record of a run and its words.

`records`: the typed, frozen record of one run (`RunRecord`), of one datum (`DatumRecord`) and of a
per-datum run's summary (`DataRecord`), with their JSON lines (docs/json.md). `messages`: the only
module that turns the verdict's reason codes into sentences and advice.
"""

from mcd_cli.record.records import (
    SCHEMA_VERSION, DataRecord, DatumRecord, RunRecord, TargetInfo, comparison_record, datum_record, finite,
    smc_section,
)

__all__ = [
    "SCHEMA_VERSION", "DataRecord", "DatumRecord", "RunRecord", "TargetInfo", "comparison_record", "datum_record",
    "finite", "smc_section",
]
