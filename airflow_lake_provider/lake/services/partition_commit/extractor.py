"""Partition values and partition time: from a partition path to ``(field, value)`` pairs, and from
those to a time with Flink's default extractor (``$field`` pattern, optional formatter) or a custom
extractor class named by its dotted path."""

from __future__ import annotations

import datetime as dt
import importlib
import re
from collections.abc import Callable, Sequence
from typing import Any

from airflow_lake_provider.lake.config.checked import strptime_format
from airflow_lake_provider.lake.errors import PartitionCommitConfigError, PartitionCommitError
from airflow_lake_provider.lake.services.partition_commit.config import (
    EXTRACTOR_CLASS_KEY,
    FORMATTER_KEY,
    PATTERN_KEY,
    POLICY_CLASS_KEY,
    PartitionCommitConfig,
)

PartitionValues = tuple[tuple[str, str], ...]
# Flink's default formatter reads "yyyy-M-d" with an optional " H:m[:s[.fraction]]".
_DEFAULT_TIME = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2})(?:[ T](\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,9}))?)?)?"
)
_VARIABLE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")


def partition_values(partition: str, fields: Sequence[str]) -> PartitionValues:
    """The partition's ``(field, value)`` pairs: hive-style segments (``year=2024``) by their names,
    plain ones by position in the table's partition fields; one field may hold a whole ``a/b/c`` path."""
    segments = [s for s in partition.split("/") if s] if partition else []
    if segments and all("=" in s for s in segments):
        return tuple((k, v) for k, _, v in (s.partition("=") for s in segments))
    if len(fields) == 1 and segments:
        name = fields[0]
        prefix = name + "="
        return ((name, partition[len(prefix) :] if partition.startswith(prefix) else partition),)
    if len(segments) != len(fields):
        raise PartitionCommitError(
            f"partition {partition!r} has {len(segments)} folder level(s), "
            f"but the table has {len(fields)} partition field(s) {list(fields)}"
        )
    return tuple(zip(fields, segments, strict=True))


def check_pattern(config: PartitionCommitConfig, fields: Sequence[str]) -> None:
    """Refuse, before anything is committed, a pattern naming a field the table does not have."""
    if config.timestamp_pattern is None:
        return
    unknown = [v for v in _VARIABLE.findall(config.timestamp_pattern) if v not in fields]
    if unknown or not _VARIABLE.search(config.timestamp_pattern):
        raise PartitionCommitConfigError(
            f"{PATTERN_KEY}={config.timestamp_pattern!r} names no partition field or unknown ones "
            f"{unknown} (the table's partition fields: {list(fields)})"
        )
    if config.timestamp_formatter is not None:
        strptime_format(FORMATTER_KEY, config.timestamp_formatter, PartitionCommitConfigError)


def load_object(dotted: str, key: str) -> object:
    """``package.module.Name`` (or ``package.module:Name``) imported; errors name the option."""
    module_name, sep, attr = dotted.replace(":", ".").rpartition(".")
    if not sep or not module_name or not attr:
        raise PartitionCommitConfigError(f"{key}={dotted!r} is not a dotted path such as pkg.module.Name")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise PartitionCommitConfigError(f"{key}={dotted!r} cannot be loaded: {exc}") from None


def _instantiate(loaded: object, dotted: str, key: str) -> object:
    """An instance of a loaded class (its constructor takes no argument); a function as it is."""
    if not isinstance(loaded, type):
        return loaded
    try:
        return loaded()
    except Exception as exc:  # user code
        raise PartitionCommitConfigError(
            f"{key}={dotted!r} cannot be instantiated: {type(exc).__name__}: {exc}"
        ) from exc


def make_extractor(config: PartitionCommitConfig) -> Callable[[str, PartitionValues], dt.datetime]:
    """A function ``(partition, values) -> naive local time`` for the configured extractor."""
    if config.extractor_class is not None:
        loaded = load_object(config.extractor_class, EXTRACTOR_CLASS_KEY)
        target = _instantiate(loaded, config.extractor_class, EXTRACTOR_CLASS_KEY)
        extract = getattr(target, "extract", target)
        if not callable(extract):
            raise PartitionCommitConfigError(
                f"{EXTRACTOR_CLASS_KEY}={config.extractor_class!r} has no extract(keys, values)"
            )

        def custom(partition: str, values: PartitionValues) -> dt.datetime:
            try:
                result = extract([k for k, _ in values], [v for _, v in values])
            except Exception as exc:  # user code: whatever it raises is its failure, named
                raise PartitionCommitError(
                    f"extractor {config.extractor_class} failed for partition {partition!r}: "
                    f"{type(exc).__name__}: {exc}; nothing was committed"
                ) from exc
            if not isinstance(result, dt.datetime):  # the same for every retry: fail now
                raise PartitionCommitConfigError(
                    f"extractor {config.extractor_class} returned {result!r} for partition {partition!r}, "
                    "not a datetime"
                )
            return result.replace(tzinfo=None) if result.tzinfo is None else _naive_in(result, config)

        return custom
    formatter = config.timestamp_formatter
    strptime = strptime_format(FORMATTER_KEY, formatter, PartitionCommitConfigError) if formatter else None

    def default(partition: str, values: PartitionValues) -> dt.datetime:
        by_name = dict(values)
        if config.timestamp_pattern is None:
            text = values[0][1] if values else ""
        else:
            text = _VARIABLE.sub(lambda m: by_name.get(m.group(1), m.group(0)), config.timestamp_pattern)
        return _parse_time(text, strptime, partition)

    return default


def _naive_in(moment: dt.datetime, config: PartitionCommitConfig) -> dt.datetime:
    return moment.astimezone(config.zone).replace(tzinfo=None)


def _parse_time(text: str, strptime: str | None, partition: str) -> dt.datetime:
    try:
        if strptime is not None:
            return dt.datetime.strptime(text, strptime)
        match = _DEFAULT_TIME.fullmatch(text.strip())
        if match is None:
            raise ValueError("expected yyyy-MM-dd[ HH:mm[:ss]]")
        y, mo, d, h, mi, s, frac = match.groups()
        micros = int((frac or "0").ljust(6, "0")[:6])
        return dt.datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0), int(s or 0), micros)
    except ValueError as exc:  # the pattern does not fit the table's partitions: no retry helps
        raise PartitionCommitConfigError(
            f"partition {partition!r}: time {text!r} cannot be read ({exc}); check {PATTERN_KEY}"
        ) from None


def custom_policy_handler(config: PartitionCommitConfig, custom: Any) -> Callable[[Any], Any]:
    """The callable the ``custom`` policy calls with the commit context: ``custom`` (an object with
    ``commit(context)``, or a callable) or else the class/function named by ``POLICY_CLASS_KEY``."""
    target: Any = custom
    if target is None:
        if config.policy_class is None:
            raise PartitionCommitConfigError(
                f"policy 'custom' needs {POLICY_CLASS_KEY} (a dotted path to a class or function)"
            )
        loaded = load_object(config.policy_class, POLICY_CLASS_KEY)
        target = _instantiate(loaded, config.policy_class, POLICY_CLASS_KEY)
    method = getattr(target, "commit", target)
    if not callable(method):
        raise PartitionCommitConfigError(
            f"custom policy {target!r} has no commit(context) and is not callable"
        )
    return method
