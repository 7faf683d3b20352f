"""Committing partitions: refresh the write index, plan, then apply the policies of each due
partition in order, recording each applied policy so a crash never repeats one.

One run per table at a time (a lock under ``.hoodie/.aux/``). A partition is committed once; data
that arrives in it afterwards is reported (``late_data``) and re-committed only when
``lake.partition-commit.late-data.recommit=true``.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any, Protocol

from airflow_lake_provider.lake.errors import (
    PartitionCommitConfigError,
    PartitionCommitError,
    PartitionNotFoundError,
)
from airflow_lake_provider.lake.services.partition_commit.config import (
    PartitionCommitConfig,
    PolicyKind,
    Trigger,
)
from airflow_lake_provider.lake.services.partition_commit.extractor import (
    PartitionValues,
    check_pattern,
    custom_policy_handler,
    make_extractor,
    partition_values,
)
from airflow_lake_provider.lake.services.partition_commit.folders import check_folder_inside
from airflow_lake_provider.lake.services.partition_commit.plan import CommitPlan, Decision, PartitionDecision
from airflow_lake_provider.lake.services.partition_commit.planner import plan_commit, table_watermark
from airflow_lake_provider.lake.services.partition_commit.state import (
    COMMITTED,
    COMMITTING,
    PartitionState,
    load_index,
    load_state,
    refresh_index,
    save_index,
    save_state,
)
from airflow_lake_provider.lake.services.partition_commit.success_file import check_success_targets
from airflow_lake_provider.lake.table.metadata_table import guard_mutation
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import join_partition
from airflow_lake_provider.lake.timeline.instant import instant_to_datetime

log = logging.getLogger(__name__)

LOCK = "partition-commit"
LOCK_WAIT_SECONDS = 60.0


class Outcome(str, Enum):
    COMMITTED = "COMMITTED"  # at least one partition committed
    PLANNED = "PLANNED"  # dry run: what would be committed
    NO_WORK = "NO_WORK"  # nothing was due


@dataclass(frozen=True)
class CommitContext:
    """What a custom policy (and the metastore policy) is told about the partition it commits."""

    table_uri: str
    table_name: str
    partition_path: str
    partition_values: Mapping[str, str]
    partition_time: dt.datetime | None
    committed_instants: tuple[str, ...]
    partition_uri: str
    recommit: bool = False


class CommitPolicy(Protocol):
    def commit(self, context: CommitContext) -> None: ...


PolicyHandler = Callable[[CommitContext], Any] | CommitPolicy


@dataclass(frozen=True)
class CommitResult:
    outcome: Outcome
    plan: CommitPlan
    committed: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()
    late_data: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (printed by the CLI, returned to XCom)."""
        return {
            "outcome": self.outcome.value,
            "trigger": self.plan.trigger.value,
            "now": self.plan.now.isoformat(),
            "watermark": self.plan.watermark.isoformat() if self.plan.watermark else None,
            "policies": list(self.policies),
            "committed": list(self.committed),
            "waiting": {d.partition: d.reason for d in self.plan.with_decision(Decision.WAITING)},
            "already_committed": [d.partition for d in self.plan.with_decision(Decision.COMMITTED)],
            "missing": [d.partition for d in self.plan.with_decision(Decision.MISSING)],
            "late_data": {p: list(ws) for p, ws in self.late_data.items()},
            "partitions": {
                d.partition: {
                    "decision": d.decision.value,
                    "partition_time": d.partition_time.isoformat() if d.partition_time else None,
                    "first_write": d.first_write,
                    "writes": len(d.writes),
                    "reason": d.reason,
                }
                for d in self.plan.decisions
            },
        }


def commit_config(table: LakeTable, options: Mapping[str, object] | None = None) -> PartitionCommitConfig:
    return PartitionCommitConfig.from_options(table.config.properties, options or {})


def parse_watermark(value: object) -> dt.datetime:
    """A watermark: an aware datetime, ISO 8601 text (no offset means UTC) or epoch milliseconds."""
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
    text = str(value).strip()
    try:
        if text.lstrip("-").isdigit():
            return dt.datetime.fromtimestamp(int(text) / 1000, dt.timezone.utc)
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        moment = moment if moment.tzinfo else moment.replace(tzinfo=dt.timezone.utc)
        moment.astimezone(dt.timezone.utc)  # an offset that leaves the calendar fails here, not later
    except (ValueError, OverflowError, OSError):
        raise PartitionCommitConfigError(
            f"watermark {text!r} is not an ISO 8601 time (e.g. 2024-01-05T03:00:00Z) or epoch "
            "milliseconds within years 1..9999"
        ) from None
    return moment


def _check_partition_name(partition: str) -> str:
    text = str(partition).strip("/")  # spaces belong to the name ("city=Paris " is its own partition)
    parts = text.split("/")
    if "\x00" in text or any(p in (".", "..", ".hoodie") for p in parts) or "//" in text:
        raise PartitionCommitError(f"partition {partition!r} is not a partition path of the table")
    return text


def commit_partitions(
    table: LakeTable,
    partitions: Sequence[str],
    options: Mapping[str, object] | None = None,
    *,
    watermark: object = None,
    now: dt.datetime | None = None,
    custom_policy: PolicyHandler | None = None,
    metastore: PolicyHandler | None = None,
    require_existing: bool = True,
    dry_run: bool = False,
    force: bool = False,
) -> CommitResult:
    """Commit the due partitions among ``partitions`` and return what happened.

    ``options`` override the table's properties (``sink.partition-commit.*``,
    ``partition.time-extractor.*``). ``watermark`` (partition-time trigger) overrides the one the
    table's recorded event times give. ``custom_policy`` stands in for ``policy.class``;
    ``metastore`` is the handler of the ``metastore`` policy (``spark_jobs/partition_commit.py``
    passes one backed by Spark SQL). With ``require_existing`` a partition without a completed write
    is an error (the CLI and operator); the sensor passes ``False`` and keeps waiting for it.
    ``force`` commits every written partition at once, whatever the trigger says (backfills).
    """
    if not partitions:
        raise PartitionCommitError("no partition given to commit")
    names = [_check_partition_name(p) for p in partitions]
    for name in names:  # before any policy: a success file was written through such a link
        check_folder_inside(table.storage, name, "the table")
    config = commit_config(table, options)
    fields = table.config.partition_fields if table.config.is_partitioned else ()
    if config.trigger is Trigger.PARTITION_TIME or config.timestamp_pattern or config.extractor_class:
        check_pattern(config, fields)
        extractor = make_extractor(config)
    else:
        extractor = None
    handlers: dict[PolicyKind, Callable[[CommitContext], Any]] = {}
    if PolicyKind.CUSTOM in config.policies:
        handlers[PolicyKind.CUSTOM] = custom_policy_handler(config, custom_policy)
    if PolicyKind.METASTORE in config.policies:
        if metastore is None:
            raise PartitionCommitConfigError(
                "policy 'metastore' needs Spark SQL: run it through spark_jobs/partition_commit.py "
                "(lake partition-commit and the Airflow operators do so)"
            )
        handlers[PolicyKind.METASTORE] = getattr(metastore, "commit", metastore)
    given_watermark = parse_watermark(watermark) if watermark is not None else None
    if PolicyKind.MERGE_SMALL_FILES in config.policies:  # a replacecommit: Java writes it to the MDT
        guard_mutation(table, "partition commit (merge-small-files)", options, dry_run=dry_run)

    def values_of(partition: str) -> PartitionValues:
        return partition_values(partition, fields)

    with table.store.exclusive(LOCK, wait_seconds=LOCK_WAIT_SECONDS):
        timeline = table.timeline()
        moment = now or _now(table, timeline)
        index, changed = refresh_index(timeline, load_index(timeline))
        states = {p: load_state(timeline, p) for p in names}
        wm = given_watermark
        if wm is None and config.trigger is Trigger.PARTITION_TIME:
            wm = table_watermark(index, config)
        plan = plan_commit(config, names, index, states, moment, wm, values_of, extractor, force)
        missing = plan.with_decision(Decision.MISSING)
        if missing and require_existing:
            raise PartitionNotFoundError(
                f"{table.uri}: partition(s) {[d.partition for d in missing]} have no completed write; "
                "nothing was committed"
            )
        due = plan.due()
        if PolicyKind.SUCCESS_FILE in config.policies:
            check_success_targets(table.storage, (d.partition for d in due), config.success_file_name)
        if changed:  # a cache (dry runs and sensor pokes keep it fresh too), saved once input is good
            save_index(table.store, index)
        late = {d.partition: d.late_writes for d in plan.decisions if d.late_writes}
        for partition, writes in late.items():
            log.warning(
                "late data in committed partition %s of %s: writes %s", partition, table.uri, list(writes)
            )
        policies = tuple(k.value for k in config.policies)
        if dry_run:
            return CommitResult(Outcome.PLANNED if due else Outcome.NO_WORK, plan, (), policies, late)
        committed = []
        for decision in due:
            _commit_one(table, config, decision, states.get(decision.partition), handlers, moment)
            committed.append(decision.partition)
        return CommitResult(
            Outcome.COMMITTED if committed else Outcome.NO_WORK, plan, tuple(committed), policies, late
        )


def _commit_one(
    table: LakeTable,
    config: PartitionCommitConfig,
    decision: PartitionDecision,
    state: PartitionState | None,
    handlers: Mapping[PolicyKind, Callable[[CommitContext], Any]],
    now: dt.datetime,
) -> None:
    partition = decision.partition
    recommit = bool(decision.late_writes) and state is not None and state.status == COMMITTED
    if state is None or state.status == COMMITTED:
        # A new commit (or a re-commit of late data) starts with no policy applied.
        state = PartitionState(partition, COMMITTING, (), (), state.commits if state else 0)
        save_state(table.store, state)
    context = CommitContext(
        table_uri=table.uri,
        table_name=table.config.name,
        partition_path=partition,
        partition_values=MappingProxyType(dict(decision.values)),
        partition_time=decision.partition_time,
        committed_instants=decision.writes,
        partition_uri=table.storage.uri(partition),
        recommit=recommit,
    )
    for kind in config.policies:
        if kind.value in state.applied:
            continue  # applied before a crash: never twice
        if kind is PolicyKind.SUCCESS_FILE:
            # Written whole each time ("created with overwrite", as Flink does), never appended to.
            table.storage.write(join_partition(partition, config.success_file_name), b"")
        elif kind is PolicyKind.MERGE_SMALL_FILES:
            # Imported here: it loads polars (the compaction merge), which planning and Airflow's
            # triggerer never need (loading its native library holds the interpreter lock 0.1-0.5 s).
            from airflow_lake_provider.lake.services.partition_commit.merge import merge_small_files

            merged = merge_small_files(table, partition, config.target_file_size)
            if merged.instant:
                log.info(
                    "partition %s: %d small files merged at %s",
                    partition,
                    len(merged.replaced),
                    merged.instant,
                )
        else:
            try:
                handlers[kind](context)
            except Exception as exc:
                raise PartitionCommitError(
                    f"{table.uri}: policy {kind.value} failed for partition {partition!r}: {exc}; "
                    f"policies already applied: {list(state.applied)}"
                ) from exc
        state = state.with_(applied=(*state.applied, kind.value))
        save_state(table.store, state)
    save_state(
        table.store,
        state.with_(
            status=COMMITTED,
            covered=decision.writes,
            commits=state.commits + 1,
            committed_at=now.isoformat(),
        ),
    )
    log.info(
        "committed partition %s of %s (%s) with %s",
        partition,
        table.uri,
        decision.reason,
        ", ".join(k.value for k in config.policies),
    )


def _now(table: LakeTable, timeline: Timeline) -> dt.datetime:
    """The clock's time, never before the newest instant: instant times run a few milliseconds ahead
    of the clock when many are handed out within one millisecond."""
    moment = table.clock.now()
    latest = timeline.latest_time
    if latest is not None:
        moment = max(moment, instant_to_datetime(latest if len(latest) == 17 else latest + "000"))
    return moment
