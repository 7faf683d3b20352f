"""A partition commit plan: the decision the planner took for each partition asked."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from enum import Enum

from airflow_lake_provider.lake.services.partition_commit.config import Trigger
from airflow_lake_provider.lake.services.partition_commit.extractor import PartitionValues


class Decision(str, Enum):
    DUE = "DUE"  # commit now (first commit, a crashed commit to finish, or late data re-committed)
    WAITING = "WAITING"  # written, but the trigger has not fired yet
    COMMITTED = "COMMITTED"  # committed before and nothing new (or late data not re-committed)
    MISSING = "MISSING"  # no completed write in this partition


@dataclass(frozen=True)
class PartitionDecision:
    partition: str
    decision: Decision
    values: PartitionValues = ()
    partition_time: dt.datetime | None = None  # naive, in the watermark time zone
    first_write: str | None = None
    writes: tuple[str, ...] = ()
    late_writes: tuple[str, ...] = ()  # writes after the last commit of a committed partition
    resume: bool = False  # a crashed commit: only the policies not yet applied run
    reason: str = ""


@dataclass(frozen=True)
class CommitPlan:
    trigger: Trigger
    now: dt.datetime
    watermark: dt.datetime | None
    decisions: tuple[PartitionDecision, ...]

    def due(self) -> list[PartitionDecision]:
        return [d for d in self.decisions if d.decision is Decision.DUE]

    def with_decision(self, decision: Decision) -> list[PartitionDecision]:
        return [d for d in self.decisions if d.decision is decision]
