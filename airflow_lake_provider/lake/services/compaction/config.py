"""Compaction configuration, read from the option registry (Hudi's ``hoodie.compact*`` keys, Flink's
``compaction.*`` aliases), validated once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow_lake_provider.lake.config import checked
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
        return config


def strategy_kinds(strategy: str) -> list[str]:
    """The kinds of the strategies ``hoodie.compaction.strategy`` names (comma-joined), checked."""
    return checked.strategy_kinds(STRATEGY_KEY, strategy, CompactionConfigError)
