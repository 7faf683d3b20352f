"""Merging a file slice: base rows, then log records and deletes in log order (spec section 10).

Pure functions over Arrow tables, shared by the snapshot reader and compaction. The fold Hudi does
record by record is computed in bulk: per key, a later version replaces an earlier one when its
ordering value is at least as large (event time) or always (commit time); a delete is a version too.
A "natural order" delete (no ordering value) beats every version before it whatever their ordering.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from airflow_lake_provider.lake.table_config import MergeMode

IS_DELETED_FIELD = "_hoodie_is_deleted"


@dataclass(frozen=True)
class DataItem:
    """Records of one data block, already shaped like the output schema."""

    table: pa.Table
    keys: pa.Array


@dataclass(frozen=True)
class DeleteItem:
    """Keys of one delete block; ``ordering`` null where the delete is in natural order."""

    keys: pa.Array
    ordering: pa.Array


LogItem = DataItem | DeleteItem


def _candidates(items: Sequence[LogItem], ordering_type: pa.DataType | None, ordering: str | None) -> pa.Table:
    keys, ords, natural, deletes, refs = [], [], [], [], []
    row_offset = 0
    for item in items:
        n = len(item.keys)
        keys.append(item.keys)
        if isinstance(item, DataItem):
            if ordering and ordering in item.table.column_names and ordering_type is not None:
                ords.append(item.table.column(ordering).combine_chunks().cast(ordering_type))
            else:
                ords.append(pa.nulls(n, ordering_type or pa.null()))
            natural.append(pa.array([False] * n))
            if IS_DELETED_FIELD in item.table.column_names:
                flag = pc.fill_null(item.table.column(IS_DELETED_FIELD).combine_chunks(), False)
                deletes.append(flag.cast(pa.bool_()))
            else:
                deletes.append(pa.array([False] * n))
            refs.append(pa.array(range(row_offset, row_offset + n), pa.int64()))
            row_offset += n
        else:
            ords.append(item.ordering.cast(ordering_type) if ordering_type is not None else pa.nulls(n))
            natural.append(pc.is_null(item.ordering))
            deletes.append(pa.array([True] * n))
            refs.append(pa.array([-1] * n, pa.int64()))
    total = sum(len(k) for k in keys)
    return pa.table(
        {
            "key": pa.concat_arrays(keys) if keys else pa.array([], pa.string()),
            "ord": pa.concat_arrays(ords) if ords else pa.array([]),
            "seq": pa.array(range(total), pa.int64()),
            "natural": pa.concat_arrays(natural) if natural else pa.array([], pa.bool_()),
            "is_delete": pa.concat_arrays(deletes) if deletes else pa.array([], pa.bool_()),
            "ref": pa.concat_arrays(refs) if refs else pa.array([], pa.int64()),
        }
    )


def _last_per_key(table: pa.Table, sort_keys: list[tuple[str, str]]) -> pa.Table:
    """The row that sorts last within each key."""
    if table.num_rows == 0:
        return table
    keys = [("key", "ascending", "at_start")] + [(name, order, "at_start") for name, order in sort_keys]
    ordered = table.take(pc.sort_indices(table, sort_keys=keys))
    key = ordered.column("key").combine_chunks()
    if ordered.num_rows == 1:
        return ordered
    differs = pc.not_equal(key.slice(0, len(key) - 1), key.slice(1))
    is_last = pa.concat_arrays([differs, pa.array([True])])
    return ordered.filter(is_last)


def merge_slice(
    base: pa.Table | None,
    base_keys: pa.Array | None,
    items: Sequence[LogItem],
    *,
    mode: MergeMode,
    ordering: str | None,
    schema: pa.Schema,
) -> pa.Table:
    """Merge ``items`` (in log order) onto ``base``; returns the live rows shaped as ``schema``."""
    base = base if base is not None else schema.empty_table()
    base_keys = base_keys if base_keys is not None else pa.array([], pa.string())
    if not items:
        return base
    ordering_type = schema.field(ordering).type if ordering and ordering in schema.names else None
    event_time = mode is MergeMode.EVENT_TIME_ORDERING and ordering_type is not None
    cand = _candidates(items, ordering_type, ordering)
    # Versions before a natural-order delete of the same key can never win.
    natural = cand.filter(cand.column("natural"))
    cleared = natural.group_by("key").aggregate([("seq", "max")]).rename_columns(["key", "cleared_at"])
    if cleared.num_rows:
        cand = cand.join(cleared, "key", join_type="left outer")
        cand = cand.filter(pc.greater(cand.column("seq"), pc.fill_null(cand.column("cleared_at"), -1)))
    sort = [("ord", "ascending"), ("seq", "ascending")] if event_time else [("seq", "ascending")]
    winners = _last_per_key(cand.select(["key", "ord", "seq", "is_delete", "ref"]), sort)

    data = pa.concat_tables([i.table for i in items if isinstance(i, DataItem)]) if any(
        isinstance(i, DataItem) for i in items
    ) else schema.empty_table()
    touched = pa.concat_arrays([winners.column("key").combine_chunks(), cleared.column("key").combine_chunks()])
    base_untouched = base.filter(pc.invert(pc.is_in(base_keys, value_set=touched)))
    keep_base = base_untouched
    if event_time and winners.num_rows and base.num_rows:
        # The base row survives a log version only with a strictly larger ordering value.
        base_idx = pa.table({"key": base_keys, "bord": base.column(ordering).combine_chunks().cast(ordering_type),
                             "bidx": pa.array(range(base.num_rows), pa.int64())})
        if cleared.num_rows:
            base_idx = base_idx.filter(pc.invert(pc.is_in(base_idx.column("key"), value_set=cleared.column("key"))))
        duel = winners.join(base_idx, "key", join_type="inner")
        base_wins = pc.fill_null(
            pc.or_kleene(
                pc.greater(duel.column("bord"), duel.column("ord")),
                pc.and_(pc.is_null(duel.column("ord")), pc.is_valid(duel.column("bord"))),
            ),
            False,
        )
        keep_base = pa.concat_tables([base_untouched, base.take(duel.filter(base_wins).column("bidx"))])
        beaten = duel.filter(base_wins).column("key")
        winners = winners.filter(pc.invert(pc.is_in(winners.column("key"), value_set=beaten.combine_chunks())))
    live = winners.filter(pc.invert(winners.column("is_delete")))
    log_rows = data.take(live.column("ref"))
    return pa.concat_tables([keep_base, log_rows])
