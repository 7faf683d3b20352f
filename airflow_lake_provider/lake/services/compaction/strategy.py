"""Selection strategies: which candidate file slices a compaction plan takes (``hoodie.compaction.strategy``).

Each strategy may narrow the partitions looked at, then order and trim the candidate operations.
Names are accepted as Hudi's class names (with or without the package) or short forms such as
``log_file_size`` or ``unbounded``; comma-joined names compose, applied left to right.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass

from airflow_lake_provider.lake.errors import CompactionConfigError
from airflow_lake_provider.lake.services.compaction.config import CompactionConfig, strategy_kinds
from airflow_lake_provider.lake.services.compaction.plan import CompactionOperation

_DATE_RE = re.compile(r"(\d{4})[/-]?(\d{2})[/-]?(\d{2})(?:\D|$)")


class CompactionStrategy:
    """Base strategy: every partition, every candidate, in natural (partition, file id) order."""

    def filter_partitions(self, partitions: Sequence[str]) -> list[str]:
        return list(partitions)

    def order_and_filter(self, operations: Sequence[CompactionOperation]) -> list[CompactionOperation]:
        return list(operations)


def bounded_by_io(
    operations: Sequence[CompactionOperation], target_io_mb: float
) -> list[CompactionOperation]:
    """The leading operations whose accumulated IO estimate stays within ``target_io_mb``."""
    taken, total = [], 0.0
    for op in operations:
        if total + op.io_mb > target_io_mb:
            break
        total += op.io_mb
        taken.append(op)
    return taken


def partition_date(partition: str) -> dt.date:
    """The day of a date partition: ``2024/01/31``, ``2024-01-31``, ``dt=2024-01-31``, ``year=2024/...``."""
    values = "/".join(segment.split("=", 1)[-1] for segment in partition.split("/"))
    match = _DATE_RE.match(values)
    if match:
        try:
            return dt.date(int(match[1]), int(match[2]), int(match[3]))
        except ValueError:
            pass
    raise CompactionConfigError(
        f"partition {partition!r} is not a date partition (yyyy/MM/dd); a day based "
        "compaction strategy cannot order it"
    )


def _newest_first(partitions: Sequence[str]) -> list[str]:
    return sorted(partitions, key=lambda p: (partition_date(p), p), reverse=True)


def _by_partition_newest_first(operations: Sequence[CompactionOperation]) -> list[CompactionOperation]:
    rank = {p: i for i, p in enumerate(_newest_first({op.partition for op in operations}))}
    return sorted(operations, key=lambda op: rank[op.partition])  # stable: file order kept within a day


@dataclass(frozen=True)
class BoundedIOStrategy(CompactionStrategy):
    """Candidates in natural order, cut where the accumulated IO would exceed the target."""

    target_io_mb: float

    def order_and_filter(self, operations: Sequence[CompactionOperation]) -> list[CompactionOperation]:
        return bounded_by_io(operations, self.target_io_mb)


@dataclass(frozen=True)
class LogFileSizeStrategy(CompactionStrategy):
    """Slices with at least ``threshold`` log bytes, largest log size first, within the IO bound."""

    threshold: int
    target_io_mb: float

    def order_and_filter(self, operations: Sequence[CompactionOperation]) -> list[CompactionOperation]:
        kept = [op for op in operations if op.log_size >= self.threshold]
        return bounded_by_io(sorted(kept, key=lambda op: op.log_size, reverse=True), self.target_io_mb)


@dataclass(frozen=True)
class LogFileCountStrategy(CompactionStrategy):
    """Slices with at least ``threshold`` log files, most log files first, within the IO bound."""

    threshold: int
    target_io_mb: float

    def order_and_filter(self, operations: Sequence[CompactionOperation]) -> list[CompactionOperation]:
        kept = [op for op in operations if op.log_file_count >= self.threshold]
        return bounded_by_io(sorted(kept, key=lambda op: op.log_file_count, reverse=True), self.target_io_mb)


@dataclass(frozen=True)
class DayBasedStrategy(CompactionStrategy):
    """Only the ``partitions`` newest date partitions, newest first (optionally within the IO bound)."""

    partitions: int
    target_io_mb: float | None = None

    def filter_partitions(self, partitions: Sequence[str]) -> list[str]:
        return _newest_first(partitions)[: self.partitions]

    def order_and_filter(self, operations: Sequence[CompactionOperation]) -> list[CompactionOperation]:
        ordered = _by_partition_newest_first(operations)
        return ordered if self.target_io_mb is None else bounded_by_io(ordered, self.target_io_mb)


@dataclass(frozen=True)
class BoundedPartitionAwareStrategy(CompactionStrategy):
    """Only date partitions within the last ``days`` days before ``today``, newest first."""

    days: int
    today: dt.date

    @property
    def earliest(self) -> dt.date:
        return self.today - dt.timedelta(days=self.days)

    def filter_partitions(self, partitions: Sequence[str]) -> list[str]:
        return [p for p in _newest_first(partitions) if partition_date(p) >= self.earliest]

    def order_and_filter(self, operations: Sequence[CompactionOperation]) -> list[CompactionOperation]:
        return _by_partition_newest_first(operations)


@dataclass(frozen=True)
class UnboundedPartitionAwareStrategy(CompactionStrategy):
    """The complement of the bounded one: only date partitions older than ``days`` days."""

    days: int
    today: dt.date

    def filter_partitions(self, partitions: Sequence[str]) -> list[str]:
        recent = set(BoundedPartitionAwareStrategy(self.days, self.today).filter_partitions(partitions))
        return [p for p in partitions if p not in recent]


@dataclass(frozen=True)
class UnboundedStrategy(CompactionStrategy):
    """Every candidate, no bound."""


@dataclass(frozen=True)
class PartitionRegexStrategy(CompactionStrategy):
    """Only partitions the whole of which match ``regex`` (no regex: every partition)."""

    regex: str | None

    def filter_partitions(self, partitions: Sequence[str]) -> list[str]:
        if self.regex is None:
            return list(partitions)
        pattern = re.compile(self.regex)
        return [p for p in partitions if pattern.fullmatch(p)]


@dataclass(frozen=True)
class CompositeStrategy(CompactionStrategy):
    """Several strategies applied in order (Hudi's comma-joined ``hoodie.compaction.strategy``)."""

    parts: tuple[CompactionStrategy, ...]

    def filter_partitions(self, partitions: Sequence[str]) -> list[str]:
        out = list(partitions)
        for part in self.parts:
            out = part.filter_partitions(out)
        return out

    def order_and_filter(self, operations: Sequence[CompactionOperation]) -> list[CompactionOperation]:
        out = list(operations)
        for part in self.parts:
            out = part.order_and_filter(out)
        return out


def strategy_for(config: CompactionConfig, now: dt.datetime | None = None) -> CompactionStrategy:
    """The strategy ``config.strategy`` names; ``now`` fixes "today" for the partition-aware ones."""
    today = (now or dt.datetime.now(dt.timezone.utc)).astimezone(dt.timezone.utc).date()
    parts = [_one(kind, config, today) for kind in strategy_kinds(config.strategy)]
    return parts[0] if len(parts) == 1 else CompositeStrategy(tuple(parts))


def _one(kind: str, config: CompactionConfig, today: dt.date) -> CompactionStrategy:
    if kind == "logfilesize":
        return LogFileSizeStrategy(config.log_size_threshold, config.target_io_mb)
    if kind == "logfilenum":
        return LogFileCountStrategy(config.log_num_threshold, config.target_io_mb)
    if kind == "boundedio":
        return BoundedIOStrategy(config.target_io_mb)
    if kind == "day":
        return DayBasedStrategy(config.day_partitions)
    if kind == "dayio":
        return DayBasedStrategy(config.day_partitions, config.target_io_mb)
    if kind == "boundedpartitionaware":
        return BoundedPartitionAwareStrategy(config.day_partitions, today)
    if kind == "unboundedpartitionaware":
        return UnboundedPartitionAwareStrategy(config.day_partitions, today)
    if kind == "unbounded":
        return UnboundedStrategy()
    if kind == "partitionregex":
        return PartitionRegexStrategy(config.partition_regex)
    raise AssertionError(f"strategy kind {kind!r} is validated by strategy_kinds but not built")
