"""What the compaction services report: a schedule's and an execution's outcome and numbers."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from airflow_lake_provider.lake.services.compaction.plan import CompactionPlan
from airflow_lake_provider.lake.timeline.commit_metadata import WriteStat


class Outcome(str, Enum):
    SCHEDULED = "SCHEDULED"
    COMPLETED = "COMPLETED"
    ALREADY_COMPLETED = "ALREADY_COMPLETED"
    NO_WORK = "NO_WORK"
    # A dry run (schedule or execute): what would be done; nothing written. Clean and partition
    # commit use the same name (it was DRY_RUN, or SCHEDULED with dry_run true).
    PLANNED = "PLANNED"


@dataclass(frozen=True)
class ScheduleResult:
    """What ``schedule_compaction`` did; with ``dry_run`` the plan was computed but not written."""

    outcome: Outcome
    instant: str | None = None
    plan: CompactionPlan | None = None
    reason: str = ""
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "instant": self.instant,
            "dry_run": self.dry_run,
            "reason": self.reason,
            "plan": self.plan.summary() if self.plan else None,
        }


@dataclass(frozen=True)
class CompactionResult:
    """What ``execute_compaction`` did at ``instant``."""

    outcome: Outcome
    instant: str | None = None
    operations: int = 0
    records_written: int = 0
    log_records_merged: int = 0
    bytes_written: int = 0
    files: tuple[str, ...] = ()
    recovered: bool = False
    removed_files: tuple[str, ...] = ()
    duration_seconds: float = 0.0
    stats: tuple[WriteStat, ...] = field(default=(), repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "instant": self.instant,
            "operations": self.operations,
            "records_written": self.records_written,
            "log_records_merged": self.log_records_merged,
            "bytes_written": self.bytes_written,
            "files": list(self.files),
            "recovered": self.recovered,
            "removed_files": list(self.removed_files),
            "duration_seconds": round(self.duration_seconds, 3),
        }
