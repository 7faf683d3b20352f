"""Committing partitions of a Hudi table or a plain parquet directory (the ``target``): plan, then
apply the policies of each due partition in order, recording each applied policy so a crash never
repeats one.

One run per table or directory at a time (the target's lock). A partition is committed once; data
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

from airflow_lake_provider.lake.config.registry import PC_PARTITION_FIELDS
from airflow_lake_provider.lake.errors import (
    InvalidPartitionError,
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
from airflow_lake_provider.lake.services.partition_commit.plain import (
    PARTITION_FIELDS_KEY,
    check_partition,
    check_plain_directory,
    is_hidden,
)
from airflow_lake_provider.lake.services.partition_commit.plan import CommitPlan, Decision, PartitionDecision
from airflow_lake_provider.lake.services.partition_commit.state import COMMITTED, COMMITTING, PartitionState
from airflow_lake_provider.lake.services.partition_commit.success_file import (
    SUCCESS_FILE_KEY,
    check_success_targets,
)
from airflow_lake_provider.lake.services.partition_commit.target import (
    CommitTarget,
    DirectoryTarget,
    Extractor,
    TableTarget,
)
from airflow_lake_provider.lake.storage import Storage
from airflow_lake_provider.lake.table.metadata.policy import guard_mutation
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.commit_metadata import join_partition

log = logging.getLogger(__name__)


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
        raise InvalidPartitionError(f"partition {partition!r} is not a partition path of the table")
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
    return _commit_partitions(
        table,
        partitions,
        options,
        watermark,
        now,
        custom_policy,
        metastore,
        require_existing,
        dry_run,
        force,
    )


def _commit_partitions(
    table: LakeTable,
    partitions: Sequence[str],
    options: Mapping[str, object] | None,
    watermark: object,
    now: dt.datetime | None,
    custom_policy: PolicyHandler | None,
    metastore: PolicyHandler | None,
    require_existing: bool,
    dry_run: bool,
    force: bool,
) -> CommitResult:
    if not partitions:
        raise InvalidPartitionError("no partition given to commit")
    names = [_check_partition_name(p) for p in partitions]
    for name in names:  # before any policy: a success file was written through such a link
        check_folder_inside(table.storage, name, "the table")
    config = commit_config(table, options)
    fields = table.config.partition_fields if table.config.is_partitioned else ()
    extractor = _extractor(config, fields)
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
        table.config.checked_bloom_settings()  # merged files' filters: refused before any commit
        # Kept under maintain (it moves keys between file groups: no record index then).
        guard_mutation(
            table, "partition commit (merge-small-files)", options, dry_run=dry_run, maintains=True
        )

    def values_of(partition: str) -> PartitionValues:
        return partition_values(partition, fields)

    run = _Run(config, handlers, extractor, given_watermark, values_of, now, force)
    return run.commit(TableTarget(table, options), names, require_existing=require_existing, dry_run=dry_run)


# What a plain directory's partition commit can apply (``metastore`` needs a table definition).
PLAIN_POLICIES = (PolicyKind.SUCCESS_FILE, PolicyKind.MERGE_SMALL_FILES, PolicyKind.CUSTOM)


def commit_plain_partitions(
    storage: Storage,
    partitions: Sequence[str],
    options: Mapping[str, object] | None = None,
    *,
    watermark: object = None,
    now: dt.datetime | None = None,
    custom_policy: Callable[[Any], Any] | None = None,
    require_existing: bool = True,
    dry_run: bool = False,
    force: bool = False,
) -> CommitResult:
    """Partition commit of a plain parquet directory: both triggers, policies ``success-file``,
    ``merge-small-files`` and ``custom`` (``metastore`` needs a table definition: Hudi tables only).

    A partition's writes are its visible data files; its first write is their earliest modification
    time (``process-time``); ``partition-time`` needs the caller's watermark (no commits record event
    times here). Late data: visible files the last commit did not cover.
    """
    if not partitions:
        raise InvalidPartitionError("no partition given to commit")
    names = list(dict.fromkeys(check_partition(p) for p in partitions))  # dt=1 and dt=1/ are one
    if not storage.exists(""):
        # Retried, not a bad argument: on S3 a directory exists only once its first file lands.
        raise PartitionCommitError(
            f"{storage.root} does not exist: neither a Hudi table nor a parquet directory"
        )
    check_plain_directory(storage)
    for name in names:  # before any policy (success-file wrote through such a link)
        check_folder_inside(storage, name, "the directory")
    config = _directory_config(storage, options)
    raw_fields = PC_PARTITION_FIELDS.read(options or {})
    fields = tuple(f.strip() for f in str(raw_fields).split(",") if f.strip()) if raw_fields else ()
    if not fields:  # hive-style folders name their fields themselves (dt=2024-01-05/hour=03)
        named = {tuple(s.partition("=")[0] for s in p.split("/")) for p in names if _hive_style(p)}
        fields = next(iter(named)) if len(named) == 1 else ()
    extractor = _extractor(config, fields)
    handlers: dict[PolicyKind, Callable[[CommitContext], Any]] = {}
    if PolicyKind.CUSTOM in config.policies:
        handlers[PolicyKind.CUSTOM] = custom_policy_handler(config, custom_policy)
    given = parse_watermark(watermark) if watermark is not None else None

    def values_of(partition: str) -> PartitionValues:
        if fields or _hive_style(partition):
            return partition_values(partition, fields)
        raise PartitionCommitConfigError(
            f"partition {partition!r} is not hive-style (field=value): name its fields with "
            f"{PARTITION_FIELDS_KEY}=f1,f2"
        )

    run = _Run(config, handlers, extractor, given, values_of, now, force)
    return run.commit(DirectoryTarget(storage), names, require_existing=require_existing, dry_run=dry_run)


def _directory_config(storage: Storage, options: Mapping[str, object] | None) -> PartitionCommitConfig:
    """A plain directory's options (it has no table properties), refusing what needs a table."""
    config = PartitionCommitConfig.from_options(options or {})
    refused = [k.value for k in config.policies if k not in PLAIN_POLICIES]
    if refused:
        raise PartitionCommitConfigError(
            f"{storage.root} is a plain parquet directory (no .hoodie/): policy {refused} needs a Hudi "
            f"table; plain directories support {[k.value for k in PLAIN_POLICIES]}"
        )
    if PolicyKind.SUCCESS_FILE in config.policies and not is_hidden(config.success_file_name):
        # Every visible file of a partition is data here: readers would read it as parquet, and the
        # next commit would count it as a write (and merge-small-files as an input).
        raise PartitionCommitConfigError(
            f"{SUCCESS_FILE_KEY}={config.success_file_name!r}: in a plain parquet directory every file "
            "whose name does not start with '_' or '.' is data; name the success file with a leading "
            "'_' (e.g. _SUCCESS)"
        )
    return config


def _hive_style(partition: str) -> bool:
    return bool(partition) and all("=" in s for s in partition.split("/"))


def _extractor(config: PartitionCommitConfig, fields: Sequence[str]) -> Extractor | None:
    if config.trigger is Trigger.PARTITION_TIME or config.timestamp_pattern or config.extractor_class:
        check_pattern(config, fields)
        return make_extractor(config)
    return None


@dataclass(frozen=True)
class _Run:
    """One commit run's checked inputs, applied to a target (a table or a plain directory)."""

    config: PartitionCommitConfig
    handlers: Mapping[PolicyKind, Callable[[CommitContext], Any]]
    extractor: Extractor | None
    watermark: dt.datetime | None
    values_of: Callable[[str], PartitionValues]
    now: dt.datetime | None
    force: bool

    def commit(
        self, target: CommitTarget, names: Sequence[str], *, require_existing: bool, dry_run: bool
    ) -> CommitResult:
        config = self.config
        with target.lock():
            target.prepare(dry_run)
            plan, states = target.plan(
                config, names, self.now, self.watermark, self.values_of, self.extractor, self.force
            )
            missing = plan.with_decision(Decision.MISSING)
            if missing and require_existing:
                raise PartitionNotFoundError(
                    f"{target.uri}: partition(s) {[d.partition for d in missing]} {target.missing_text}; "
                    "nothing was committed"
                )
            due = plan.due()
            if PolicyKind.SUCCESS_FILE in config.policies:
                check_success_targets(target.storage, (d.partition for d in due), config.success_file_name)
            target.keep_planning_inputs()  # saved once the input is good
            late = {d.partition: d.late_writes for d in plan.decisions if d.late_writes}
            for partition, writes in late.items():
                log.warning(
                    "late data in committed partition %s of %s: %s %s",
                    partition,
                    target.uri,
                    target.late_noun,
                    list(writes),
                )
            policies = tuple(k.value for k in config.policies)
            if dry_run:
                return CommitResult(Outcome.PLANNED if due else Outcome.NO_WORK, plan, (), policies, late)
            committed = []
            for decision in due:
                self._commit_one(target, decision, states.get(decision.partition), plan.now)
                committed.append(decision.partition)
            return CommitResult(
                Outcome.COMMITTED if committed else Outcome.NO_WORK, plan, tuple(committed), policies, late
            )

    def _commit_one(
        self,
        target: CommitTarget,
        decision: PartitionDecision,
        state: PartitionState | None,
        now: dt.datetime,
    ) -> None:
        config, partition = self.config, decision.partition
        recommit = bool(decision.late_writes) and state is not None and state.status == COMMITTED
        if state is None or state.status == COMMITTED:
            # A new commit (or a re-commit of late data) starts with no policy applied.
            state = PartitionState(partition, COMMITTING, (), (), state.commits if state else 0)
            target.save_state(state)
        for kind in config.policies:
            if kind.value in state.applied:
                continue  # applied before a crash: never twice
            if kind is PolicyKind.SUCCESS_FILE:
                # Written whole each time ("created with overwrite", as Flink does), never appended to.
                target.storage.write(join_partition(partition, config.success_file_name), b"")
            elif kind is PolicyKind.MERGE_SMALL_FILES:
                target.merge_small_files(partition, config.target_file_size)
            else:
                try:
                    self.handlers[kind](_context(target, decision, recommit))
                except Exception as exc:
                    raise PartitionCommitError(
                        f"{target.uri}: policy {kind.value} failed for partition {partition!r}: {exc}; "
                        f"policies already applied: {list(state.applied)}"
                    ) from exc
            state = state.with_(applied=(*state.applied, kind.value))
            target.save_state(state)
        done = state.with_(
            status=COMMITTED,
            covered=target.covered(decision),
            commits=state.commits + 1,
            committed_at=now.isoformat(),
        )
        target.save_state(done)
        log.info(
            "committed partition %s of %s (%s)%s",
            partition,
            target.uri,
            decision.reason,
            target.committed_note(config),
        )


def _context(target: CommitTarget, decision: PartitionDecision, recommit: bool) -> CommitContext:
    return CommitContext(
        table_uri=target.uri,
        table_name=target.name,
        partition_path=decision.partition,
        partition_values=MappingProxyType(dict(decision.values)),
        partition_time=decision.partition_time,
        committed_instants=target.covered(decision),
        partition_uri=target.storage.uri(decision.partition),
        recommit=recommit,
    )
