"""Archival configuration: Hudi's ``hoodie.keep.*`` and ``hoodie.commits.archival.batch`` keys."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow_lake_provider.lake.errors import ArchivalConfigError
from airflow_lake_provider.lake.table.options import get_int, merge_layers

MIN_COMMITS_KEY = "hoodie.keep.min.commits"
MAX_COMMITS_KEY = "hoodie.keep.max.commits"
BATCH_KEY = "hoodie.commits.archival.batch"


@dataclass(frozen=True)
class ArchivalConfig:
    """Archive once more than ``max_commits`` completed commits are active, down to ``min_commits``."""

    min_commits: int = 20
    max_commits: int = 30
    batch: int = 10  # entries per archive block

    @classmethod
    def from_options(cls, *layers: Mapping[str, object]) -> ArchivalConfig:
        merged = merge_layers(*layers)
        config = cls(
            min_commits=get_int(merged, MIN_COMMITS_KEY, 20, 1, ArchivalConfigError),
            max_commits=get_int(merged, MAX_COMMITS_KEY, 30, 1, ArchivalConfigError),
            batch=get_int(merged, BATCH_KEY, 10, 1, ArchivalConfigError),
        )
        if config.max_commits <= config.min_commits:
            raise ArchivalConfigError(
                f"{MAX_COMMITS_KEY}={config.max_commits} must be greater than "
                f"{MIN_COMMITS_KEY}={config.min_commits}"
            )
        return config
