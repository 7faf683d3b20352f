"""The ``merge-small-files`` policy: rewrite a partition's small base files into files of a target
size as a Hudi clustering ``replacecommit``.

Durable order, under the table's write lock (no write may rewrite a group being replaced):
``<c>.replacecommit.requested`` (``HoodieRequestedReplaceMetadata`` with the clustering plan) ->
``.inflight`` -> a marker, then each new base file -> ``<c>.replacecommit`` (commit metadata with the
new files' write stats and ``partitionToReplaceFileIds``). On table versions 8 and 9 the pending
files are ``<c>.clustering.requested``/``.inflight`` and the completed one
``<c>_<completion>.replacecommit`` (Avro), as Hudi 1.x's clustering writes them. Until the
completed file exists readers see the old files only. A merge left pending by a crash is rolled
back (its new files removed, its timeline files deleted) before the next one plans. Replaced files
stay until a clean removes them.

Under ``lake.metadata-table.maintain`` (v8/v9, an MDT of ``files``, ``column_stats``,
``partition_stats``) the replacecommit gets the MDT deltacommit Hudi 1.x's Java writer gives a
clustering commit, completed just before it (``MetadataTableWriter.commit_write`` of its commit
metadata): the new base files in ``files`` (the replaced ones stay listed, as in Java, until a clean
deletes them), their ``column_stats``, the partition's ``partition_stats`` (the replaced groups
still counted, as Java computes them before the commit). Rolling back a merge a crash left pending
removes that MDT deltacommit after the new files and before the pending timeline files.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from airflow_lake_provider.lake.errors import LakeError, PartitionCommitError
from airflow_lake_provider.lake.file_group.data_files import store_base_file
from airflow_lake_provider.lake.file_group.file_names import BaseFileName, new_file_id, write_token
from airflow_lake_provider.lake.file_group.model import FileSlice
from airflow_lake_provider.lake.services.compaction.operation import FILE_NAME_COLUMN, output_schema
from airflow_lake_provider.lake.table.clustering import pending_clustering_groups
from airflow_lake_provider.lake.table.metadata.policy import kept_metadata_table
from airflow_lake_provider.lake.table.metadata.records import change_of_commit
from airflow_lake_provider.lake.table.metadata.services import services_after_commit
from airflow_lake_provider.lake.table.reader import SliceReader, check_base_files
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat, join_partition
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from airflow_lake_provider.lake.timeline.markers import IOType
from airflow_lake_provider.lake.timeline.store import WRITE_LOCK

log = logging.getLogger(__name__)

STRATEGY = "lake.merge-small-files"  # names our plans, so recovery only rolls back its own
WRITE_LOCK_WAIT_SECONDS = 60.0
FaultHook = Callable[[str], None]


def _no_fault(_point: str) -> None:
    return None


@dataclass(frozen=True)
class MergeResult:
    instant: str | None
    replaced: tuple[str, ...] = ()  # file ids
    written: tuple[str, ...] = ()  # relative paths of the new base files
    bytes_in: int = 0
    rows: int = 0
    rolled_back: tuple[str, ...] = ()


def _is_ours(timeline: Timeline, instant: Instant) -> bool:
    requested = Instant(instant.timestamp, State.REQUESTED, instant.action)
    try:
        record = timeline.avro_record(requested)
    except (LakeError, OSError):
        return False
    return (record.get("extraMetadata") or {}).get("lake.strategy") == STRATEGY


def recover_merges(table: LakeTable) -> list[str]:
    """Roll back our merges a crash left pending: new files first, then the timeline files."""
    timeline = table.timeline()
    rolled = []
    for instant in timeline.filter(
        [Action.REPLACECOMMIT, Action.CLUSTERING], [State.REQUESTED, State.INFLIGHT]
    ):
        if not _is_ours(timeline, instant):
            continue
        for marker in table.store.markers.read(instant.timestamp):
            table.storage.delete_data_file(marker.relative_path)
        table.store.markers.delete(instant.timestamp)
        mdt = kept_metadata_table(table)  # while pending: Hudi 1.x readers skip its MDT deltacommit
        if mdt is not None and mdt.discard(instant.timestamp):
            log.info("removed the metadata table's deltacommit of merge %s", instant.timestamp)
        table.store.remove_pending(instant.timestamp)
        rolled.append(instant.timestamp)
        log.warning("rolled back merge-small-files %s of %s left pending by a crash", instant, table.uri)
    return rolled


def small_slices(table: LakeTable, timeline: Timeline, partition: str, target_bytes: int) -> list[FileSlice]:
    """Base-only latest slices under the target size, in groups no service is rewriting."""
    view = table.file_system_view(timeline, partitions=[partition])
    busy = set(view.pending_compaction) | pending_clustering_groups(timeline)
    found = []
    for group in view.file_groups(partition):
        latest = group.latest_slice
        if (
            view.is_replaced(group)
            or (group.partition, group.file_id) in busy
            or latest.base_file is None
            or latest.log_files
            or latest.base_file.size >= target_bytes
        ):
            continue
        found.append(latest)
    return sorted(found, key=lambda s: s.file_id)


def merge_small_files(
    table: LakeTable,
    partition: str,
    target_bytes: int,
    *,
    fault: FaultHook = _no_fault,
    options: Mapping[str, object] | None = None,
) -> MergeResult:
    """Merge the partition's small base files into ceil(total / target) new ones (at least two inputs).
    Once the merge's replacecommit completed, the MDT's own services run when due, with ``options``
    (``metadata.services``; a failure there is logged, the merge stands)."""
    if target_bytes <= 0:
        raise PartitionCommitError(f"merge-small-files: target size {target_bytes} must be positive")
    merged = _merge_locked(table, partition, target_bytes, fault)
    if merged.instant is not None:  # after the write lock: the services take it themselves
        services_after_commit(table, options)
    return merged


def _merge_locked(table: LakeTable, partition: str, target_bytes: int, fault: FaultHook) -> MergeResult:
    with table.store.exclusive(WRITE_LOCK, wait_seconds=WRITE_LOCK_WAIT_SECONDS):
        rolled = tuple(recover_merges(table))
        timeline = table.timeline()
        inputs = small_slices(table, timeline, partition, target_bytes)
        if len(inputs) < 2:
            return MergeResult(None, rolled_back=rolled)
        bytes_in = sum(s.base_file.size for s in inputs if s.base_file)
        if max(1, math.ceil(bytes_in / target_bytes)) >= len(inputs):
            # No fewer files (e.g. an earlier merge's outputs): rewriting them again is churn.
            return MergeResult(None, rolled_back=rolled)
        return _merge(table, timeline, partition, inputs, target_bytes, fault, rolled)


def _merge(
    table: LakeTable,
    timeline: Timeline,
    partition: str,
    inputs: list[FileSlice],
    target_bytes: int,
    fault: FaultHook,
    rolled: tuple[str, ...],
) -> MergeResult:
    schema = output_schema(table, timeline)
    # Before the plan exists: a foreign parquet file in an input's place is refused by name.
    check_base_files(table, [s.base_file.relative_path for s in inputs if s.base_file])
    bytes_in = sum(s.base_file.size for s in inputs if s.base_file)
    outputs = max(1, math.ceil(bytes_in / target_bytes))
    instant = table.clock.next(after=timeline.latest_time)
    plan = _clustering_plan(table, partition, inputs, bytes_in, outputs, target_bytes)
    layout_2 = table.layout.has_completion_times
    # Hudi 1.x (layout 2): a clustering has its own pending action and 1.x's plan schema, and its
    # completed replacecommit holds Avro commit metadata.
    write_plan = timeline_avro.write_avro_1x if layout_2 else timeline_avro.write_avro
    requested = table.store.create_requested(
        instant,
        Action.CLUSTERING if layout_2 else Action.REPLACECOMMIT,
        write_plan(timeline_avro.REQUESTED_REPLACE_METADATA, plan),
    )
    fault("requested")
    inflight = table.store.transition_to_inflight(requested)
    fault("inflight")
    reader = SliceReader(table, timeline, schema, as_of=None)
    parts = [reader.read_base(s) for s in inputs]
    rows = pa.concat_tables([p for p in parts if p is not None])
    rows = rows.take(pc.sort_indices(rows, [("_hoodie_record_key", "ascending")]))
    stats = _write_outputs(table, instant, partition, rows, outputs, fault)
    replaced = tuple(s.file_id for s in inputs)
    metadata = CommitMetadata(
        operation_type="CLUSTER",
        partition_to_write_stats={partition: tuple(stats)},
        extra_metadata={"schema": _schema_text(timeline)},
        partition_to_replace_file_ids={partition: replaced},
    )
    fault("commit")
    mdt = kept_metadata_table(table)
    if mdt is not None:  # maintained: its MDT deltacommit completes first, as Java's
        # Seen as a commit: the view must not read the replace metadata of a file not written yet;
        # the groups this instant replaces count in partition_stats either way (slices_seen_by).
        done = dataclasses.replace(inflight, action=Action.COMMIT)
        mdt.commit_write(table.storage, table.config, timeline, done, change_of_commit(metadata))
    table.store.transition_to_completed(inflight, metadata.to_bytes(avro=layout_2))
    table.store.markers.delete(instant)
    log.info(
        "merged %d small files (%d bytes) of %s/%s into %d at %s",
        len(inputs),
        bytes_in,
        table.uri,
        partition,
        len(stats),
        instant,
    )
    return MergeResult(instant, replaced, tuple(s.path for s in stats), bytes_in, rows.num_rows, rolled)


def _clustering_plan(
    table: LakeTable, partition: str, inputs: list[FileSlice], bytes_in: int, outputs: int, target_bytes: int
) -> dict:
    """The requested replacecommit's clustering plan (Hudi's Avro record, as a dict)."""
    return {
        "operationType": "CLUSTER",
        "clusteringPlan": {
            "inputGroups": [
                {
                    "slices": [
                        {
                            "dataFilePath": table.storage.uri(s.base_file.relative_path)
                            if s.base_file
                            else None,
                            "deltaFilePaths": [],
                            "fileId": s.file_id,
                            "partitionPath": partition,
                            "bootstrapFilePath": "",
                            "version": 1,
                        }
                        for s in inputs
                    ],
                    "metrics": {"TOTAL_IO_MB": bytes_in / 1024 / 1024, "TOTAL_LOG_FILES": 0.0},
                    "numOutputFileGroups": outputs,
                    "version": 1,
                }
            ],
            "strategy": {
                "strategyClassName": STRATEGY,
                "strategyParams": {"targetFileSizeBytes": str(target_bytes)},
                "version": 1,
            },
            "extraMetadata": {},
            "version": 1,
            "preserveHoodieMetadata": True,
        },
        "extraMetadata": {"lake.strategy": STRATEGY},
        "version": 1,
    }


def _write_outputs(
    table: LakeTable, instant: str, partition: str, rows: pa.Table, outputs: int, fault: FaultHook
) -> list[WriteStat]:
    """The merged rows (sorted by key) as ``outputs`` new base files, each after its marker."""
    per_file = math.ceil(rows.num_rows / outputs) if rows.num_rows else 0
    stats = []
    for k in range(outputs):
        chunk = rows.slice(k * per_file, per_file) if per_file else rows
        if chunk.num_rows == 0 and k > 0:
            continue
        name = BaseFileName.create(new_file_id(), write_token(k, 1, 0), instant).name
        table.store.markers.create(instant, partition, name, IOType.CREATE)
        # Rows keep their commit time and sequence number (Hudi's preserveHoodieMetadata); only the
        # file name column changes.
        out = chunk.set_column(
            chunk.schema.get_field_index(FILE_NAME_COLUMN),
            FILE_NAME_COLUMN,
            pa.repeat(pa.scalar(name, pa.string()), chunk.num_rows),
        )
        relative = join_partition(partition, name)
        size = store_base_file(table.storage, relative, out, table.config.bloom_settings)
        fault("file")
        stats.append(
            WriteStat(
                file_id=BaseFileName.parse(name).file_id,  # type: ignore[union-attr]
                partition_path=partition,
                path=relative,
                num_writes=out.num_rows,
                num_inserts=out.num_rows,
                total_write_bytes=size,
                file_size_in_bytes=size,
            )
        )
    return stats


def _schema_text(timeline: Timeline) -> str:
    schema = timeline.latest_schema()
    return schema if schema is not None else json.dumps(None)
