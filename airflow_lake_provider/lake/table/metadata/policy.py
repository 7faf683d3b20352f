"""Hudi's metadata table (MDT, ``.hoodie/metadata/``): detection, and the one decision every mutating
action takes about it before it touches the table.

Hudi's Java writers and table services list files through the MDT, and nothing in Hudi notices an
action that skipped it: files we add stay invisible to them, files we delete stay listed, for good.
So an action that would change the file set of a table with an MDT keeps the MDT up to date
(``maintain``, the default), refuses (``refuse``), or first drops the MDT exactly as a Java writer
run with ``hoodie.metadata.enable=false`` does (``drop``: ``HoodieTable.maybeDeleteMetadataTable``:
clear both partition keys of ``hoodie.properties``, then delete ``.hoodie/metadata/``). Every
mutating entry point calls :func:`guard_mutation` before its first lock file, heartbeat, marker or
instant; read-only work never does. The policy is one value decided here.

``maintain`` (``metadata.commit``) keeps the MDT of tables of version 6 (its ``files`` partition, the
one Hudi 0.14/0.15 writers keep), 8 and 9: writes (insert,
upsert, delete), rollback, restore and partition commit's merge-small-files where the MDT partitions
are among ``files``, ``column_stats`` and ``partition_stats``; compaction (schedule, execute), clean
and archival where they are among those plus ``record_index`` and secondary indexes, which those
services leave unchanged (they move no key, and Hudi's writer adds no entry of those for them).
Where it cannot (:func:`unmaintainable`: another table version or MDT), the action refuses, naming
why: with ``lake.metadata-table.maintain`` unset (the default) the refusal says the default could not
keep it; set to ``true``, that the option asked for it. ``lake.metadata-table.maintain=false`` asks
for ``refuse`` on every table.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from airflow_lake_provider.lake.config.registry import (
    METADATA_COMPACT_DELTA_COMMITS,
    METADATA_ENABLE,
    METADATA_MAINTAIN,
)
from airflow_lake_provider.lake.errors import MetadataTableConfigError, TableConfigError
from airflow_lake_provider.lake.format.properties import parse_properties
from airflow_lake_provider.lake.format.table_config import TableConfig
from airflow_lake_provider.lake.storage import HOODIE_DIR
from airflow_lake_provider.lake.table.metadata.commit import MetadataTableWriter
from airflow_lake_provider.lake.table.rollback.planner import ROLLBACK_ACTIONS
from airflow_lake_provider.lake.table.rollback.policy import FailedWritesConfig, heartbeat_expired, now_ms
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Instant
from airflow_lake_provider.lake.timeline.store import METADATA_DIR, PROPERTIES_FILE, WRITE_LOCK

if TYPE_CHECKING:
    from airflow_lake_provider.lake.table.table import LakeTable

log = logging.getLogger(__name__)

ENABLE_KEY = METADATA_ENABLE.key  # Hudi's writer option; false drops the MDT
MAINTAIN_KEY = METADATA_MAINTAIN.key  # ours; unset (the default) or true keeps the MDT, false refuses
# The MDT partitions the maintain policy keeps, and the table versions it keeps them on.
MAINTAINED_PARTITIONS = frozenset({"files", "column_stats", "partition_stats"})
MAINTAINED_VERSIONS = frozenset({6, 8, 9})
# Key indexes: a service that moves no key (compaction, clean) keeps them by writing nothing to them.
RECORD_INDEX = "record_index"
SECONDARY_INDEX_PREFIX = "secondary_index_"
PARTITIONS_KEY = "hoodie.table.metadata.partitions"
INFLIGHT_PARTITIONS_KEY = "hoodie.table.metadata.partitions.inflight"
MDT_PATH = f"{HOODIE_DIR}/{METADATA_DIR}"
# Every lock a mutating action of ours takes, in the order the services nest them (partition commit
# and compaction scheduling take the write lock inside theirs): the drop holds them all at once.
ALL_SERVICE_LOCKS = ("partition-commit", "compaction-schedule", "clean", WRITE_LOCK, "compaction", "archive")
DROP_LOCK_WAIT_SECONDS = 30.0
JVM_WRITERS_NOTICE = (
    "Spark/Flink writers of this table must run with hoodie.metadata.enable=false too, "
    "or their next commit rebuilds the metadata table from a full listing"
)


class MetadataTablePolicy(str, Enum):
    """What a mutating action does on a table that has an MDT."""

    REFUSE = "refuse"  # lake.metadata-table.maintain=false: raise before anything is written
    DROP = "drop"  # hoodie.metadata.enable=false: drop it as Hudi's writers do, then proceed
    MAINTAIN = "maintain"  # the default: update it with every action that can (else refuse)

    @classmethod
    def from_options(cls, *layers: Mapping[str, object]) -> MetadataTablePolicy:
        """From ``hoodie.metadata.enable`` (later layers win; Hudi's default, true, keeps the MDT),
        then ``lake.metadata-table.maintain`` (unset: maintain, as true; false: refuse).

        :raises MetadataTableConfigError: if the first says drop and the second is given as true:
            the drop deletes what the other asks to keep, so neither is guessed.
        """
        enabled = METADATA_ENABLE.read(*layers)
        maintain = METADATA_MAINTAIN.read(*layers)  # parsed either way: a bad value always fails
        METADATA_COMPACT_DELTA_COMMITS.read(*layers)  # (read by the MDT's services after the action)
        if not enabled:
            if maintain and maintain_asked(*layers):
                raise MetadataTableConfigError(
                    f"{METADATA_ENABLE.key}=false{METADATA_ENABLE.given_in(*layers)} drops the metadata "
                    f"table, {METADATA_MAINTAIN.key}=true{METADATA_MAINTAIN.given_in(*layers)} keeps it "
                    "up to date: give one of them, not both"
                )
            return cls.DROP
        return cls.MAINTAIN if maintain else cls.REFUSE


def maintain_asked(*layers: Mapping[str, object]) -> bool:
    """Whether a layer sets ``lake.metadata-table.maintain`` (else maintain is only the default)."""
    return METADATA_MAINTAIN.find(*layers) is not None


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(p.strip() for p in (value or "").split(",") if p.strip())


@dataclass(frozen=True)
class MetadataTableState:
    """What the table's ``hoodie.properties`` and ``.hoodie/`` say about its MDT."""

    partitions: tuple[str, ...]
    inflight_partitions: tuple[str, ...]
    folder_exists: bool

    @property
    def present(self) -> bool:
        return bool(self.partitions or self.inflight_partitions or self.folder_exists)

    def describe(self) -> str:
        parts = [f"partitions [{', '.join(self.partitions)}]"]
        if self.inflight_partitions:
            parts.append(f"inflight partitions [{', '.join(self.inflight_partitions)}]")
        if self.folder_exists:
            parts.append(f"folder {MDT_PATH}/")
        return ", ".join(parts)


def detect(table: LakeTable) -> MetadataTableState:
    """The MDT as the table's properties (as opened) and storage show it."""
    props = table.config.properties
    return MetadataTableState(
        partitions=_split(props.get(PARTITIONS_KEY)),
        inflight_partitions=_split(props.get(INFLIGHT_PARTITIONS_KEY)),
        folder_exists=table.storage.exists(MDT_PATH),
    )


def lists_files_partition(table: LakeTable) -> bool:
    """Whether the table's properties (as opened) list the MDT's ``files`` partition, which every MDT
    the maintain policy keeps has (:func:`unmaintainable`); read without touching storage."""
    return "files" in _split(table.config.properties.get(PARTITIONS_KEY))


@dataclass(frozen=True)
class MetadataTableDrop:
    """An MDT dropped before an action (``guard_mutation``) or by ``lake metadata-table --drop``."""

    table: str
    dropped: MetadataTableState

    @property
    def notice(self) -> str:
        return (
            f"dropped Hudi's metadata table of {self.table} ({self.dropped.describe()}) as "
            f"{ENABLE_KEY}=false asks; {JVM_WRITERS_NOTICE}"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "table": self.table,
            "partitions": list(self.dropped.partitions),
            "inflight_partitions": list(self.dropped.inflight_partitions),
            "notice": self.notice,
        }


def ways_out(table: LakeTable) -> str:
    """What a user refused for the MDT's sake can do instead: drop it as Hudi does."""
    return (
        f"To drop the metadata table as Hudi does, run with option {ENABLE_KEY}=false (--option, operator "
        f"options or the lake connection's extra) or run 'lake metadata-table {table.uri} --drop'; "
        f"{JVM_WRITERS_NOTICE}"
    )


def refusal(table: LakeTable, state: MetadataTableState, action: str, why: str | None) -> TableConfigError:
    """The error of policy ``refuse`` (``lake.metadata-table.maintain=false``): the table, the MDT,
    whether the default would keep it (``why``: what :func:`unmaintainable` finds), the ways out."""
    default = (
        "Without that option (its default is true) the action keeps the metadata table up to date. "
        if why is None
        else f"(Without that option it would refuse too: {why}.) "
    )
    return TableConfigError(
        f"{action} refused: {table.uri} has Hudi's metadata table ({state.describe()}), which this "
        f"engine does not update under {MAINTAIN_KEY}=false; the action would leave it stale for Hudi's "
        f"Java/Flink writers and services. Nothing was changed. {default}{ways_out(table)}"
    )


def _key_index(partition: str) -> bool:
    return partition == RECORD_INDEX or partition.startswith(SECONDARY_INDEX_PREFIX)


def unmaintainable(table: LakeTable, state: MetadataTableState, moves_keys: bool = True) -> str | None:
    """Why the maintain policy cannot keep this table's MDT for an action (None: it can); one that
    moves no key (``moves_keys`` false: compaction, clean, archival) keeps the key indexes too.
    The one place that decides which tables are kept (the table versions included)."""
    version = table.config.table_version
    if version not in MAINTAINED_VERSIONS:
        return f"table version {version} (only {', '.join(map(str, sorted(MAINTAINED_VERSIONS)))} so far)"
    if version == 6 and set(state.partitions) != {"files"}:
        return f"partitions [{', '.join(state.partitions)}] (only [files] on table version 6)"
    if state.inflight_partitions:
        return f"partitions being built ({', '.join(state.inflight_partitions)})"
    extra = set(state.partitions) - MAINTAINED_PARTITIONS
    others = sorted(p for p in extra if moves_keys or not _key_index(p))
    if others or "files" not in state.partitions or not state.folder_exists:
        kept = ", ".join(sorted(MAINTAINED_PARTITIONS))
        also = "" if moves_keys else f" and, for this action, {RECORD_INDEX} and {SECONDARY_INDEX_PREFIX}*"
        keys = (
            f"; {RECORD_INDEX} and {SECONDARY_INDEX_PREFIX}* only by the actions that move no key "
            "(compaction, clean, archival)"
            if any(_key_index(p) for p in others)
            else ""
        )
        return f"partitions [{', '.join(state.partitions)}] (only [{kept}]{also} are kept so far{keys})"
    return None


def maintain_refusal(
    table: LakeTable, state: MetadataTableState, action: str, why: str, *, asked: bool = True
) -> TableConfigError:
    """The error of policy ``maintain`` where it cannot keep the MDT: asked for with
    ``lake.metadata-table.maintain=true`` (``asked``) or the default."""
    policy = (
        f"and {MAINTAIN_KEY}=true cannot keep it for this action"
        if asked
        else "which this engine keeps up to date by default, but cannot for this action"
    )
    return TableConfigError(
        f"{action} refused: {table.uri} has Hudi's metadata table ({state.describe()}), {policy}: "
        f"{why}; the action would leave it stale for Hudi's Java/Flink writers and services. Nothing "
        f"was changed. {ways_out(table)}"
    )


def guard_mutation(
    table: LakeTable,
    action: str,
    options: Mapping[str, object] | None = None,
    *,
    dry_run: bool = False,
    maintains: bool = False,
    moves_keys: bool = True,
) -> MetadataTableDrop | None:
    """Decide, before ``action`` takes its first lock, what it does about the table's MDT.

    No MDT, or a dry run: nothing. Policy ``drop``: drop the MDT (see :func:`drop_metadata_table`)
    and return what was dropped. Policy ``maintain`` (the default): nothing when the action keeps
    the MDT itself (``maintains``) and :func:`unmaintainable` finds nothing against it
    (``moves_keys`` false: the action moves no key); otherwise ``TableConfigError`` naming why
    (nothing written). Policy ``refuse``: ``TableConfigError``. So an action that maintains the MDT
    finds one present after this call only under ``maintain`` (:func:`kept_metadata_table` opens it).
    """
    # Parsed first: a bad value fails the same way whether or not the table has an MDT today.
    layers = (table.config.properties, table.option_defaults, options or {})
    policy = MetadataTablePolicy.from_options(*layers)
    state = detect(table)
    if not state.present or dry_run:
        return None
    if policy is MetadataTablePolicy.DROP:
        return drop_metadata_table(table, options)
    # Under refuse, why says what the default (the option unset) would do.
    asked = policy is MetadataTablePolicy.MAINTAIN and maintain_asked(*layers)
    why = (
        unmaintainable(table, state, moves_keys) if maintains else "it does not update the metadata table yet"
    )
    if policy is MetadataTablePolicy.REFUSE:
        raise refusal(table, state, action, why)
    if why is not None:
        raise maintain_refusal(table, state, action, why, asked=asked)
    try:  # an MDT that cannot be kept (another table's, no files base file): before any lock file
        kept_metadata_table(table)
    except TableConfigError as error:
        raise maintain_refusal(table, state, action, str(error), asked=asked) from None
    return None


def kept_metadata_table(table: LakeTable) -> MetadataTableWriter | None:
    """The writer of the table's MDT, keeping the partitions it maintains (None: no MDT). Past
    :func:`guard_mutation` of a maintaining action, an MDT is still there only under ``maintain``,
    and then lists ``files`` (else the guard refused): properties without it need no storage request."""
    if not lists_files_partition(table):
        return None
    state = detect(table)
    if not state.present:
        return None
    return MetadataTableWriter.open(
        table.storage,
        table.clock,
        [p for p in state.partitions if p in MAINTAINED_PARTITIONS],
        (table.config.table_version, table.layout, table.config.name),
    )


def blocking_instants(table: LakeTable, timeline: Timeline, options: Mapping[str, object]) -> list[Instant]:
    """Pending instants another writer may still be running: writes whose heartbeat is live (a write
    without one is failed, as Hudi's rollback treats it) and inflight table services."""
    config = FailedWritesConfig.from_options(table.config.properties, dict(options))
    now = now_ms()
    found = []
    for instant in timeline.pending:
        if instant.action in ROLLBACK_ACTIONS:
            if not heartbeat_expired(table.store, instant.timestamp, config, now):
                found.append(instant)
        elif instant.is_inflight:
            found.append(instant)
    return found


def drops_metadata_table(table: LakeTable, options: Mapping[str, object] | None) -> bool:
    """Whether :func:`guard_mutation` will drop the table's MDT (``hoodie.metadata.enable=false``
    and an MDT present). The drop cannot be undone: an action checks its own input first when this
    is true. The options the drop reads are parsed here too, so a bad value is still the first error."""
    policy = MetadataTablePolicy.from_options(table.config.properties, table.option_defaults, options or {})
    if policy is not MetadataTablePolicy.DROP or not detect(table).present:
        return False
    FailedWritesConfig.from_options(table.config.properties, dict(options or {}))
    return True


def drop_metadata_table(
    table: LakeTable, options: Mapping[str, object] | None = None, *, force: bool = False
) -> MetadataTableDrop | None:
    """Drop the MDT as a Java writer with ``hoodie.metadata.enable=false`` does; None if there is none.

    Under every lock our services take, and only when no other writer's instant is pending: (a)
    ``hoodie.properties`` with both partition keys empty, by Hudi's backup protocol; (b) delete
    ``.hoodie/metadata/``. Each step is idempotent, so a run after a crash finishes the drop.
    ``table.config`` is refreshed to the new properties. ``force`` (``lake metadata-table --drop
    --force``) does not wait for inflight table services: a run that crashed leaves one inflight for
    good, and finishing or rolling it back is itself refused while the MDT exists. Writes whose
    heartbeat is live always block.
    """
    # Read under the locks below; parsed now, so a bad value changes nothing (not even a lock file).
    FailedWritesConfig.from_options(table.config.properties, dict(options or {}))
    # Versions 8 and 9 too: Hudi 1.x drops its metadata table the same way.
    with contextlib.ExitStack() as stack:
        for name in ALL_SERVICE_LOCKS:
            stack.enter_context(table.store.exclusive(name, DROP_LOCK_WAIT_SECONDS))
        # Read again under the locks: another process may have dropped it (or rewritten the file).
        source = table.storage.uri(f"{HOODIE_DIR}/{PROPERTIES_FILE}")
        props = parse_properties(table.store.read_properties_text())
        table.config = TableConfig.from_properties(props, source)
        state = detect(table)
        if not state.present:
            table.store.recover_properties()  # a backup an interrupted update left behind
            return None
        busy = blocking_instants(table, table.timeline(), options or {})
        if force:
            busy = [i for i in busy if i.action in ROLLBACK_ACTIONS]
        if busy:
            names = ", ".join(table.layout.file_name(i) for i in busy)
            services = [i for i in busy if i.action not in ROLLBACK_ACTIONS]
            way_out = (
                "; a table service that crashed stays inflight for good (a heartbeat never expires "
                "for it, and finishing or rolling it back is refused while the metadata table exists): "
                f"if no other engine is running it, run 'lake metadata-table {table.uri} --drop --force'"
                if services
                else ""
            )
            raise TableConfigError(
                f"{table.uri}: not dropping Hudi's metadata table while instant(s) of another writer are "
                f"pending ({names}): it would keep writing to it. Let that writer finish (or its heartbeat "
                f"expire), then run again{way_out}; nothing was changed"
            )
        if state.partitions or state.inflight_partitions:
            cleared = {**props, PARTITIONS_KEY: "", INFLIGHT_PARTITIONS_KEY: ""}
            table.store.modify_properties(cleared)
            table.config = TableConfig.from_properties(cleared, source)
        else:
            table.store.recover_properties()  # a backup an interrupted drop left behind
        table.store.delete_metadata_table()
    drop = MetadataTableDrop(table.uri, state)
    table.metadata_table_drop = drop
    log.warning("%s", drop.notice)
    return drop


@dataclass(frozen=True)
class MetadataTableReport:
    """``lake metadata-table PATH``: the MDT's state next to the data timeline's."""

    state: MetadataTableState
    instants: tuple[str, ...]  # MDT timeline file names, oldest first
    latest_instant: str | None  # the MDT's latest completed instant time
    latest_data_instant: str | None  # the data table's latest completed instant time

    def to_dict(self) -> dict[str, object]:
        return {
            "present": self.state.present,
            "partitions": list(self.state.partitions),
            "inflight_partitions": list(self.state.inflight_partitions),
            "folder_exists": self.state.folder_exists,
            "instants": list(self.instants),
            "latest_metadata_instant": self.latest_instant,
            "latest_data_instant": self.latest_data_instant,
        }


def report(table: LakeTable) -> MetadataTableReport:
    """Read-only: the MDT partitions, its timeline and how far it is behind the data timeline."""
    state = detect(table)
    # MDT instant times may carry Hudi's 3-digit operation suffix (compaction 001, clean 002, ...).
    # Its timeline is in .hoodie/ (layout 1) or .hoodie/timeline/ (layout 2, completed files named
    # <time>_<completion time>.<action>), as the data table's.
    folder = f"{MDT_PATH}/{table.layout.folder}"
    names = sorted(n for n in table.storage.list_names(folder) if n[:1].isdigit() and "." in n)
    completed = [
        n.split(".")[0].split("_")[0] for n in names if n.count(".") == 1 and not n.endswith(".inflight")
    ]
    data = [i.timestamp for i in table.timeline().instants if i.is_completed]
    return MetadataTableReport(
        state, tuple(names), max(completed) if completed else None, max(data) if data else None
    )
