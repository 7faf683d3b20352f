"""Archival configuration, read from the option registry (``hoodie.keep.*``, Flink's ``archive.*``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow_lake_provider.lake.config import registry as r
from airflow_lake_provider.lake.config.values import TriggerStrategy
from airflow_lake_provider.lake.errors import ArchivalConfigError

MIN_COMMITS_KEY = r.KEEP_MIN_COMMITS.key
MAX_COMMITS_KEY = r.KEEP_MAX_COMMITS.key
BATCH_KEY = r.ARCHIVAL_BATCH.key


@dataclass(frozen=True)
class ArchivalConfig:
    """Archive once more than ``max_commits`` completed commits are active, down to ``min_commits``.

    ``compaction_trigger`` and ``max_delta_commits`` (the compaction trigger's options): on a
    merge-on-read table archival keeps the delta commits a count-based trigger still counts."""

    min_commits: int = 20
    max_commits: int = 30
    batch: int = 10  # entries per archive block
    compaction_trigger: TriggerStrategy = TriggerStrategy.NUM_COMMITS
    max_delta_commits: int = 5

    @classmethod
    def from_options(cls, *layers: Mapping[str, object]) -> ArchivalConfig:
        config = cls(
            min_commits=r.KEEP_MIN_COMMITS.read(*layers),
            max_commits=r.KEEP_MAX_COMMITS.read(*layers),
            batch=r.ARCHIVAL_BATCH.read(*layers),
            compaction_trigger=r.COMPACT_TRIGGER.read(*layers),
            max_delta_commits=r.COMPACT_MAX_DELTA_COMMITS.read(*layers),
        )
        if config.max_commits <= config.min_commits:
            raise ArchivalConfigError(
                f"{MAX_COMMITS_KEY}={config.max_commits}{r.KEEP_MAX_COMMITS.given_in(*layers)} must be "
                f"greater than {MIN_COMMITS_KEY}={config.min_commits}{r.KEEP_MIN_COMMITS.given_in(*layers)}"
            )
        return config
