"""Which version of a key wins on a table version 6 whose ``hoodie.properties`` names no payload class
and no merge mode (every copy-on-write table Hudi 0.14/0.15's Spark writer creates): event-time
ordering on the precombine field, as Hudi 1.x and hudi-rs read such a table. Exact rows after a
write whose precombine value is smaller than the stored row's (an upsert and a delete), on read, on
hudi-rs's read and, on merge-on-read, after compaction; beside them the same writes on the tables
that do name a payload class.

Why event time, from the sources (read for facts; session 10):
- Hudi 0.14/0.15 default the *write* payload to ``OverwriteWithLatestAvroPayload`` (commit time
  against the stored row: ``combineAndGetUpdateValue`` returns the incoming record; ``preCombine``,
  the dedup of one batch, keeps the larger ordering value): HoodieWriteConfig/DataSourceWriteOptions
  ``hoodie.datasource.write.payload.class``; apache/hudi#10949 moved the default to
  ``DefaultHoodieRecordPayload`` on master and apache/hudi#11240 ("Making OverwriteWithLatestPayload
  as default payload in 0.15.0") kept 0.15 on the old one. But their table builder
  (``HoodieTableMetaClient.PropertyBuilder``: ``if (tableType == MERGE_ON_READ && payloadClassName
  != null)``) writes ``hoodie.compaction.payload.class`` only into a merge-on-read table's
  properties, so a copy-on-write table does not say which payload its writers used (the test tables
  ``cow_v6_*`` name none; the ``mor*_v6_*`` ones name ``OverwriteWithLatestAvroPayload``).
- Hudi 1.x reads a version 6 table's merge mode from its payload class
  (``HoodieReaderContext.initRecordMerger`` -> ``HoodieTableConfig.inferCorrectMergingBehavior``), and
  an absent class is ``DefaultHoodieRecordPayload`` (``HoodieTableConfig.getPayloadClass`` ->
  ``HoodieRecordPayload.getPayloadClassName``, falling back to ``DEFAULT_PAYLOAD_CLASS_NAME``):
  EVENT_TIME_ORDERING. Its 6 -> 8 upgrade (``SevenToEightUpgradeHandler.upgradeMergeMode``, reworked
  by apache/hudi#13046 for 1.0.2) writes EVENT_TIME_ORDERING into such a copy-on-write table (the same
  ``getPayloadClass``), COMMIT_TIME_ORDERING into one naming ``OverwriteWithLatestAvroPayload``, and
  EVENT_TIME_ORDERING into a merge-on-read table with a precombine field whatever its payload class.
- hudi-rs 0.5.0 (the tests' referee) orders such a table by event time too (these tests), and by
  commit time when ``OverwriteWithLatestAvroPayload`` is named.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from write_support import batch, hudi_rows, our_rows, table

from airflow_lake_provider.lake.format.avro_schema import META_FIELDS
from airflow_lake_provider.lake.format.properties import format_properties, parse_properties
from airflow_lake_provider.lake.format.table_config import (
    DEFAULT_PAYLOAD,
    OVERWRITE_PAYLOAD,
    MergeMode,
)
from airflow_lake_provider.lake.services.compaction.executor import run_compaction
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

PAYLOAD = "hoodie.compaction.payload.class"
DUE = {"hoodie.compact.inline.max.delta.commits": "1"}
STORED = [(1, 10, "a1"), (2, 10, "a2")]  # the rows the lagging writes below leave alone
LATEST = [(1, 5, "b1")]  # what commit-time ordering makes of them


def _with_payload(path: Path, kind: str, payload: str | None) -> LakeTable:
    """A new v6 table of ``kind`` keyed by id, ordered by ts, whose properties name ``payload`` (None:
    no payload class at all, as Hudi 0.14/0.15 leave a copy-on-write table)."""
    table(path, kind)
    props_file = path / ".hoodie" / "hoodie.properties"
    props = parse_properties(props_file.read_text())
    props.pop(PAYLOAD)
    if payload is not None:
        props[PAYLOAD] = payload
    props_file.write_text(format_properties(props))
    return LakeTable.open(path)


def _lagging_writes(lake: LakeTable) -> None:
    """Stored rows at ts 10, then an upsert of key 1 and a delete of key 2, both at ts 5."""
    write(lake, batch([1, 2], ts=10, v="a"), "insert")
    write(lake, batch([1], ts=5, v="b"), "upsert")
    write(lake, batch([2], ts=5, v="d"), "delete")


@pytest.mark.parametrize("kind", ["cow", "mor"])
@pytest.mark.parametrize(
    ("payload", "mode", "expected"),
    [
        (None, MergeMode.EVENT_TIME_ORDERING, STORED),
        (DEFAULT_PAYLOAD, MergeMode.EVENT_TIME_ORDERING, STORED),
        (OVERWRITE_PAYLOAD, MergeMode.COMMIT_TIME_ORDERING, LATEST),
    ],
)
def test_an_upsert_and_a_delete_with_a_smaller_precombine_value_by_payload_class(
    tmp_path: Path, kind: str, payload: str | None, mode: MergeMode, expected: list[tuple]
) -> None:
    lake = _with_payload(tmp_path / "t", kind, payload)
    assert lake.config.table_version == 6 and lake.config.payload_class == payload
    assert lake.config.merge_mode is mode
    _lagging_writes(lake)
    assert our_rows(tmp_path / "t", "id", "ts", "v") == expected
    assert hudi_rows(tmp_path / "t", "id", "ts", "v") == expected


@pytest.mark.parametrize(
    ("payload", "expected"), [(None, STORED), (DEFAULT_PAYLOAD, STORED), (OVERWRITE_PAYLOAD, LATEST)]
)
def test_compaction_merges_the_lagging_logs_as_reads_do(
    tmp_path: Path, payload: str | None, expected: list[tuple]
) -> None:
    path = tmp_path / "t"
    lake = _with_payload(path, "mor", payload)
    _lagging_writes(lake)
    assert len(list(path.glob(".*.log.*"))) == 2  # the upsert and the delete were logged
    scheduled, executed = run_compaction(LakeTable.open(path), DUE)
    (compacted,) = path.glob(f"*_{scheduled.instant}.parquet")
    rows = pq.read_table(compacted, columns=["id", "ts", "v"]).to_pylist()
    assert sorted(tuple(r.values()) for r in rows) == expected
    assert our_rows(path, "id", "ts", "v") == expected
    assert hudi_rows(path, "id", "ts", "v") == expected


def _row(snapshot: pa.Table, key: int, **changes: object) -> pa.Table:
    """The data columns of the snapshot's row ``key``, some of them changed."""
    data = snapshot.drop_columns([c for c in snapshot.column_names if c in META_FIELDS])
    row = data.filter(pc.equal(data.column("id"), key))
    for name, value in changes.items():
        at = row.schema.get_field_index(name)
        row = row.set_column(at, name, pa.array([value], row.schema.field(name).type))
    return row


def _names(path: Path, rows_of: Callable[..., list[tuple]]) -> list[tuple]:
    """``our_rows`` or ``hudi_rows`` of the key, name and precombine columns."""
    return rows_of(path, "id", "name", "longField")


def test_the_spark_written_v6_cow_table_keeps_its_rows_against_lagging_writes(hudi_table_zip) -> None:
    path = hudi_table_zip("cow_v6_nonpartitioned")
    props = parse_properties((path / ".hoodie" / "hoodie.properties").read_text())
    assert PAYLOAD not in props and "hoodie.record.merge.mode" not in props
    assert props["hoodie.table.precombine.field"] == "longField"
    lake = LakeTable.open(path)
    assert lake.config.merge_mode is MergeMode.EVENT_TIME_ORDERING
    before = [
        (1, "Alice", 1234567890),
        (2, "Bob", 9876543210),
        (3, "Carol", 1928374650),
        (4, "Diana", 987654321),
    ]
    assert _names(path, our_rows) == _names(path, hudi_rows) == before

    snapshot = read_snapshot(lake)
    write(lake, _row(snapshot, 1, name="Late", longField=1234567889), "upsert")
    write(lake, _row(snapshot, 4, longField=987654320), "delete")
    assert _names(path, our_rows) == _names(path, hudi_rows) == before

    write(lake, _row(snapshot, 1, name="Alicia", longField=1234567891), "upsert")
    write(lake, _row(snapshot, 4, longField=987654322), "delete")
    after = [(1, "Alicia", 1234567891), (2, "Bob", 9876543210), (3, "Carol", 1928374650)]
    assert _names(path, our_rows) == _names(path, hudi_rows) == after


def test_naming_the_overwrite_payload_in_the_spark_written_table_lets_lagging_writes_through(
    hudi_table_zip,
) -> None:
    """The remedy docs/writes.md gives for a table whose Java writers kept 0.14/0.15's default."""
    path = hudi_table_zip("cow_v6_nonpartitioned")
    props_file = path / ".hoodie" / "hoodie.properties"
    props = parse_properties(props_file.read_text())
    props_file.write_text(format_properties({**props, PAYLOAD: OVERWRITE_PAYLOAD}))
    lake = LakeTable.open(path)
    assert lake.config.merge_mode is MergeMode.COMMIT_TIME_ORDERING

    snapshot = read_snapshot(lake)
    write(lake, _row(snapshot, 1, name="Late", longField=1234567889), "upsert")
    write(lake, _row(snapshot, 4, longField=987654320), "delete")
    after = [(1, "Late", 1234567889), (2, "Bob", 9876543210), (3, "Carol", 1928374650)]
    assert _names(path, our_rows) == _names(path, hudi_rows) == after
