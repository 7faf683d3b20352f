"""The merge of a base file that holds some keys more than once (Hudi's bulk_insert and inserts
without deduplication write such files), over random logs (updates and inserts with random ordering
values, deletes with ordering values and in natural order) and random cuts of the base into parts:

- the read of a key's later base rows is as stored: the merge equals the merge of the base's first
  row of each key (which ``test_merge.py`` and the hudi-rs comparisons pin) plus every later row;
- compaction's merge in place over the same parts writes those rows (the read before it), and
  counts as met exactly the first row of each key the log holds.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from property_support import SUMMARY, derandomized, examples, tally

from airflow_lake_provider.lake.format.table_config import MergeMode
from airflow_lake_provider.lake.table.merge import DataItem, DeleteItem, LogItem, LogMerge, merge_slice

SCHEMA = pa.schema([("id", pa.string()), ("ts", pa.int64()), ("v", pa.string())])
KEYS = st.sampled_from(["a", "b", "c", "d"])
Row = tuple[str, int, str]


def _table(rows: list[Row]) -> pa.Table:
    return pa.table({f.name: pa.array([r[i] for r in rows], f.type) for i, f in enumerate(SCHEMA)})


@st.composite
def _cases(draw: st.DrawFn) -> tuple[list[Row], list[LogItem], list[int], MergeMode]:
    keys = draw(st.lists(KEYS, min_size=1, max_size=8))
    base = [(k, draw(st.integers(0, 6)), f"base{i}") for i, k in enumerate(keys)]
    items: list[LogItem] = []
    for n in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            logged = draw(st.lists(KEYS, min_size=1, max_size=3, unique=True))
            rows = _table([(k, draw(st.integers(0, 6)), f"log{n}{k}") for k in logged])
            items.append(DataItem(rows, rows.column("id").combine_chunks()))
        else:
            deleted = draw(st.lists(KEYS, min_size=1, max_size=3, unique=True))
            ordering = [draw(st.one_of(st.none(), st.integers(1, 6))) for _ in deleted]
            items.append(DeleteItem(pa.array(deleted, pa.string()), pa.array(ordering, pa.int64())))
    cuts = sorted(set(draw(st.lists(st.integers(1, max(1, len(base) - 1)), max_size=3))))
    mode = draw(st.sampled_from([MergeMode.EVENT_TIME_ORDERING, MergeMode.COMMIT_TIME_ORDERING]))
    return base, items, cuts, mode


def _merge(base: list[Row], items: list[LogItem], mode: MergeMode) -> Counter[Row]:
    table = _table(base)
    out = merge_slice(
        table, table.column("id").combine_chunks(), items, mode=mode, ordering="ts", schema=SCHEMA
    )
    return Counter(tuple(r.values()) for r in out.to_pylist())


@settings(max_examples=examples(300), derandomize=derandomized(), deadline=None)
@given(case=_cases())
def test_later_rows_of_a_key_read_as_stored_and_compaction_writes_the_read(
    case: tuple[list[Row], list[LogItem], list[int], MergeMode],
) -> None:
    base, items, cuts, mode = case
    seen: set[str] = set()
    firsts, later = [], []
    for row in base:
        (later if row[0] in seen else firsts).append(row)
        seen.add(row[0])
    read = _merge(base, items, mode)
    assert read == _merge(firsts, items, mode) + Counter(later)

    merge = LogMerge(items, mode=mode, ordering="ts", schema=SCHEMA)
    table = _table(base)
    written: Counter[Row] = Counter()
    met: list[bool] = []
    for start, end in zip([0, *cuts], [*cuts, len(base)], strict=True):
        part = table.slice(start, end - start)
        rows, part_met = merge.replacing_rows(part, part.column("id").combine_chunks())
        written.update(tuple(r.values()) for r in rows.to_pylist())
        met += part_met.to_pylist()
    written.update(tuple(r.values()) for r in merge.inserted_rows().to_pylist())
    assert written == read
    logged = {k for item in items for k in item.keys.to_pylist()}
    # Met: only a key's first row, and only where the log holds the key (a delete too).
    assert all(r in firsts and r[0] in logged for r, m in zip(base, met, strict=True) if m)

    counts = tally("merge duplicates")
    counts["examples"] += 1
    counts["keys twice in the base"] += len(later) > 0
    counts["... a later row in another part"] += any(
        sum(1 for c in cuts if base.index(first) < c <= i) > 0
        for i, row in enumerate(base)
        for first in firsts
        if row in later and row[0] == first[0]
    )
    counts["natural-order deletes of a key twice"] += any(
        isinstance(item, DeleteItem)
        and any(
            o is None and k in {r[0] for r in later}
            for k, o in zip(item.keys.to_pylist(), item.ordering.to_pylist(), strict=True)
        )
        for item in items
    )
    counts["first rows beating the log"] += any(
        r in firsts and r in read and r[0] in logged for r in base if r[0] in {x[0] for x in later}
    )
    counts["first rows met"] += any(met)


def test_merge_duplicates_exercised_what_they_claim() -> None:
    counts = tally("merge duplicates")
    if counts["examples"] < 50:
        pytest.skip("the duplicate-key test did not run (or ran too few examples) in this session")
    for what in (
        "keys twice in the base",
        "... a later row in another part",
        "natural-order deletes of a key twice",
        "first rows beating the log",
        "first rows met",
    ):
        SUMMARY.append(f"merge duplicates: {what}: {counts[what]}/{counts['examples']}")
        assert counts[what], f"never happened: {what}"
