"""Cleaner configuration, read from the option registry (Hudi's keys, 1.x and Flink aliases)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from airflow_lake_provider.lake.config import registry as r
from airflow_lake_provider.lake.config.values import CleanPolicy

__all__ = ["POLICY_KEYS", "CleanConfig", "CleanPolicy"]

POLICY_KEYS = r.CLEAN_POLICY.names


@dataclass(frozen=True)
class CleanConfig:
    policy: CleanPolicy = CleanPolicy.KEEP_LATEST_COMMITS
    commits_retained: int = 10
    file_versions_retained: int = 3
    hours_retained: int = 24
    max_commits: int = 1
    allow_multiple: bool = True
    incremental: bool = True

    @classmethod
    def from_options(cls, *layers: Mapping[str, object]) -> CleanConfig:
        """Build from option layers, later ones overriding earlier (e.g. table properties, then user)."""
        return cls(
            policy=r.CLEAN_POLICY.read(*layers),
            commits_retained=r.CLEAN_COMMITS_RETAINED.read(*layers),
            file_versions_retained=r.CLEAN_FILE_VERSIONS_RETAINED.read(*layers),
            hours_retained=r.CLEAN_HOURS_RETAINED.read(*layers),
            max_commits=r.CLEAN_MAX_COMMITS.read(*layers),
            allow_multiple=r.CLEAN_ALLOW_MULTIPLE.read(*layers),
            incremental=r.CLEAN_INCREMENTAL.read(*layers),
        )

    def retention_option(self, retained: int) -> dict[str, str]:
        """The option that sets ``retained`` for this config's policy (the CLI's ``--retained``)."""
        key = {
            CleanPolicy.KEEP_LATEST_COMMITS: r.CLEAN_COMMITS_RETAINED.key,
            CleanPolicy.KEEP_LATEST_FILE_VERSIONS: r.CLEAN_FILE_VERSIONS_RETAINED.key,
            CleanPolicy.KEEP_LATEST_BY_HOURS: r.CLEAN_HOURS_RETAINED.key,
        }[self.policy]
        return {key: str(retained)}
