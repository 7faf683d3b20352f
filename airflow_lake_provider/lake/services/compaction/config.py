"""Compaction configuration: Hudi's ``hoodie.compact*`` keys and defaults, validated once."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from airflow_lake_provider.lake.errors import CompactionConfigError
from airflow_lake_provider.lake.table.options import get_float, get_int, get_str, merge_layers

TRIGGER_KEY = "hoodie.compact.inline.trigger.strategy"
MAX_DELTA_COMMITS_KEY = "hoodie.compact.inline.max.delta.commits"
MAX_DELTA_SECONDS_KEY = "hoodie.compact.inline.max.delta.seconds"
STRATEGY_KEY = "hoodie.compaction.strategy"
LOG_SIZE_THRESHOLD_KEY = "hoodie.compaction.logfile.size.threshold"
LOG_NUM_THRESHOLD_KEY = "hoodie.compaction.logfile.num.threshold"
TARGET_IO_KEY = "hoodie.compaction.target.io"
DAY_PARTITIONS_KEY = "hoodie.compaction.daybased.target.partitions"
PARTITION_REGEX_KEY = "hoodie.compaction.partition.path.regex"

STRATEGY_PACKAGE = "org.apache.hudi.table.action.compact.strategy"
DEFAULT_STRATEGY = f"{STRATEGY_PACKAGE}.LogFileSizeBasedCompactionStrategy"


class TriggerStrategy(str, Enum):
    """When a compaction is due (``hoodie.compact.inline.trigger.strategy``)."""

    NUM_COMMITS = "NUM_COMMITS"
    NUM_COMMITS_AFTER_LAST_REQUEST = "NUM_COMMITS_AFTER_LAST_REQUEST"
    TIME_ELAPSED = "TIME_ELAPSED"
    NUM_AND_TIME = "NUM_AND_TIME"
    NUM_OR_TIME = "NUM_OR_TIME"


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
        merged = merge_layers(*layers)
        trigger_raw = get_str(merged, TRIGGER_KEY)
        trigger = TriggerStrategy.NUM_COMMITS
        if trigger_raw is not None:
            try:
                trigger = TriggerStrategy(trigger_raw.upper())
            except ValueError:
                allowed = ", ".join(t.value for t in TriggerStrategy)
                raise CompactionConfigError(
                    f"{TRIGGER_KEY}={trigger_raw!r} is not one of {allowed}"
                ) from None
        regex = get_str(merged, PARTITION_REGEX_KEY)
        if regex is not None:
            try:
                re.compile(regex)
            except re.error as exc:
                raise CompactionConfigError(
                    f"{PARTITION_REGEX_KEY}={regex!r} is not a valid regex: {exc}"
                ) from None
        config = cls(
            trigger=trigger,
            max_delta_commits=get_int(merged, MAX_DELTA_COMMITS_KEY, 5, 0, CompactionConfigError),
            max_delta_seconds=get_int(merged, MAX_DELTA_SECONDS_KEY, 3600, 0, CompactionConfigError),
            strategy=get_str(merged, STRATEGY_KEY) or DEFAULT_STRATEGY,
            log_size_threshold=get_int(merged, LOG_SIZE_THRESHOLD_KEY, 0, 0, CompactionConfigError),
            log_num_threshold=get_int(merged, LOG_NUM_THRESHOLD_KEY, 0, 0, CompactionConfigError),
            target_io_mb=get_float(merged, TARGET_IO_KEY, 512000.0, 0.0, CompactionConfigError),
            day_partitions=get_int(merged, DAY_PARTITIONS_KEY, 10, 0, CompactionConfigError),
            partition_regex=regex,
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
