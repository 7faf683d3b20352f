"""merge_slice on hand-made slices, each row expected exactly: no ordering field, the
``_hoodie_is_deleted`` flag (null means live), and deletes after a natural-order delete."""

from __future__ import annotations

import pyarrow as pa

from airflow_lake_provider.lake.format.table_config import MergeMode
from airflow_lake_provider.lake.table.merge import DataItem, DeleteItem, LogMerge, _last_per_key, merge_slice

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.string())])
FLAGGED = SCHEMA.append(pa.field("_hoodie_is_deleted", pa.bool_()))


def _rows(schema: pa.Schema, rows: list[tuple]) -> pa.Table:
    return pa.table({f.name: pa.array([r[i] for r in rows], f.type) for i, f in enumerate(schema)})


def _data(schema: pa.Schema, rows: list[tuple]) -> DataItem:
    table = _rows(schema, rows)
    return DataItem(table, table.column("id").combine_chunks())


def _delete(keys: list[str], ordering: list[int | None]) -> DeleteItem:
    return DeleteItem(pa.array(keys, pa.string()), pa.array(ordering, pa.int64()))


def _merge(base_rows: list[tuple], items: list, schema: pa.Schema = SCHEMA, **kw: object) -> list[tuple]:
    base = _rows(schema, base_rows)
    options = {"mode": MergeMode.EVENT_TIME_ORDERING, "ordering": "ts", "schema": schema, **kw}
    out = merge_slice(base, base.column("id").combine_chunks(), items, **options)
    return [tuple(r.values()) for r in out.to_pylist()]


def test_without_an_ordering_field_the_last_logged_version_wins() -> None:
    # The configured ordering field is not a column (or there is none): commit-time order.
    base = [("a", 9, "a0"), ("b", 9, "b0"), ("c", 9, "c0")]
    items = [
        _data(SCHEMA, [("a", 1, "a1"), ("d", 1, "d1")]),
        _delete(["b", "d"], [None, 5]),
        _data(SCHEMA, [("a", 0, "a2")]),
    ]
    expected = [("c", 9, "c0"), ("a", 0, "a2")]
    assert _merge(base, items, ordering="missing") == expected
    assert _merge(base, items, ordering=None, mode=MergeMode.COMMIT_TIME_ORDERING) == expected
    # With ts ordering the base row of a (ts 9) beats the smaller logged versions.
    assert _merge(base, items) == [("a", 9, "a0"), ("c", 9, "c0")]


def test_the_is_deleted_flag_deletes_only_where_true() -> None:
    base = [("a", 1, "a0", False), ("b", 1, "b0", False), ("c", 1, "c0", False)]
    items = [_data(FLAGGED, [("a", 2, "a1", True), ("b", 2, "b1", None), ("c", 2, "c1", False)])]
    assert _merge(base, items, schema=FLAGGED) == [("b", 2, "b1", None), ("c", 2, "c1", False)]


def test_a_delete_after_a_data_version_that_follows_a_natural_order_delete_still_deletes() -> None:
    base = [("a", 5, "a0"), ("b", 5, "b0")]
    items = [
        _delete(["a", "b"], [None, None]),  # natural order: both gone
        _data(SCHEMA, [("a", 9, "a1"), ("b", 9, "b1")]),  # both back, beating the base by ts
        _delete(["a"], [10]),  # a deleted again
    ]
    assert _merge(base, items) == [("b", 9, "b1")]


def test_a_later_delete_smaller_than_the_base_row_brings_the_base_row_back() -> None:
    """Found by a deep property run (hudi-rs reads the same): once a data version follows the
    natural-order delete, the log's result (here a delete with ts 1) meets the base row by ts."""
    base = [("a", 2, "a0"), ("b", 2, "b0"), ("c", 2, "c0")]
    items = [
        _delete(["a", "b", "c"], [None, None, None]),
        _data(SCHEMA, [("a", 0, "a1"), ("b", 0, "b1"), ("c", 0, "c1")]),  # the base rows win (ts 2)
        _delete(["a", "b"], [1, 3]),
    ]
    # a: delete ts 1 < base ts 2, the base row is read again; b: delete ts 3 deletes; c: base wins.
    assert _merge(base, items) == [("a", 2, "a0"), ("c", 2, "c0")]
    # Without the data version in between the key stays deleted, whatever the delete's ts.
    assert _merge(base, [items[0], items[2]]) == []


def test_a_data_version_after_a_natural_order_delete_meets_the_base_row_wherever_it_sits() -> None:
    """The key's only version after the delete is the second data row of the log (any position
    counts: a key is revived by any data version, not one at a given row)."""
    items = [_delete(["b"], [None]), _data(SCHEMA, [("a", 0, "a1"), ("b", 1, "b1")])]
    assert _merge([("b", 5, "b0")], items) == [("b", 5, "b0"), ("a", 0, "a1")]
    assert _merge([("b", 0, "b0")], items) == [("a", 0, "a1"), ("b", 1, "b1")]


def test_an_update_before_another_keys_natural_order_delete_still_wins() -> None:
    base = [("a", 1, "a0"), ("b", 1, "b0")]
    items = [_data(SCHEMA, [("a", 2, "a1")]), _delete(["b"], [None])]  # a's update is record 0
    assert _merge(base, items) == [("a", 2, "a1")]


def test_null_ordering_values_lose_to_set_ones() -> None:
    # A logged version without an ordering value loses to a base row with one ...
    assert _merge([("a", 5, "a0")], [_data(SCHEMA, [("a", None, "a1")])]) == [("a", 5, "a0")]
    # ... and a base row without one loses to a logged version with one.
    assert _merge([("a", None, "a0")], [_data(SCHEMA, [("a", 3, "a1")])]) == [("a", 3, "a1")]


def _buffer_address(table: pa.Table, column: str) -> int:
    (chunk,) = table.column(column).chunks
    return chunk.buffers()[2].address  # the string data


def test_log_rows_are_the_logged_data_itself_when_every_record_wins_in_log_order() -> None:
    # Issue 31 (read peak memory): a log of distinct keys written in key order, none beaten by the
    # base, is its own output: not copied while the decoded log is still held.
    base = _rows(SCHEMA, [("a", 1, "a0"), ("c", 1, "c0"), ("e", 1, "e0")])
    logged = _data(SCHEMA, [("b", 2, "b1"), ("c", 2, "c1"), ("d", 2, "d1")])
    merge = LogMerge([logged], mode=MergeMode.EVENT_TIME_ORDERING, ordering="ts", schema=SCHEMA)
    kept = merge.kept_base(base, base.column("id").combine_chunks())
    rows = merge.log_rows()
    assert kept.column("id").to_pylist() == ["a", "e"]
    assert rows.to_pylist() == logged.table.to_pylist()
    assert _buffer_address(rows, "v") == _buffer_address(logged.table, "v")  # no copy


def test_log_rows_are_taken_by_key_when_the_log_is_not_its_own_output() -> None:
    # Out of key order, a superseded version, a version the base row beats: rows taken, by key.
    base = _rows(SCHEMA, [("a", 9, "a0")])
    unordered = _data(SCHEMA, [("c", 2, "c1"), ("b", 2, "b1"), ("a", 2, "a1")])
    merge = LogMerge([unordered], mode=MergeMode.EVENT_TIME_ORDERING, ordering="ts", schema=SCHEMA)
    merge.kept_base(base, base.column("id").combine_chunks())
    assert [tuple(r.values()) for r in merge.log_rows().to_pylist()] == [("b", 2, "b1"), ("c", 2, "c1")]
    superseded = [_data(SCHEMA, [("b", 2, "b1"), ("c", 2, "c1")]), _data(SCHEMA, [("c", 3, "c2")])]
    merge = LogMerge(superseded, mode=MergeMode.EVENT_TIME_ORDERING, ordering="ts", schema=SCHEMA)
    merge.kept_base(base, base.column("id").combine_chunks())
    assert [tuple(r.values()) for r in merge.log_rows().to_pylist()] == [("b", 2, "b1"), ("c", 3, "c2")]


def _candidates(keys: list[str | None], seqs: list[int]) -> pa.Table:
    return pa.table({"key": pa.array(keys, pa.string()), "seq": pa.array(seqs, pa.int64())})


def test_a_log_of_distinct_keys_in_key_order_is_its_own_winners_without_a_sort() -> None:
    # Issue 31 (whole-process read): sorting a 200,000-key block that is already in key order
    # was 0.05 s of the merge on the read's critical path.
    ordered = _candidates(["a", "b", "c"], [0, 1, 2])
    assert _last_per_key(ordered, [("seq", "ascending")]) is ordered


def test_keys_out_of_order_repeated_or_null_are_still_sorted_and_reduced() -> None:
    sort = [("seq", "ascending")]
    repeated = _last_per_key(_candidates(["a", "b", "b", "c"], [0, 1, 2, 3]), sort)
    assert repeated.to_pydict() == {"key": ["a", "b", "c"], "seq": [0, 2, 3]}
    unordered = _last_per_key(_candidates(["c", "a", "b"], [0, 1, 2]), sort)
    assert unordered.to_pydict() == {"key": ["a", "b", "c"], "seq": [1, 2, 0]}
    with_null = _candidates(["a", None, "b"], [0, 1, 2])  # no null key is "in order"
    assert _last_per_key(with_null, sort) is not with_null
    single = _candidates(["a"], [0])
    assert _last_per_key(single, sort).to_pydict() == {"key": ["a"], "seq": [0]}


def test_a_slice_without_a_base_file_is_its_log_alone() -> None:
    """No base (a log-only slice): no base keys either; the winning log rows, or an empty table of
    the schema when the log holds nothing."""
    items = [_data(SCHEMA, [("a", 1, "a1"), ("b", 1, "b1")]), _delete(["b"], [None])]
    options = {"mode": MergeMode.EVENT_TIME_ORDERING, "ordering": "ts", "schema": SCHEMA}
    out = merge_slice(None, None, items, **options)
    assert (out.schema, out.to_pylist()) == (SCHEMA, [{"id": "a", "ts": 1, "v": "a1"}])
    empty = merge_slice(None, None, [], **options)
    assert (empty.schema, empty.num_rows) == (SCHEMA, 0)


def _replacing(
    base_rows: list[tuple], items: list, parts: int, **kw: object
) -> tuple[list[tuple], list[bool]]:
    """Compaction's merge in place, the base cut in ``parts`` parts: (rows, which base rows met
    their log version), then the inserted rows."""
    base = _rows(SCHEMA, base_rows)
    merge = LogMerge(
        items, **{"mode": MergeMode.EVENT_TIME_ORDERING, "ordering": "ts", "schema": SCHEMA, **kw}
    )
    out: list[tuple] = []
    met: list[bool] = []
    size = -(-base.num_rows // parts)
    for start in range(0, base.num_rows, size):
        part = base.slice(start, size)
        rows, part_met = merge.replacing_rows(part, part.column("id").combine_chunks())
        out += [tuple(r.values()) for r in rows.to_pylist()]
        met += part_met.to_pylist()
    out += [tuple(r.values()) for r in merge.inserted_rows().to_pylist()]
    return out, met


def test_a_key_stored_twice_in_the_base_meets_the_log_once_in_base_order() -> None:
    """A base file may hold a key twice (Hudi's bulk_insert); Hudi's readers and hudi-rs give the
    key's log version to its first base row and read the later ones as stored (also after a delete),
    and compaction writes what the read showed, in base order."""
    base = [("a", 1, "a0"), ("b", 1, "b0"), ("a", 1, "a-dup"), ("c", 1, "c0"), ("a", 7, "a-dup2")]
    update = [_data(SCHEMA, [("a", 5, "a1"), ("d", 1, "d1")])]
    assert _merge(base, update) == [
        ("b", 1, "b0"),
        ("a", 1, "a-dup"),
        ("c", 1, "c0"),
        ("a", 7, "a-dup2"),
        ("a", 5, "a1"),
        ("d", 1, "d1"),
    ]
    for parts in (1, 2, 5):  # the first row claims the log version whichever part the others are in
        assert _replacing(base, update, parts) == (
            [
                ("a", 5, "a1"),
                ("b", 1, "b0"),
                ("a", 1, "a-dup"),
                ("c", 1, "c0"),
                ("a", 7, "a-dup2"),
                ("d", 1, "d1"),
            ],
            [True, False, False, False, False],
        )
    # The first row wins the duel by ordering: the log version is not read; the others as stored.
    first_wins = [("a", 9, "a0"), ("a", 1, "a-dup")]
    assert _merge(first_wins, update) == [("a", 9, "a0"), ("a", 1, "a-dup"), ("d", 1, "d1")]
    assert _replacing(first_wins, update, 2) == (
        [("a", 9, "a0"), ("a", 1, "a-dup"), ("d", 1, "d1")],
        [True, False],
    )
    # A delete takes the first row only; commit-time ordering alike.
    delete = [_delete(["a"], [5])]
    assert _merge(base, delete) == [("b", 1, "b0"), ("a", 1, "a-dup"), ("c", 1, "c0"), ("a", 7, "a-dup2")]
    commit_time = {"mode": MergeMode.COMMIT_TIME_ORDERING}
    assert _replacing(first_wins, update, 1, **commit_time) == (
        [("a", 5, "a1"), ("a", 1, "a-dup"), ("d", 1, "d1")],
        [True, False],
    )


def test_distinct_base_keys_all_meet_the_log() -> None:
    base = [("a", 1, "a0"), ("b", 1, "b0"), ("c", 1, "c0")]
    update = [_data(SCHEMA, [("c", 5, "c1"), ("a", 5, "a1")])]
    assert _replacing(base, update, 3) == (
        [("a", 5, "a1"), ("b", 1, "b0"), ("c", 5, "c1")],
        [True, False, True],
    )
    assert _merge(base, update) == [("b", 1, "b0"), ("a", 5, "a1"), ("c", 5, "c1")]  # the log's by key


def test_a_natural_order_delete_takes_the_first_row_of_a_key_stored_twice() -> None:
    """Of a key the base holds twice, a natural-order delete takes the first row (the row the key's
    log version goes to, or without one its first in base order); the later row reads as stored."""
    base = [("a", 1, "a0"), ("b", 1, "b0"), ("a", 1, "a-dup"), ("a", 1, "a-dup2")]
    natural = [_delete(["a"], [None])]
    assert _merge(base, natural) == [("b", 1, "b0"), ("a", 1, "a-dup"), ("a", 1, "a-dup2")]
    for parts in (1, 2, 4):
        assert _replacing(base, natural, parts) == (
            [("b", 1, "b0"), ("a", 1, "a-dup"), ("a", 1, "a-dup2")],
            [False, False, False, False],
        )
    # A delete with an ordering value after it changes nothing: the key stays deleted, first row.
    then_deleted = [_delete(["a"], [None]), _delete(["a"], [3])]
    assert _merge(base, then_deleted) == [("b", 1, "b0"), ("a", 1, "a-dup"), ("a", 1, "a-dup2")]
    # A data version after it meets the first row by ordering; the others read as stored.
    revived = [_delete(["a", "b"], [None, None]), _data(SCHEMA, [("a", 5, "a1")])]
    assert _merge(base, revived) == [("a", 1, "a-dup"), ("a", 1, "a-dup2"), ("a", 5, "a1")]
    assert _replacing(base, revived, 2) == (
        [("a", 5, "a1"), ("a", 1, "a-dup"), ("a", 1, "a-dup2")],
        [True, False, False, False],
    )


def test_of_two_logged_versions_event_time_keeps_the_larger_ordering_value_commit_time_the_later() -> None:
    items = [_data(SCHEMA, [("a", 9, "a1")]), _data(SCHEMA, [("a", 5, "a2")])]
    assert _merge([("a", 1, "a0")], items) == [("a", 9, "a1")]
    # Commit time: the last logged version, even with the ordering field present and smaller.
    commit_time = _merge([("a", 1, "a0")], items, mode=MergeMode.COMMIT_TIME_ORDERING)
    assert commit_time == [("a", 5, "a2")]


def test_a_key_stored_twice_after_another_matched_key_gives_its_version_to_its_own_first_row() -> None:
    """In one part, the key stored twice is not the first row that meets the log: each key's
    version goes to that key's first row (b's row 1, not row 2), whatever row comes first."""
    base = [("a", 1, "a0"), ("b", 1, "b0"), ("b", 1, "b-dup"), ("c", 1, "c0"), ("c", 1, "c-dup")]
    update = [_data(SCHEMA, [("a", 5, "a1"), ("b", 5, "b1"), ("c", 5, "c1")])]
    assert _replacing(base, update, 1) == (
        [("a", 5, "a1"), ("b", 5, "b1"), ("b", 1, "b-dup"), ("c", 5, "c1"), ("c", 1, "c-dup")],
        [True, True, False, True, False],
    )
    deleted = [_delete(["c", "b"], [None, None])]  # natural order: the first row of each key
    assert _replacing(base, deleted, 1) == (
        [("a", 1, "a0"), ("b", 1, "b-dup"), ("c", 1, "c-dup")],
        [False, False, False, False, False],
    )


def test_a_base_ordering_column_of_another_type_is_compared_as_the_schema_types_it() -> None:
    """A base file written before the ordering field was widened (int to long, int to string, as
    Hudi's schema evolution allows): its values are cast to the read schema's type first."""
    for base_type, schema_type, values, expected in (
        (pa.int32(), pa.int64(), (9, 10), ([], ["a1"])),  # 10 > 9: the log version wins
        (pa.int32(), pa.string(), (9, "10"), (["a0"], [])),  # as strings "9" > "10": the base row
    ):
        schema = pa.schema([("id", pa.string()), ("ts", schema_type), ("v", pa.string())])
        base = pa.table({"id": ["a"], "ts": pa.array([values[0]], base_type), "v": ["a0"]})
        log = pa.table({"id": ["a"], "ts": pa.array([values[1]], schema_type), "v": ["a1"]})
        merge = LogMerge(
            [DataItem(log, log.column("id").combine_chunks())],
            mode=MergeMode.EVENT_TIME_ORDERING,
            ordering="ts",
            schema=schema,
        )
        kept = merge.kept_base(base, base.column("id").combine_chunks())
        assert (kept.column("v").to_pylist(), merge.log_rows().column("v").to_pylist()) == expected
