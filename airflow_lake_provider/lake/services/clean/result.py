"""What a clean run reports: its outcome, the plan, what was deleted and what held it back."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from airflow_lake_provider.lake.services.clean.config import CleanPolicy
from airflow_lake_provider.lake.services.clean.plan import CleanPlan


class Outcome(str, Enum):
    CLEANED = "CLEANED"  # a clean instant completed
    SCHEDULED = "SCHEDULED"  # a plan was written, not executed (mode schedule)
    PLANNED = "PLANNED"  # dry run: the plan was computed, nothing written
    NO_WORK = "NO_WORK"  # nothing to delete: no instant written


@dataclass(frozen=True)
class DeleteOutcome:
    deleted: tuple[str, ...]
    failed: tuple[str, ...]


@dataclass(frozen=True)
class CleanResult:
    outcome: Outcome
    instant: str | None = None
    plan: CleanPlan | None = None
    deleted_files: int = 0
    failed_files: int = 0
    finished_pending: tuple[str, ...] = ()
    duration_seconds: float = 0.0
    reason: str = ""
    # Planned files kept because a savepoint made after the plan needs them.
    kept_for_savepoints: tuple[str, ...] = ()
    # Pending (failed or running) writes that held the earliest commit to retain back.
    held_back_by: tuple[str, ...] = ()
    # The policy in effect, reported when no plan carries one (NO_WORK).
    policy: CleanPolicy | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (pushed to XCom, printed by the CLI and the Spark job)."""
        summary = self.plan.summary() if self.plan else {}
        policy = self.plan.policy if self.plan else self.policy
        return {
            "outcome": self.outcome.value,
            "instant": self.instant,
            "earliest_commit_to_retain": (
                self.plan.earliest_instant_to_retain.timestamp
                if self.plan and self.plan.earliest_instant_to_retain
                else None
            ),
            "policy": policy.value if policy else None,
            "files_planned": self.plan.file_count if self.plan else 0,
            "bytes_planned": sum(p["bytes"] for p in summary.values()),
            "partitions": summary,
            "deleted_files": self.deleted_files,
            "failed_files": self.failed_files,
            "finished_pending": list(self.finished_pending),
            "kept_for_savepoints": list(self.kept_for_savepoints),
            "held_back_by": list(self.held_back_by),
            "duration_seconds": round(self.duration_seconds, 3),
            "reason": self.reason,
        }
