"""Partition commit configuration: the Flink filesystem connector's option names and defaults."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from airflow_lake_provider.lake.errors import PartitionCommitConfigError
from airflow_lake_provider.lake.services.partition_commit.success_file import (
    SUCCESS_FILE_KEY,
    check_success_file_name,
)
from airflow_lake_provider.lake.table.options import get_str, lookup, merge_layers

TRIGGER_KEY = "sink.partition-commit.trigger"
DELAY_KEY = "sink.partition-commit.delay"
TIME_ZONE_KEY = "sink.partition-commit.watermark-time-zone"
POLICY_KIND_KEY = "sink.partition-commit.policy.kind"
POLICY_CLASS_KEY = "sink.partition-commit.policy.class"
EXTRACTOR_KIND_KEY = "partition.time-extractor.kind"
EXTRACTOR_CLASS_KEY = "partition.time-extractor.class"
PATTERN_KEY = "partition.time-extractor.timestamp-pattern"
FORMATTER_KEY = "partition.time-extractor.timestamp-formatter"
# Our own additions (Flink has no table-side watermark and always re-commits late data).
LATENESS_KEY = "lake.partition-commit.watermark.allowed-lateness"
RECOMMIT_KEY = "lake.partition-commit.late-data.recommit"
EVENT_TIME_FIELD_KEY = "hoodie.payload.event.time.field"
# Target size of merge-small-files outputs: Flink's compaction option name, then ours.
TARGET_SIZE_KEYS = ("compaction.file-size", "lake.partition-commit.merge-small-files.target-file-size")
DEFAULT_TARGET_SIZE = 128 * 1024 * 1024  # Flink's rolling file size, the default of compaction.file-size


class Trigger(str, Enum):
    PROCESS_TIME = "process-time"
    PARTITION_TIME = "partition-time"


class PolicyKind(str, Enum):
    SUCCESS_FILE = "success-file"
    METASTORE = "metastore"
    CUSTOM = "custom"
    MERGE_SMALL_FILES = "merge-small-files"


# Flink's duration units (TimeUtils.parseDuration); a bare number is milliseconds, as there.
_UNITS = {
    **dict.fromkeys(("ms", "milli", "millis", "millisecond", "milliseconds"), 0.001),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1.0),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hour", "hours"), 3600.0),
    **dict.fromkeys(("d", "day", "days"), 86400.0),
}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")


def parse_duration(value: object, what: str = DELAY_KEY) -> dt.timedelta:
    """A Flink duration (``0 s``, ``1 h``, ``30min``, ``1 d``; a bare number is ms) or a timedelta."""
    if isinstance(value, dt.timedelta):
        if value < dt.timedelta(0):
            raise PartitionCommitConfigError(f"{what}={value} must not be negative")
        return value
    text = str(value)
    match = _DURATION.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if match is None or (unit and unit not in _UNITS):
        raise PartitionCommitConfigError(
            f"{what}={text!r} is not a duration such as '0 s', '30 min', '1 h' or '1 d'"
        )
    try:
        delay = dt.timedelta(seconds=float(match.group(1)) * _UNITS[unit or "ms"])
    except OverflowError:
        raise PartitionCommitConfigError(f"{what}={text!r} is longer than any date range") from None
    if delay > _LONGEST:
        raise PartitionCommitConfigError(f"{what}={text!r} is longer than {_LONGEST.days} days")
    return delay


# Delays beyond this cannot be added to a time without leaving the calendar: refused up front.
_LONGEST = dt.timedelta(days=365 * 1000)


_SIZE = re.compile(r"\s*(\d+)\s*([a-zA-Z]*)\s*")
_SIZE_UNITS = {"": 1, "b": 1, "kb": 1024, "k": 1024, "mb": 1024**2, "m": 1024**2, "gb": 1024**3, "g": 1024**3}


def parse_size(value: object, what: str = TARGET_SIZE_KEYS[0]) -> int:
    """A memory size as Flink writes it (``128mb``, ``1 gb``, ``65536``), in bytes."""
    match = _SIZE.fullmatch(str(value))
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS or int(match.group(1)) <= 0:
        raise PartitionCommitConfigError(f"{what}={value!r} is not a positive size such as '128mb' or '1 gb'")
    return int(match.group(1)) * _SIZE_UNITS[unit]


def parse_policies(value: object) -> tuple[PolicyKind, ...]:
    """``success-file,metastore`` -> kinds in the order given (applied in that order)."""
    names = [p.strip().lower() for p in str(value).split(",") if p.strip()]
    if not names:
        raise PartitionCommitConfigError(f"{POLICY_KIND_KEY}={value!r} names no policy")
    kinds: list[PolicyKind] = []
    for name in names:
        try:
            kind = PolicyKind(name)
        except ValueError:
            known = ", ".join(k.value for k in PolicyKind)
            raise PartitionCommitConfigError(
                f"{POLICY_KIND_KEY}: unknown policy {name!r} (known: {known})"
            ) from None
        if kind not in kinds:
            kinds.append(kind)
    return tuple(kinds)


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


def _bool(options: Mapping[str, object], key: str) -> bool:
    raw = get_str(options, key)
    if raw is None:
        return False
    if raw.lower() not in ("true", "false"):
        raise PartitionCommitConfigError(f"{key}={raw!r} is not true or false")
    return raw.lower() == "true"


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
        merged = merge_layers(*layers)
        raw_trigger = get_str(merged, TRIGGER_KEY) or Trigger.PROCESS_TIME.value
        try:
            trigger = Trigger(raw_trigger.lower())
        except ValueError:
            raise PartitionCommitConfigError(
                f"{TRIGGER_KEY}={raw_trigger!r} is not process-time or partition-time"
            ) from None
        zone = get_str(merged, TIME_ZONE_KEY) or "UTC"
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise PartitionCommitConfigError(f"{TIME_ZONE_KEY}={zone!r} is not a known time zone") from None
        policies = parse_policies(get_str(merged, POLICY_KIND_KEY) or PolicyKind.SUCCESS_FILE.value)
        policy_class = get_str(merged, POLICY_CLASS_KEY)
        success = check_success_file_name(get_str(merged, SUCCESS_FILE_KEY) or "_SUCCESS")
        kind = (get_str(merged, EXTRACTOR_KIND_KEY) or "default").lower()
        extractor_class = get_str(merged, EXTRACTOR_CLASS_KEY)
        if kind not in ("default", "custom"):
            raise PartitionCommitConfigError(f"{EXTRACTOR_KIND_KEY}={kind!r} is not default or custom")
        if kind == "custom" and not extractor_class:
            raise PartitionCommitConfigError(f"{EXTRACTOR_KIND_KEY}=custom needs {EXTRACTOR_CLASS_KEY}")
        return cls(
            trigger=trigger,
            delay=parse_duration(get_str(merged, DELAY_KEY) or "0", DELAY_KEY),
            watermark_time_zone=zone,
            policies=policies,
            policy_class=policy_class,
            success_file_name=success,
            extractor_class=extractor_class if kind == "custom" else None,
            timestamp_pattern=get_str(merged, PATTERN_KEY),
            timestamp_formatter=get_str(merged, FORMATTER_KEY),
            allowed_lateness=parse_duration(get_str(merged, LATENESS_KEY) or "0", LATENESS_KEY),
            recommit_late_data=_bool(merged, RECOMMIT_KEY),
            event_time_field=get_str(merged, EVENT_TIME_FIELD_KEY),
            target_file_size=_target_size(merged),
        )


def _target_size(options: Mapping[str, object]) -> int:
    found = lookup(options, TARGET_SIZE_KEYS)
    return DEFAULT_TARGET_SIZE if found is None else parse_size(found[1], found[0])
