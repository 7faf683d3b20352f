"""File-group planning of a write: its routed rows assigned to new and existing file groups with the
bloom index. Reads only; nothing is written.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from airflow_lake_provider.lake.errors import PendingClusteringError
from airflow_lake_provider.lake.file_group.file_names import new_file_id
from airflow_lake_provider.lake.table.clustering import pending_clustering_plans
from airflow_lake_provider.lake.table.index.bloom import BaseFileReads, locate
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.plan import (
    _KEY,
    _PART,
    FileGroupWrite,
    GroupKind,
    Operation,
    WriteContext,
)
from airflow_lake_provider.lake.timeline.active import Timeline


def plan_file_groups(
    table: LakeTable,
    context: WriteContext,
    rows: pa.Table,
    max_rows_per_file: int,
    reads: BaseFileReads,
) -> list[FileGroupWrite]:
    """Assign the routed ``rows`` to file groups (Hudi's bloom index, non-global): keys not in the
    table go to new groups of at most ``max_rows_per_file`` rows, existing ones to their group.
    Reads only; nothing is written. ``reads`` keeps the base files the lookup opened, for the
    caller to hand to :func:`write_file_group`."""
    partitions = sorted(set(rows.column(_PART).to_pylist()))
    if not partitions:
        return []
    view = table.file_system_view(context.timeline, partitions, sizes=False)  # sized when used
    units: list[FileGroupWrite] = []
    seqno = 0

    def add(partition: str, kind: GroupKind, file_id: str, group_rows: pa.Table, **more: Any) -> None:
        nonlocal seqno
        units.append(FileGroupWrite(len(units) + 1, partition, kind, file_id, seqno, group_rows, **more))
        seqno += group_rows.num_rows

    for partition in partitions:
        part_rows = rows.filter(pc.equal(rows.column(_PART), partition))
        groups, held = locate(table, context.timeline, view, partition, part_rows.column(_KEY), reads)
        # A hash lookup of the keys, not a join: Arrow's joins cannot carry struct, list or map columns.
        where = pc.index_in(part_rows.column(_KEY), value_set=held.column("key"))
        located = part_rows.append_column("__lake_fid", held.column("__lake_fid").take(where))
        found = pc.is_valid(located.column("__lake_fid"))
        new_rows = located.filter(pc.invert(found)).drop_columns(["__lake_fid"])
        old_rows = located.filter(found)
        if context.operation is not Operation.DELETE:  # deleting an absent key does nothing
            for start in range(0, new_rows.num_rows, max_rows_per_file):  # >= 1: _WriteJob clamps it
                add(
                    partition,
                    GroupKind.INSERT,
                    new_file_id(),
                    new_rows.slice(start, max_rows_per_file),
                    first_in_partition=start == 0,
                )
        for fid, group_rows in _rows_by_group(old_rows, held):
            merged, newest = groups[fid]
            if table.config.is_mor:
                add(partition, GroupKind.APPEND, fid, group_rows, merged=merged, newest=newest)
            else:
                add(partition, GroupKind.MERGE, fid, group_rows, merged=merged)
    return units


def refuse_pending_clustering(
    table: LakeTable, timeline: Timeline, rows: pa.Table, operation: Operation
) -> None:
    """Refuse (before anything is written) a write whose keys are in file groups a pending clustering
    will replace, as Hudi's default Spark update strategy does: executing the plan later would replace
    them with files built from the older slice, losing the update or delete. New keys always go to new
    file groups (:func:`plan_file_groups` appends none to an existing one), never into these."""
    busy = pending_clustering_plans(timeline)
    if not busy or rows.num_rows == 0:
        return
    parts = pa.array(sorted({p for p, _ in busy}), rows.column(_PART).type)
    touched = rows.filter(pc.is_in(rows.column(_PART), value_set=parts))
    if touched.num_rows == 0:
        return
    # The same lookup the write does next; only run when a pending plan covers a partition written.
    context = WriteContext("", timeline, pa.schema([]), {}, operation)
    with BaseFileReads(table) as reads:
        units = plan_file_groups(table, context, touched, touched.num_rows, reads)
    hit: dict[str, list[str]] = {}
    for unit in units:
        clustering = busy.get((unit.partition, unit.file_id))
        if unit.kind is not GroupKind.INSERT and clustering is not None:
            hit.setdefault(clustering, []).append(
                f"{unit.partition}/{unit.file_id}" if unit.partition else unit.file_id
            )
    if hit:
        clustering, groups = min(hit.items())
        named = ", ".join(sorted(groups))
        raise PendingClusteringError(
            f"{table.uri}: write ({operation.value}) refused: it reaches file group(s) {named} that the "
            f"pending clustering {clustering} will replace (executing it would lose this write); nothing "
            f"was written. Roll the clustering back (`lake rollback {table.uri} --instant {clustering}`, "
            "e.g. a crashed merge-small-files) or let the engine that planned it execute it first"
        )


def _rows_by_group(old_rows: pa.Table, held: pa.Table) -> list[tuple[str, pa.Table]]:
    """The rows of ``old_rows`` (keys found, ``__lake_fid``: one group holding each) by file id.

    A key the partition holds in several file groups (Spark's ``insert`` and ``bulk_insert`` do not
    look keys up, so they can write one) goes to every group that holds it, as Hudi's non-global
    bloom and simple indexes tag a record with each location found: the delete or update reaches
    every copy. The batch's keys are unique, so ``held`` has more rows than ``old_rows`` only when
    the table holds a key twice."""
    if held.num_rows == old_rows.num_rows:  # the common case: one group per key, as located
        fids = old_rows.column("__lake_fid")
        return [
            (fid, old_rows.filter(pc.equal(fids, fid)).drop_columns(["__lake_fid"]))
            for fid in sorted(set(fids.to_pylist()))
        ]
    rows = old_rows.drop_columns(["__lake_fid"])
    keys, owners = held.column("key").combine_chunks(), held.column("__lake_fid").combine_chunks()
    return [
        (fid, rows.filter(pc.is_in(rows.column(_KEY), value_set=keys.filter(pc.equal(owners, fid)))))
        for fid in sorted(set(owners.to_pylist()))
    ]
