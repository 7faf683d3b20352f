"""The pure partition commit planner: which of the asked partitions are due, waiting, already
committed (with or without late data) or missing. No I/O: the caller passes the write index, the
commit states, the clock and the watermark."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence

from airflow_lake_provider.lake.errors import PartitionCommitConfigError
from airflow_lake_provider.lake.services.partition_commit.config import (
    LATENESS_KEY,
    PartitionCommitConfig,
    Trigger,
)
from airflow_lake_provider.lake.services.partition_commit.extractor import PartitionValues
from airflow_lake_provider.lake.services.partition_commit.plan import CommitPlan, Decision, PartitionDecision
from airflow_lake_provider.lake.services.partition_commit.state import (
    COMMITTED,
    COMMITTING,
    PartitionState,
    WriteIndex,
)
from airflow_lake_provider.lake.timeline.instant import instant_to_datetime


def table_watermark(index: WriteIndex, config: PartitionCommitConfig) -> dt.datetime | None:
    """The largest committed event time minus the allowed lateness, or ``None`` if writers recorded none."""
    if index.max_event_time_ms is None:
        return None
    try:
        moment = dt.datetime.fromtimestamp(index.max_event_time_ms / 1000, dt.timezone.utc)
        return moment - config.allowed_lateness
    except (OverflowError, ValueError, OSError):  # a time out of datetime's years 1-9999
        raise PartitionCommitConfigError(
            f"the table's newest event time ({index.max_event_time_ms} epoch ms, recorded as "
            f"lake.maxEventTime) minus {LATENESS_KEY}={config.allowed_lateness} is not a time between "
            "the years 1 and 9999: pass the watermark explicitly"
        ) from None


def plan_commit(
    config: PartitionCommitConfig,
    partitions: Sequence[str],
    index: WriteIndex,
    states: Mapping[str, PartitionState | None],
    now: dt.datetime,
    watermark: dt.datetime | None,
    values_of: Callable[[str], PartitionValues],
    time_of: Callable[[str, PartitionValues], dt.datetime] | None,
    force: bool = False,
    write_time: Callable[[Sequence[str]], dt.datetime] | None = None,
) -> CommitPlan:
    """Decide every asked partition.

    ``process-time``: due once the partition's first write time (its first instant) + delay <= now.
    ``partition-time``: due once the watermark, seen in the watermark time zone, is after the
    partition time + delay. ``time_of`` extracts the partition time (``None``: no extractor).
    ``force`` (backfills) commits written partitions whatever the trigger says.

    Late data under ``process-time`` (re-committed only with ``recommit_late_data``) is timed, as
    Flink times it, from its own arrival: the first late write + delay, not the partition's first write.
    ``write_time`` gives the earliest time of some writes (default: of instant times; plain
    directories pass file modification times).
    """
    earliest = write_time or _earliest_instant
    decisions = []
    for partition in dict.fromkeys(partitions):
        writes = index.partitions.get(partition, ())
        if not writes:
            decisions.append(
                PartitionDecision(partition, Decision.MISSING, reason="no completed write in this partition")
            )
            continue
        values = values_of(partition)
        ptime = time_of(partition, values) if time_of is not None else None
        base = PartitionDecision(
            partition, Decision.WAITING, values, ptime, first_write=writes[0], writes=tuple(writes)
        )
        state = states.get(partition)
        if state is not None and state.status == COMMITTING:
            decisions.append(_with(base, Decision.DUE, resume=True, reason="finishing an interrupted commit"))
            continue
        late: tuple[str, ...] = ()
        if state is not None and state.status == COMMITTED:
            covered = set(state.covered)
            late = tuple(w for w in writes if w not in covered)
            if not late:
                decisions.append(_with(base, Decision.COMMITTED, reason="committed; no write since"))
                continue
            if not config.recommit_late_data:
                decisions.append(
                    _with(
                        base,
                        Decision.COMMITTED,
                        late_writes=late,
                        reason=f"committed; {len(late)} late write(s) not re-committed",
                    )
                )
                continue
        fired, reason = _trigger_fired(config, earliest(late or writes), ptime, now, watermark, bool(late))
        if force and not fired:
            fired, reason = True, f"forced (the trigger alone would wait: {reason})"
        if late:
            reason = f"late data re-committed ({reason})" if fired else f"late data waits: {reason}"
        decisions.append(
            _with(base, Decision.DUE if fired else Decision.WAITING, late_writes=late, reason=reason)
        )
    return CommitPlan(config.trigger, now, watermark, tuple(decisions))


def _with(base: PartitionDecision, decision: Decision, **changes: object) -> PartitionDecision:
    return PartitionDecision(**{**base.__dict__, "decision": decision, **changes})  # type: ignore[arg-type]


def _earliest_instant(writes: Sequence[str]) -> dt.datetime:
    return instant_to_datetime(min(writes))


def _trigger_fired(
    config: PartitionCommitConfig,
    created: dt.datetime,
    partition_time: dt.datetime | None,
    now: dt.datetime,
    watermark: dt.datetime | None,
    late: bool = False,
) -> tuple[bool, str]:
    if config.trigger is Trigger.PROCESS_TIME:
        what = "first late write" if late else "first write"
        try:
            due_at = created + config.delay
        except OverflowError:
            return False, f"{what} {created.isoformat()} + delay {config.delay} is out of range"
        if due_at <= now:
            return True, f"{what} {created.isoformat()} + delay {config.delay} <= now"
        return (
            False,
            f"{what} {created.isoformat()} + delay {config.delay} is after now ({now.isoformat()})",
        )
    if partition_time is None:  # pragma: no cover - the executor always extracts for partition-time
        return False, "no partition time"
    if watermark is None:
        return False, "no watermark yet (pass one, or record event times on writes)"
    # As Flink: the partition's wall-clock time in the watermark zone becomes an absolute time, the
    # delay is added to that, and absolute times are compared (right across daylight-saving changes).
    try:
        # (astimezone first: adding to a zoned time adds wall-clock hours, not elapsed ones)
        due = partition_time.replace(tzinfo=config.zone).astimezone(dt.timezone.utc) + config.delay
    except OverflowError:
        return False, f"partition time {partition_time} + delay {config.delay} is out of range"
    shown = f"partition time {partition_time} ({config.watermark_time_zone}) + delay {config.delay}"
    try:
        seen = watermark.astimezone(config.zone).isoformat()
    except OverflowError:  # (a watermark late in year 9999 ahead of UTC: shown in UTC)
        seen = watermark.astimezone(dt.timezone.utc).isoformat()
    if watermark > due:
        return True, f"watermark {seen} > {shown}"
    return False, f"watermark {seen} <= {shown}"
