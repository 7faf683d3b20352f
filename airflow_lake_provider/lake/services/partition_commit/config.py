"""Partition commit configuration, read from the option registry (the Flink filesystem connector's
option names and defaults)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from airflow_lake_provider.lake.config import checked, parsers
from airflow_lake_provider.lake.config import registry as r
from airflow_lake_provider.lake.config.values import PartitionCommitTrigger as Trigger
from airflow_lake_provider.lake.config.values import PolicyKind
from airflow_lake_provider.lake.errors import PartitionCommitConfigError

TRIGGER_KEY = r.PC_TRIGGER.key
DELAY_KEY = r.PC_DELAY.key
TIME_ZONE_KEY = r.PC_TIME_ZONE.key
POLICY_KIND_KEY = r.PC_POLICY_KIND.key
POLICY_CLASS_KEY = r.PC_POLICY_CLASS.key
EXTRACTOR_KIND_KEY = r.PC_EXTRACTOR_KIND.key
EXTRACTOR_CLASS_KEY = r.PC_EXTRACTOR_CLASS.key
PATTERN_KEY = r.PC_PATTERN.key
FORMATTER_KEY = r.PC_FORMATTER.key
LATENESS_KEY = r.PC_LATENESS.key
RECOMMIT_KEY = r.PC_RECOMMIT.key
TARGET_SIZE_KEYS = r.PC_TARGET_FILE_SIZE.names
DEFAULT_TARGET_SIZE = r.PC_TARGET_FILE_SIZE.default

__all__ = ["PartitionCommitConfig", "PolicyKind", "Trigger", "parse_duration", "parse_policies", "parse_size"]


def parse_duration(value: object, what: str = DELAY_KEY) -> dt.timedelta:
    """A Flink duration (``0 s``, ``1 h``, ``30min``, ``1 d``; a bare number is ms) or a timedelta."""
    return parsers.duration(what, value, PartitionCommitConfigError)


def parse_size(value: object, what: str = TARGET_SIZE_KEYS[0]) -> int:
    """A memory size as Flink writes it (``128mb``, ``1 gb``, ``65536``), in bytes."""
    return parsers.size(what, value, PartitionCommitConfigError)


def parse_policies(value: object) -> tuple[PolicyKind, ...]:
    """``success-file,metastore`` -> kinds in the order given (applied in that order)."""
    return checked.policy_kinds(POLICY_KIND_KEY, str(value), PartitionCommitConfigError)


def check_metastore_location(table_uri: str) -> None:
    """Refuse the ``metastore`` policy for a table outside the local file system, before Spark starts.

    Its Spark job gives Hive each partition's location, which Hive resolves through Hadoop's file
    systems; the pip pyspark ships no S3 connector (no hadoop-aws jar), so on an ``s3://`` table the
    job failed only after Spark's start, with a long Java trace (``No FileSystem for scheme "s3"``).
    """
    scheme, sep, _ = table_uri.partition("://")
    if sep and scheme.lower() != "file":
        raise PartitionCommitConfigError(
            f"{table_uri}: the metastore policy works on local tables only (its Spark job has no "
            f"{scheme}:// file system: pyspark ships no hadoop-aws connector); commit with "
            f"{POLICY_KIND_KEY}=success-file, or register the partitions in your catalog with a "
            "custom policy"
        )


@dataclass(frozen=True)
class PartitionCommitConfig:
    trigger: Trigger = Trigger.PROCESS_TIME
    delay: dt.timedelta = dt.timedelta(0)
    watermark_time_zone: str = "UTC"
    policies: tuple[PolicyKind, ...] = (PolicyKind.SUCCESS_FILE,)
    policy_class: str | None = None
    success_file_name: str = "_SUCCESS"
    extractor_class: str | None = None
    timestamp_pattern: str | None = None
    timestamp_formatter: str | None = None
    allowed_lateness: dt.timedelta = dt.timedelta(0)
    recommit_late_data: bool = False
    event_time_field: str | None = None
    target_file_size: int = DEFAULT_TARGET_SIZE

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.watermark_time_zone)

    @classmethod
    def from_options(cls, *layers: Mapping[str, object]) -> PartitionCommitConfig:
        """Build from option layers, later ones overriding earlier (table properties, then the caller's)."""
        zone = r.PC_TIME_ZONE.read(*layers)
        kind = r.PC_EXTRACTOR_KIND.read(*layers)
        extractor_class = r.PC_EXTRACTOR_CLASS.read(*layers)
        if kind == "custom" and not extractor_class:
            raise PartitionCommitConfigError(f"{EXTRACTOR_KIND_KEY}=custom needs {EXTRACTOR_CLASS_KEY}")
        return cls(
            trigger=r.PC_TRIGGER.read(*layers),
            delay=r.PC_DELAY.read(*layers),
            watermark_time_zone=zone,
            policies=parse_policies(r.PC_POLICY_KIND.read(*layers)),
            policy_class=r.PC_POLICY_CLASS.read(*layers),
            success_file_name=r.PC_SUCCESS_FILE.read(*layers),
            extractor_class=extractor_class if kind == "custom" else None,
            timestamp_pattern=r.PC_PATTERN.read(*layers),
            timestamp_formatter=r.PC_FORMATTER.read(*layers),
            allowed_lateness=r.PC_LATENESS.read(*layers),
            recommit_late_data=r.PC_RECOMMIT.read(*layers),
            event_time_field=r.EVENT_TIME_FIELD.read(*layers),
            target_file_size=r.PC_TARGET_FILE_SIZE.read(*layers),
        )
