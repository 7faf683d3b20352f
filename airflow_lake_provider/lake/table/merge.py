"""Merging a file slice: base rows, then log records and deletes in log order (spec section 10).

Pure functions over Arrow tables, shared by the snapshot reader and compaction. The fold Hudi does
record by record is computed in bulk: per key, a later version replaces an earlier one when its
ordering value is at least as large (event time) or always (commit time); a delete is a version too.
A "natural order" delete (no ordering value) beats every version before it whatever their ordering.
As in Hudi (hudi-rs agrees), the log is merged first and its result then with the base row: a data
version logged after a natural-order delete still loses to the base row if its ordering value is
smaller, while a delete logged right after it leaves the key deleted (and its ordering value does
not carry over to versions logged after it). Once a data version follows the natural-order delete,
the log's last word meets the base row by ordering, even when it is a later delete: a base row with
a larger ordering value than that delete is read again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from airflow_lake_provider.lake.format.table_config import MergeMode

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


def _arange(start: int, n: int) -> pa.Array:
    """int64 ``start, start + 1, ...`` (n values), built natively (``pa.array(range(...))`` is slow):
    numpy's buffer, not copied (polars is loaded only where a log block is Avro-decoded). Wrapped
    as a buffer: ``pa.array`` of an ndarray loads ``numpy.ma`` (its masked-array check), 20 ms of
    every fresh ``lake read``."""
    return pa.Array.from_buffers(
        pa.int64(), n, [None, pa.py_buffer(np.arange(start, start + n, dtype=np.int64))]
    )


def _flat(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _candidates(
    items: Sequence[LogItem], ordering_type: pa.DataType | None, ordering: str | None
) -> pa.Table:
    keys, ords, natural, deletes, refs = [], [], [], [], []
    row_offset = 0
    for item in items:
        n = len(item.keys)
        keys.append(_flat(item.keys))
        if isinstance(item, DataItem):
            if ordering and ordering in item.table.column_names and ordering_type is not None:
                col = _flat(item.table.column(ordering))
                ords.append(col if col.type == ordering_type else col.cast(ordering_type))
            else:
                ords.append(pa.nulls(n, ordering_type or pa.null()))
            natural.append(pa.repeat(False, n))
            if IS_DELETED_FIELD in item.table.column_names:
                flag = pc.fill_null(_flat(item.table.column(IS_DELETED_FIELD)), False)
                deletes.append(flag.cast(pa.bool_()))
            else:
                deletes.append(pa.repeat(False, n))
            refs.append(_arange(row_offset, n))
            row_offset += n
        else:
            ords.append(
                _flat(item.ordering).cast(ordering_type) if ordering_type is not None else pa.nulls(n)
            )
            natural.append(_flat(pc.is_null(item.ordering)))
            deletes.append(pa.repeat(True, n))
            refs.append(pa.repeat(pa.scalar(-1, pa.int64()), n))
    total = sum(len(k) for k in keys)
    return pa.table(
        {
            "key": pa.concat_arrays(keys) if keys else pa.array([], pa.string()),
            "ord": pa.concat_arrays(ords) if ords else pa.array([]),
            "seq": _arange(0, total),
            "natural": pa.concat_arrays(natural) if natural else pa.array([], pa.bool_()),
            "is_delete": pa.concat_arrays(deletes) if deletes else pa.array([], pa.bool_()),
            "ref": pa.concat_arrays(refs) if refs else pa.array([], pa.int64()),
        }
    )


def _last_per_key(table: pa.Table, sort_keys: list[tuple[str, str]]) -> pa.Table:
    """The row that sorts last within each key, in key order."""
    if table.num_rows == 0:
        return table
    if _strictly_increasing(table.column("key")):  # one row a key, in key order: that is the answer
        return table
    keys = [("key", "ascending", "at_start")] + [(name, order, "at_start") for name, order in sort_keys]
    ordered = table.take(pc.sort_indices(table, sort_keys=keys))
    key = ordered.column("key").combine_chunks()
    if ordered.num_rows == 1:
        return ordered
    differs = pc.not_equal(key.slice(0, len(key) - 1), key.slice(1))
    is_last = pa.concat_arrays([differs, pa.array([True])])
    return ordered.filter(is_last)


def _strictly_increasing(keys: pa.ChunkedArray) -> bool:
    """Whether no key is null and each is greater than the one before (a log block of distinct keys
    written in key order): a 200,000-key block was sorted for nothing, 0.05 s of a read's merge."""
    flat = keys.combine_chunks()
    if flat.null_count:
        return False
    return len(flat) < 2 or pc.all(pc.less(flat.slice(0, len(flat) - 1), flat.slice(1))).as_py()


def _drop_deletes_of_deleted_keys(cand: pa.Table, cleared_keys: pa.ChunkedArray) -> pa.Table:
    """Drop delete records that follow a natural-order delete before any data version of the key.

    The key is already deleted there, and such a delete's ordering value does not carry over: a data
    version logged later competes with the base row alone (hudi-rs merges so; the property model too).
    ``cand`` holds only versions after each key's last natural-order delete.
    """
    data = cand.filter(pc.not_equal(cand.column("ref"), -1))
    first = data.group_by("key").aggregate([("seq", "min")]).rename_columns(["key", "first_data"])
    where = pc.index_in(cand.column("key"), value_set=first.column("key"))
    first_data = pc.fill_null(first.column("first_data").take(where), pa.scalar(2**62, pa.int64()))
    early_delete = pc.and_(
        pc.is_in(cand.column("key"), value_set=cleared_keys),
        pc.and_(pc.equal(cand.column("ref"), -1), pc.less(cand.column("seq"), first_data)),
    )
    return cand.filter(pc.invert(early_delete))


def merge_slice(
    base: pa.Table | None,
    base_keys: pa.Array | None,
    items: Sequence[LogItem],
    *,
    mode: MergeMode,
    ordering: str | None,
    schema: pa.Schema,
) -> pa.Table:
    """Merge ``items`` (in log order) onto ``base``; returns the live rows shaped as ``schema``.

    Rows come out as: the surviving base rows in base order, then the winning log rows by key.
    ``base_keys`` are the record keys of ``base`` (read only when it has rows).
    """
    base = base if base is not None else schema.empty_table()
    if not items:
        return base
    merge = LogMerge(items, mode=mode, ordering=ordering, schema=schema)
    parts = [merge.kept_base(base, base_keys)] if base.num_rows else []
    return pa.concat_tables([*parts, merge.log_rows()])


def _bools(n: int, true_at: np.ndarray) -> pa.Array:
    """A boolean array of ``n`` values, true at the positions ``true_at``, built from a bitmap (as
    :func:`_arange`: ``pa.array`` of an ndarray loads ``numpy.ma``)."""
    bits = np.zeros(n, dtype=bool)
    bits[true_at] = True
    return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(np.packbits(bits, bitorder="little"))])


class _Claims:
    """Which ids (winners, cleared keys) a base row has taken, over the parts of a base file."""

    def __init__(self, size: int) -> None:
        self.taken = np.zeros(size, dtype=bool)
        self.count = 0

    def first(self, ids: np.ndarray) -> np.ndarray | None:
        """For ``ids`` (one per row, in base order): true where the row takes its id first; None
        when every row does (no id twice, none taken before: the usual case, found without a sort
        by counting the ids taken)."""
        before = self.taken[ids]
        self.taken[ids] = True
        count = int(np.count_nonzero(self.taken))
        new, self.count = count - self.count, count
        if new == len(ids):
            return None
        _, first = np.unique(ids, return_index=True)
        own = np.zeros(len(ids), dtype=bool)
        own[first] = True
        return own & ~before


class LogMerge:
    """The log of one slice merged (its winning version per key), then met with the base rows one
    part (row group) at a time: only one part of the base need be in memory at once."""

    def __init__(
        self,
        items: Sequence[LogItem],
        *,
        mode: MergeMode,
        ordering: str | None,
        schema: pa.Schema,
    ) -> None:
        self.ordering = ordering
        self.ordering_type = schema.field(ordering).type if ordering and ordering in schema.names else None
        self.event_time = mode is MergeMode.EVENT_TIME_ORDERING and self.ordering_type is not None
        cand = _candidates(items, self.ordering_type, ordering)
        # Versions before a natural-order delete of the same key can never win.
        natural = cand.filter(cand.column("natural"))
        cleared_keys = pa.array([], pa.string())
        if natural.num_rows:  # group_by loads Arrow's query engine (pyarrow.acero, .dataset): 20 ms
            cleared = (
                natural.group_by("key").aggregate([("seq", "max")]).rename_columns(["key", "cleared_at"])
            )
            where = pc.index_in(cand.column("key"), value_set=cleared.column("key"))
            cleared_at = cleared.column("cleared_at").take(where)
            cand = cand.filter(pc.greater(cand.column("seq"), pc.fill_null(cleared_at, -1)))
            cand = _drop_deletes_of_deleted_keys(cand, cleared.column("key"))
            # A base row is gone if no data version follows its key's last natural-order delete (a
            # delete right after it keeps the key deleted, and such a key has no winner). Once one
            # does, the log's last word, even a later delete, meets the base row by ordering: Hudi
            # merges the log first, then the base.
            revived = _flat(cand.filter(pc.not_equal(cand.column("ref"), -1)).column("key"))
            cleared_keys = _flat(cleared.column("key"))
            cleared_keys = cleared_keys.filter(pc.invert(pc.is_in(cleared_keys, value_set=revived)))
        self.cleared_keys = cleared_keys
        sort = [("ord", "ascending"), ("seq", "ascending")] if self.event_time else [("seq", "ascending")]
        self.winners = _last_per_key(cand.select(["key", "ord", "seq", "is_delete", "ref"]), sort)
        data_tables = [i.table for i in items if isinstance(i, DataItem)]
        self.data = pa.concat_tables(data_tables) if data_tables else schema.empty_table()
        self.winner_keys = _flat(self.winners.column("key"))
        self.winner_alive = pc.invert(_flat(self.winners.column("is_delete")))
        self._beaten: list[pa.Array] = []  # winners a base row beat (by ordering), over all parts
        self._met: list[pa.Array] = []  # winners whose key is a base key, over all parts
        # Winners and cleared keys a base row took, over all parts (a key's first row takes it).
        self._winner_claims = _Claims(self.winners.num_rows)
        self._cleared_claims = _Claims(len(cleared_keys))

    def match(self, base_keys: pa.Array) -> pa.Array:
        """Each key's winner: an index into the winners, null where the log has no version of it.
        Matching a whole base file's keys at once hashes the winners once, not once per part."""
        return pc.index_in(base_keys, value_set=self.winner_keys)

    def meet(
        self, base: pa.Table, base_keys: pa.Array, match: pa.Array | None = None
    ) -> tuple[pa.Array, pa.Array]:
        """For one part of the base: which rows survive (bool), and each row's winner (index into
        the winners, null where the log has no version of its key; :meth:`match` of the part's keys
        if given). Records the winners the part's rows beat or met, for :meth:`log_rows`."""
        raw = self.match(base_keys) if match is None else _flat(match)
        match = self._claim(raw)
        matched = pc.is_valid(match)
        keep = self._not_cleared(base_keys) if len(self.cleared_keys) else None
        if self.event_time and self.winners.num_rows:
            # ... and survives a log version only with a strictly larger ordering value.
            bord = base.column(self.ordering)
            bord = bord if bord.type == self.ordering_type else bord.cast(self.ordering_type)
            word = self.winners.column("ord").take(match)  # null where there is no winner
            base_wins = pc.and_(
                matched,
                pc.fill_null(
                    pc.or_kleene(pc.greater(bord, word), pc.and_(pc.is_null(word), pc.is_valid(bord))), False
                ),
            )
            survives = pc.or_(pc.invert(matched), base_wins)
            keep = survives if keep is None else pc.and_(keep, survives)
            if pc.any(base_wins).as_py():  # a cleared key has no winner: a row that won is kept
                self._beaten.append(_flat(match.filter(base_wins)))
        else:
            untouched = pc.invert(matched)
            keep = untouched if keep is None else pc.and_(keep, untouched)
        self._met.append(_flat(match.filter(matched)))
        return _flat(keep), _flat(match)

    def _claim(self, match: pa.Array) -> pa.Array:
        """``match`` with each winner left to the first base row of its key (over all parts, in base
        order): a later row of the same key is not met by the log and reads as stored. Hudi's
        bulk_insert, and inserts without deduplication, can write a key twice in one base file;
        Hudi's readers (and hudi-rs) hand a key's log version to the first base row that asks for it
        and read the others as they are, so a compaction keeps what a read showed before it."""
        index = pc.fill_null(match, -1).to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(index >= 0)
        own = self._winner_claims.first(index[rows]) if len(rows) else None
        if own is None:
            return match
        return pc.if_else(_bools(len(index), rows[~own]), pa.scalar(None, match.type), match)

    def _not_cleared(self, base_keys: pa.Array) -> pa.Array:
        """False for the rows a natural-order delete took: the first row in base order of each key
        the log left deleted (such a key has no winner). A later row of the key reads as stored, as
        for any other version (:meth:`_claim`)."""
        index = pc.fill_null(pc.index_in(base_keys, value_set=self.cleared_keys), -1)
        index = index.to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(index >= 0)
        own = self._cleared_claims.first(index[rows]) if len(rows) else None
        return pc.invert(_bools(len(index), rows if own is None else rows[own]))

    def kept_base(self, base: pa.Table, base_keys: pa.Array, match: pa.Array | None = None) -> pa.Table:
        """The rows of one part of the base that survive the log."""
        return base.filter(self.meet(base, base_keys, match)[0])

    def _alive(self) -> pa.Array:
        alive = self.winner_alive
        if self._beaten:
            beaten = pc.unique(pa.concat_arrays(self._beaten)).cast(pa.int64())
            beaten_mask = pc.is_in(_arange(0, self.winners.num_rows), value_set=beaten)
            alive = pc.and_(alive, pc.invert(beaten_mask))
        return alive

    def log_rows(self) -> pa.Table:
        """The winning log rows no base row beat, by key: to follow every part of the base."""
        return self._data_rows(self.winners.column("ref").filter(self._alive()))

    def _data_rows(self, refs: pa.Array | pa.ChunkedArray) -> pa.Table:
        """The data rows ``refs`` names, in that order. When they are every row in log order (a
        log of distinct keys written in key order, none beaten), the data itself: a take would copy
        the whole log while the data is still held (its size again at the read's peak)."""
        refs = _flat(refs)
        count = self.data.num_rows
        if len(refs) == count and not refs.null_count and pc.all(pc.equal(refs, _arange(0, count))).as_py():
            return self.data
        return self.data.take(refs)

    def replacing_rows(
        self, base: pa.Table, base_keys: pa.Array, match: pa.Array | None = None
    ) -> tuple[pa.Table, pa.Array]:
        """One part of the base merged in place: each surviving base row, or the log version that
        replaces it, in base order (as Hudi's merge handle writes a compacted file); and which rows
        of the part met their log version and are in it (bool: an update, whichever version won)."""
        keep, match = self.meet(base, base_keys, match)
        met = pc.fill_null(pc.is_valid(match), False)
        alive = self.winner_alive  # a winner is beaten only by its own key's base row: kept there
        replaced = pc.and_(pc.invert(keep), pc.fill_null(alive.take(match), False))
        if not pc.any(replaced).as_py():
            return (base if pc.all(keep).as_py() else base.filter(keep)), pc.and_(keep, met)
        refs = self.winners.column("ref").take(match.filter(replaced))
        taken = np.flatnonzero(pc.or_(keep, replaced).to_numpy(zero_copy_only=False))
        which = replaced.to_numpy(zero_copy_only=False)[taken]
        index = taken.copy()
        index[which] = base.num_rows + np.arange(int(which.sum()))
        written = pc.and_(pc.or_(keep, replaced), met)
        return pa.concat_tables([base, self.data.take(refs)]).take(pa.array(index)), written

    def inserted_rows(self) -> pa.Table:
        """The winning log rows whose key no base row has (after every part met the log)."""
        alive = self._alive()
        if self._met:
            met = pc.unique(pa.concat_arrays(self._met)).cast(pa.int64())
            alive = pc.and_(alive, pc.invert(pc.is_in(_arange(0, self.winners.num_rows), value_set=met)))
        return self._data_rows(self.winners.column("ref").filter(alive))
