"""Cleaner configuration: Hudi's keys and defaults, with the Hudi 1.x ``hoodie.clean.*`` aliases."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from airflow_lake_provider.lake.errors import CleanConfigError


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


def _lookup(options: Mapping[str, object], keys: tuple[str, ...]) -> tuple[str, object] | None:
    for key in keys:
        if key in options and options[key] is not None and options[key] != "":
            return key, options[key]
    return None


def _int(options: Mapping[str, object], keys: tuple[str, ...], default: int, minimum: int) -> int:
    found = _lookup(options, keys)
    if found is None:
        return default
    key, raw = found
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise CleanConfigError(f"{key}={raw!r} is not a whole number") from None
    if value < minimum:
        raise CleanConfigError(f"{key}={value} must be at least {minimum}")
    return value


def _bool(options: Mapping[str, object], keys: tuple[str, ...], default: bool) -> bool:
    found = _lookup(options, keys)
    if found is None:
        return default
    key, raw = found
    text = str(raw).strip().lower()
    if text not in ("true", "false"):
        raise CleanConfigError(f"{key}={raw!r} is not true or false")
    return text == "true"


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
        merged: dict[str, object] = {}
        for layer in layers:
            merged.update({k: v for k, v in layer.items() if v is not None})
        policy_found = _lookup(merged, POLICY_KEYS)
        policy = CleanPolicy.KEEP_LATEST_COMMITS
        if policy_found is not None:
            key, raw = policy_found
            try:
                policy = CleanPolicy(str(raw).strip().upper())
            except ValueError:
                names = ", ".join(p.value for p in CleanPolicy)
                raise CleanConfigError(f"{key}={raw!r} is not one of {names}") from None
        return cls(
            policy=policy,
            commits_retained=_int(merged, COMMITS_KEYS, 10, 1),
            file_versions_retained=_int(merged, VERSIONS_KEYS, 3, 1),
            hours_retained=_int(merged, HOURS_KEYS, 24, 0),
            max_commits=_int(merged, MAX_COMMITS_KEYS, 1, 0),
            allow_multiple=_bool(merged, ALLOW_MULTIPLE_KEYS, True),
            incremental=_bool(merged, INCREMENTAL_KEYS, True),
        )

    def retention_option(self, retained: int) -> dict[str, str]:
        """The option that sets ``retained`` for this config's policy (the CLI's ``--retained``)."""
        key = {
            CleanPolicy.KEEP_LATEST_COMMITS: COMMITS_KEYS[0],
            CleanPolicy.KEEP_LATEST_FILE_VERSIONS: VERSIONS_KEYS[0],
            CleanPolicy.KEEP_LATEST_BY_HOURS: HOURS_KEYS[0],
        }[self.policy]
        return {key: str(retained)}
