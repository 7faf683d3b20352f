"""Cleaner configuration: Hudi's keys and defaults, with the Hudi 1.x ``hoodie.clean.*`` aliases."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from airflow_lake_provider.lake.errors import CleanConfigError
from airflow_lake_provider.lake.table.options import JAVA_INT_MAX, get_bool, get_int, lookup, merge_layers


class CleanPolicy(str, Enum):
    KEEP_LATEST_COMMITS = "KEEP_LATEST_COMMITS"
    KEEP_LATEST_FILE_VERSIONS = "KEEP_LATEST_FILE_VERSIONS"
    KEEP_LATEST_BY_HOURS = "KEEP_LATEST_BY_HOURS"


# Each setting: the 0.x key first, then the names Hudi 1.x also accepts.
POLICY_KEYS = ("hoodie.cleaner.policy", "hoodie.clean.policy")
COMMITS_KEYS = ("hoodie.cleaner.commits.retained", "hoodie.clean.commits.retained")
VERSIONS_KEYS = ("hoodie.cleaner.fileversions.retained", "hoodie.clean.fileversions.retained")
HOURS_KEYS = ("hoodie.cleaner.hours.retained", "hoodie.clean.hours.retained")
MAX_COMMITS_KEYS = ("hoodie.clean.max.commits", "hoodie.clean.trigger.max.commits")
ALLOW_MULTIPLE_KEYS = ("hoodie.clean.allow.multiple", "hoodie.clean.multiple.enabled")
INCREMENTAL_KEYS = ("hoodie.cleaner.incremental.mode", "hoodie.clean.incremental.enabled")


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
        merged = merge_layers(*layers)
        policy_found = lookup(merged, POLICY_KEYS)
        policy = CleanPolicy.KEEP_LATEST_COMMITS
        if policy_found is not None:
            key, raw = policy_found
            try:
                policy = CleanPolicy(raw.upper())
            except ValueError:
                names = ", ".join(p.value for p in CleanPolicy)
                raise CleanConfigError(f"{key}={raw!r} is not one of {names}") from None
        return cls(
            policy=policy,
            commits_retained=get_int(merged, COMMITS_KEYS, 10, 1, CleanConfigError),
            file_versions_retained=get_int(merged, VERSIONS_KEYS, 3, 1, CleanConfigError),
            hours_retained=get_int(merged, HOURS_KEYS, 24, 0, CleanConfigError, JAVA_INT_MAX),
            max_commits=get_int(merged, MAX_COMMITS_KEYS, 1, 0, CleanConfigError),
            allow_multiple=get_bool(merged, ALLOW_MULTIPLE_KEYS, True, CleanConfigError),
            incremental=get_bool(merged, INCREMENTAL_KEYS, True, CleanConfigError),
        )

    def retention_option(self, retained: int) -> dict[str, str]:
        """The option that sets ``retained`` for this config's policy (the CLI's ``--retained``)."""
        key = {
            CleanPolicy.KEEP_LATEST_COMMITS: COMMITS_KEYS[0],
            CleanPolicy.KEEP_LATEST_FILE_VERSIONS: VERSIONS_KEYS[0],
            CleanPolicy.KEEP_LATEST_BY_HOURS: HOURS_KEYS[0],
        }[self.policy]
        return {key: str(retained)}
