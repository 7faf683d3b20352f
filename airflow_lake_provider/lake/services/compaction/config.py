"""Compaction configuration, read from the option registry (Hudi's ``hoodie.compact*`` keys, Flink's
``compaction.*`` aliases), validated once."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from airflow_lake_provider.lake.config import registry as r
from airflow_lake_provider.lake.config.registry import DEFAULT_STRATEGY, STRATEGY_PACKAGE
from airflow_lake_provider.lake.config.values import TriggerStrategy
from airflow_lake_provider.lake.errors import CompactionConfigError

__all__ = ["DEFAULT_STRATEGY", "STRATEGY_KEY", "STRATEGY_PACKAGE", "CompactionConfig", "TriggerStrategy"]

STRATEGY_KEY = r.COMPACTION_STRATEGY.key


@dataclass(frozen=True)
class CompactionConfig:
    """Every knob the compaction trigger and planner read, with Hudi's defaults.

    ``target_io_mb`` is Hudi's ``hoodie.compaction.target.io`` (MB per run); fractions are accepted
    so small tables can exercise the bound.
    """

    trigger: TriggerStrategy = TriggerStrategy.NUM_COMMITS
    max_delta_commits: int = 5
    max_delta_seconds: int = 3600
    strategy: str = DEFAULT_STRATEGY
    log_size_threshold: int = 0
    log_num_threshold: int = 0
    target_io_mb: float = 512000.0
    day_partitions: int = 10
    partition_regex: str | None = None

    @classmethod
    def from_options(cls, *layers: Mapping[str, object]) -> CompactionConfig:
        """Build from option layers, later ones overriding earlier (e.g. table properties, then user)."""
        config = cls(
            trigger=r.COMPACT_TRIGGER.read(*layers),
            max_delta_commits=r.COMPACT_MAX_DELTA_COMMITS.read(*layers),
            max_delta_seconds=r.COMPACT_MAX_DELTA_SECONDS.read(*layers),
            strategy=r.COMPACTION_STRATEGY.read(*layers),
            log_size_threshold=r.COMPACTION_LOG_SIZE_THRESHOLD.read(*layers),
            log_num_threshold=r.COMPACTION_LOG_NUM_THRESHOLD.read(*layers),
            target_io_mb=r.COMPACTION_TARGET_IO.read(*layers),
            day_partitions=r.COMPACTION_DAY_PARTITIONS.read(*layers),
            partition_regex=r.COMPACTION_PARTITION_REGEX.read(*layers),
        )
        strategy_kinds(config.strategy)  # now, so a misspelt name fails before anything is planned
        return config


def normalize_strategy_name(name: str) -> str:
    """``org.apache...LogFileSizeBasedCompactionStrategy`` and ``log_file_size`` both give ``logfilesize``."""
    short = name.strip().rsplit(".", 1)[-1].lower()
    short = re.sub(r"[^a-z0-9]", "", short)
    for suffix in ("compactionstrategy", "strategy"):
        short = short.removesuffix(suffix)
    return short.removesuffix("based")


# Normalised strategy names (Hudi's class names and short forms) -> the kind of strategy they build.
_KINDS = {
    "logfilesize": "logfilesize",
    "logfilenum": "logfilenum",
    "logfilecount": "logfilenum",
    "boundedio": "boundedio",
    "day": "day",
    "daybasedandboundedio": "dayio",
    "dayandboundedio": "dayio",
    "boundedpartitionaware": "boundedpartitionaware",
    "unboundedpartitionaware": "unboundedpartitionaware",
    "unbounded": "unbounded",
    "partitionregex": "partitionregex",
}
_KNOWN = (
    "LogFileSizeBased, LogFileNumBased, BoundedIO, DayBased, DayBasedAndBoundedIO, "
    "BoundedPartitionAware, UnBoundedPartitionAware, UnBounded, PartitionRegexBased"
)


def strategy_kinds(strategy: str) -> list[str]:
    """The kinds of the strategies ``hoodie.compaction.strategy`` names (comma-joined), checked."""
    names = [n for n in strategy.split(",") if n.strip()]
    if not names:
        raise CompactionConfigError(f"{STRATEGY_KEY}={strategy!r} names no strategy")
    kinds = []
    for name in names:
        kind = _KINDS.get(normalize_strategy_name(name))
        if kind is None:
            raise CompactionConfigError(
                f"{STRATEGY_KEY}: unknown strategy {name.strip()!r} (known: {_KNOWN})"
            )
        kinds.append(kind)
    return kinds
