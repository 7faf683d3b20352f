"""What the writer checks before an instant exists, with the exact words, and how it shapes a batch:
the table's index and key generator, required and castable columns, event time fields, and
duplicate keys in one batch (per partition; by ordering value or by batch order)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.errors import (
    LakeError,
    SchemaError,
    TableConfigError,
    WriteConfigError,
)
from airflow_lake_provider.lake.format.table_config import TableConfig
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import (
    checks,
    write,
)
from airflow_lake_provider.lake.table.write.plan import Operation
from airflow_lake_provider.lake.timeline.instant import InstantClock, format_instant

FROZEN = dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
T1 = format_instant(FROZEN)
KEYGEN = "hoodie.table.keygenerator.class"


def _table(path: Path, partitioned: bool = False, **props: str | None) -> LakeTable:
    """A COW table keyed by id, ordered by ts; ``props`` override (None: drop) its properties."""
    plain = LakeTable.create(
        path,
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",) if partitioned else (),
        clock=InstantClock(now=lambda: FROZEN),
    )
    merged = {**plain.config.properties, **props}
    config = TableConfig.from_properties({k: v for k, v in merged.items() if v is not None})
    return LakeTable(plain.storage, config, plain.clock)


def _rows(path: Path, *columns: str) -> list[tuple]:
    table = read_snapshot(LakeTable.open(path)).select(list(columns))
    return sorted(tuple(r.values()) for r in table.to_pylist())


def _refused(
    table: LakeTable, batch: pa.Table, error: type[Exception], operation: str = "insert", **kw
) -> str:
    with pytest.raises(error) as caught:
        write(table, batch, operation, **kw)
    assert table.timeline().instants == ()
    return str(caught.value)


ONE = pa.table({"id": pa.array([1], pa.int64()), "ts": pa.array([1], pa.int64())})


# -- the table's index and key generator ----------------------------------------------------------
def test_an_index_this_writer_cannot_keep_is_refused_with_the_reason(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", **{"hoodie.index.type": "bucket"})
    # A configuration error, as every refused option is (Airflow fails such a task at once).
    assert _refused(table, ONE, WriteConfigError) == (
        f"{table.uri}: hoodie.index.type=BUCKET is not supported by this writer (it keeps a bloom/simple "
        "index only); write this table with Spark"
    )


def test_a_record_index_is_refused_with_the_reason(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", **{"hoodie.table.metadata.partitions": "files, record_index"})
    assert _refused(table, ONE, TableConfigError) == (
        f"{table.uri}: the table keeps a record index (hoodie.table.metadata.partitions has record_index), "
        "which this writer does not update; write this table with Spark, or drop the metadata table "
        f"with its record index as Hudi does ('lake metadata-table {table.uri} --drop', or option "
        "hoodie.metadata.enable=false on the write)"
    )


def test_a_record_index_goes_with_the_mdt_the_table_or_the_connection_drops(tmp_path: Path) -> None:
    # The metadata-table policy is read from the table's properties, then the connection's defaults,
    # then the write's options (later layers win): each may drop the MDT and its record index.
    index = {"hoodie.table.metadata.partitions": "files,record_index"}
    dropped = _table(tmp_path / "t", **index, **{"hoodie.metadata.enable": "false"})
    checks.check_index(dropped, dropped.config.properties)
    by_connection = _table(tmp_path / "u", **index)
    by_connection.option_defaults = {"hoodie.metadata.enable": "false"}
    checks.check_index(by_connection, by_connection.config.properties)
    # The write's own option wins over both.
    for table in (dropped, by_connection):
        with pytest.raises(TableConfigError, match="the table keeps a record index"):
            checks.check_index(table, table.config.properties, {"hoodie.metadata.enable": "true"})


def test_a_key_generator_this_writer_does_not_follow_is_refused_with_the_ones_it_does(tmp_path: Path) -> None:
    cls = "org.apache.hudi.keygen.TimestampBasedKeyGenerator"
    table = _table(tmp_path / "t", **{KEYGEN: cls})
    known = (
        "ComplexAvroKeyGenerator, ComplexKeyGenerator, NonpartitionedAvroKeyGenerator, "
        "NonpartitionedKeyGenerator, SimpleAvroKeyGenerator, SimpleKeyGenerator"
    )
    assert _refused(table, ONE, TableConfigError) == (
        f"{table.uri}: hoodie.table.keygenerator.class={cls} is not supported by this writer (it derives "
        f"keys and partition paths as {known} do); write this table with Spark"
    )


def test_a_key_generator_named_by_its_type_alone_is_refused_by_that_property(tmp_path: Path) -> None:
    """Version 9 tables may carry only hoodie.table.keygenerator.type: the refusal names what the
    file says (and the class it stands for), not a class property the file does not have."""
    table = _table(tmp_path / "t", **{KEYGEN: None, "hoodie.table.keygenerator.type": "TIMESTAMP"})
    assert _refused(table, ONE, TableConfigError).startswith(
        f"{table.uri}: hoodie.table.keygenerator.type=TIMESTAMP "
        "(org.apache.hudi.keygen.TimestampBasedKeyGenerator) is not supported by this writer"
    )


@pytest.mark.parametrize(
    "keygen", [None, "SimpleKeyGenerator", "org.apache.hudi.keygen.SimpleAvroKeyGenerator"]
)
def test_a_key_generator_named_by_its_class_alone_or_none_at_all_is_accepted(
    tmp_path: Path, keygen: str | None
) -> None:
    table = _table(tmp_path / "t", **{KEYGEN: keygen})
    assert write(table, ONE, "insert").inserted == 1


def test_a_table_without_meta_fields_is_refused(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", **{"hoodie.populate.meta.fields": "false"})
    assert (
        _refused(table, ONE, SchemaError)
        == f"{table.uri}: writing tables without meta fields is not supported"
    )


# -- required and castable columns ----------------------------------------------------------------
def test_a_batch_without_the_partition_column_is_refused_naming_it(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", partitioned=True)
    assert _refused(table, ONE, SchemaError) == (
        "batch is missing required column(s) ['p'] (record key, partition, precombine)"
    )


def test_a_delete_batch_is_checked_only_on_the_columns_the_table_has(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    write(
        table,
        pa.table({"id": pa.array([1, 2], pa.int64()), "ts": pa.array([1, 1], pa.int64()), "v": ["a", "b"]}),
        "insert",
    )
    # Extra columns are fine in a delete (they are not written); a table column must still cast.
    extra = pa.table({"id": pa.array([1], pa.int64()), "ts": pa.array([2], pa.int64()), "why": ["gone"]})
    assert write(table, extra, "delete").deleted == 1
    bad = pa.table({"id": pa.array([2], pa.int64()), "ts": pa.array([2], pa.int64()), "v": pa.array([b"b"])})
    with pytest.raises(SchemaError) as caught:
        write(table, bad, "delete")
    assert str(caught.value) == "column 'v' has type binary, the table stores string"
    assert _rows(tmp_path / "t", "id", "v") == [(2, "b")]


# -- event times ----------------------------------------------------------------------------------
def _event_extra(path: Path, instant: str) -> tuple[str, str]:
    extra = json.loads((path / ".hoodie" / f"{instant}.commit").read_text())["extraMetadata"]
    return extra["lake.minEventTime"], extra["lake.maxEventTime"]


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        (
            pa.array([dt.datetime(2025, 1, 1, 0, 0, 1, 500), dt.datetime(2025, 1, 2)], pa.timestamp("us")),
            ("1735689601000", "1735776000000"),
        ),
        (
            pa.array(
                [
                    dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
                    dt.datetime(2025, 1, 3, tzinfo=dt.timezone.utc),
                ],
                pa.timestamp("us", tz="UTC"),
            ),
            ("1735689600000", "1735862400000"),
        ),
        (
            pa.array([dt.date(2025, 1, 2), dt.date(2025, 1, 1)], pa.date32()),
            ("1735689600000", "1735776000000"),
        ),
        (pa.array([7, 3], pa.int32()), ("3", "7")),
    ],
    ids=["timestamp-us", "timestamp-us-utc", "date", "int32"],
)
def test_event_times_are_epoch_milliseconds_of_the_fields_min_and_max(
    tmp_path: Path, column: pa.Array, expected: tuple[str, str]
) -> None:
    table = _table(tmp_path / "t")
    batch = pa.table({"id": pa.array([1, 2], pa.int64()), "ts": pa.array([1, 1], pa.int64()), "et": column})
    write(table, batch, "insert", event_time_field="et")
    assert _event_extra(tmp_path / "t", T1) == expected


def test_an_event_time_field_that_is_missing_or_not_a_time_is_refused(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    assert (
        _refused(table, ONE, SchemaError, event_time_field="when")
        == "event time field 'when' is not a column of the batch"
    )
    batch = ONE.append_column("when", pa.array(["today"]))
    assert _refused(table, batch, SchemaError, event_time_field="when") == (
        "event time field 'when' is string: use a timestamp, date or integer (epoch ms) column"
    )


def test_the_event_time_field_option_of_a_write_is_read_over_the_tables(tmp_path: Path) -> None:
    """``hoodie.payload.event.time.field`` in the write's options (``lake write --option``, the write
    operator's options) names the column as the argument does; a missing one is refused the same."""
    field = "hoodie.payload.event.time.field"
    table = _table(tmp_path / "t", **{field: "ts"})
    batch = pa.table({"id": pa.array([1, 2], pa.int64()), "ts": pa.array([4, 6], pa.int64())})
    batch = batch.append_column("et", pa.array([30, 20], pa.int64()))
    assert _refused(table, batch, SchemaError, options={field: "when"}) == (
        "event time field 'when' is not a column of the batch"
    )
    write(table, batch, "insert", options={field: "et"})
    assert _event_extra(tmp_path / "t", T1) == ("20", "30")


@pytest.mark.parametrize(
    ("column", "value"),
    [
        (pa.array([1_704_067_200_000_000], pa.int64()), 1_704_067_200_000_000),  # microseconds taken for ms
        (pa.array([-62_135_596_800_001], pa.int64()), -62_135_596_800_001),  # just before 0001-01-01
        (pa.array([253_402_300_800_000], pa.int64()), 253_402_300_800_000),  # 10000-01-01
    ],
    ids=["microseconds", "year-0", "year-10000"],
)
def test_an_event_time_outside_the_years_1_to_9999_is_refused(
    tmp_path: Path, column: pa.Array, value: int
) -> None:
    """A partition-time commit reads the recorded maximum as a time: one it cannot read would stop
    every later commit of the table."""
    table = _table(tmp_path / "t")
    assert _refused(table, ONE.append_column("et", column), SchemaError, event_time_field="et") == (
        f"event time field 'et' holds {value} epoch ms, outside the years 1-9999 "
        "(an integer column counts milliseconds)"
    )


def test_the_first_and_last_millisecond_of_the_years_1_to_9999_are_event_times(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    edges = pa.array([-62_135_596_800_000, 253_402_300_799_999], pa.int64())
    batch = pa.table({"id": pa.array([1, 2], pa.int64()), "ts": pa.array([1, 1], pa.int64()), "et": edges})
    write(table, batch, "insert", event_time_field="et")
    assert _event_extra(tmp_path / "t", T1) == ("-62135596800000", "253402300799999")


# -- duplicate keys in one batch ------------------------------------------------------------------
def test_two_versions_of_a_key_in_a_batch_become_one_row(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    batch = pa.table(
        {"id": pa.array([1, 1], pa.int64()), "ts": pa.array([9, 4], pa.int64()), "v": ["new", "old"]}
    )
    assert write(table, batch, "insert").inserted == 1
    assert _rows(tmp_path / "t", "id", "ts", "v") == [(1, 9, "new")]


def test_the_same_key_in_two_partitions_is_two_records(tmp_path: Path) -> None:
    table = _table(tmp_path / "t", partitioned=True)
    batch = pa.table(
        {"id": pa.array([1, 1], pa.int64()), "ts": pa.array([1, 1], pa.int64()), "p": ["a", "b"]}
    )
    assert write(table, batch, "insert").inserted == 2
    assert _rows(tmp_path / "t", "id", "p") == [(1, "a"), (1, "b")]


def test_a_commit_time_table_keeps_the_later_version_in_a_batch_whatever_its_ordering_value(
    tmp_path: Path,
) -> None:
    table = _table(
        tmp_path / "t",
        **{"hoodie.compaction.payload.class": "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"},
    )
    batch = pa.table(
        {"id": pa.array([1, 1], pa.int64()), "ts": pa.array([9, 4], pa.int64()), "v": ["first", "second"]}
    )
    write(table, batch, "insert")
    assert _rows(tmp_path / "t", "id", "ts", "v") == [(1, 4, "second")]


def test_event_times_before_1970_floor_to_milliseconds(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    before = pa.array([-1500, 2000], pa.timestamp("us"))  # -1.5 ms floors to -2 ms
    write(
        table,
        pa.table({"id": pa.array([1, 2], pa.int64()), "ts": pa.array([1, 1], pa.int64()), "et": before}),
        "insert",
        event_time_field="et",
    )
    assert _event_extra(tmp_path / "t", T1) == ("-2", "2")


def test_a_table_with_partition_fields_but_the_nonpartitioned_key_generator_needs_no_partition_column(
    tmp_path: Path,
) -> None:
    table = _table(
        tmp_path / "t", partitioned=True, **{KEYGEN: "org.apache.hudi.keygen.NonpartitionedKeyGenerator"}
    )
    assert write(table, ONE, "insert").inserted == 1
    assert read_snapshot(table).select(["_hoodie_partition_path", "id"]).to_pylist() == [
        {"_hoodie_partition_path": "", "id": 1}
    ]


def test_a_delete_carrying_a_nanosecond_event_time_column_the_table_lacks_floors_it(tmp_path: Path) -> None:
    table = _table(tmp_path / "t")
    write(table, ONE, "insert")
    gone = ONE.append_column("et", pa.array([1_999_999], pa.timestamp("ns")))  # 1.999999 ms
    done = write(table, gone, "delete", event_time_field="et")
    assert _event_extra(tmp_path / "t", done.instant) == ("1", "1")
    assert _rows(tmp_path / "t", "id") == []


# -- numbers Hudi reads as Java ints (adversarial use after issue 30) ------------------------------
HUGE = "99999999999999999999999999999"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        # The heartbeat thread died on an OverflowError (a traceback, exit 0), the write went on.
        (
            "hoodie.client.heartbeat.interval_in_ms",
            HUGE,
            f"hoodie.client.heartbeat.interval_in_ms='{HUGE}' must be at most 2147483647",
        ),
        (
            "hoodie.client.heartbeat.tolerable.misses",
            "2147483648",
            "hoodie.client.heartbeat.tolerable.misses='2147483648' must be at most 2147483647",
        ),
        # OverflowError from the filter's build, after the instant was created (then undone).
        (
            "hoodie.index.bloom.num_entries",
            HUGE,
            f"hoodie.index.bloom.num_entries must be at most 2147483647, got {HUGE}",
        ),
        (
            "hoodie.bloom.index.filter.dynamic.max.entries",
            HUGE,
            f"hoodie.bloom.index.filter.dynamic.max.entries must be at most 2147483647, got {HUGE}",
        ),
        # 2.6 billion bits: a 2.6 GB bit array built before the header's int32 refused the size.
        (
            "hoodie.index.bloom.num_entries",
            "60000000",
            "hoodie.index.bloom.num_entries=60000000 at hoodie.index.bloom.fpp=1e-09 needs a filter of "
            "2587965762 bits, more than its header holds (2147483647)",
        ),
    ],
)
def test_numbers_past_a_java_int_are_refused_before_the_instant_exists(
    tmp_path: Path, key: str, value: str, message: str
) -> None:
    table = _table(tmp_path / "t")
    options = {"hoodie.cleaner.policy.failed.writes": "LAZY", key: value}

    assert _refused(table, ONE, LakeError, options=options) == message
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == [".hoodie"]


# -- which batch types a column of the table accepts ------------------------------------------------
TS_US, TS_MS = pa.timestamp("us"), pa.timestamp("ms")


CASTABLE = [
    # (batch type, table type, accepted)
    (pa.string(), pa.string(), True),
    (pa.string(), pa.large_string(), True),
    (pa.large_string(), pa.string(), True),
    (pa.binary(), pa.string(), False),
    (pa.string(), pa.binary(), False),
    (pa.int32(), pa.int64(), True),
    (pa.int64(), pa.int32(), False),  # values are checked one by one only for types that may fit
    (pa.uint32(), pa.int64(), True),
    (pa.uint64(), pa.int64(), False),
    (pa.int8(), pa.uint8(), False),
    (pa.int64(), pa.float64(), False),
    (pa.float64(), pa.int64(), False),
    (pa.float32(), pa.float64(), True),
    (pa.float64(), pa.float32(), True),
    (TS_US, pa.timestamp("us", tz="UTC"), True),
    (pa.timestamp("us", tz="UTC"), TS_US, True),
    (TS_MS, TS_US, False),
    (TS_US, pa.int64(), False),
    (pa.int64(), TS_US, False),
    (pa.date32(), pa.date32(), True),
    (pa.date32(), TS_US, False),
]


@pytest.mark.parametrize(("got", "want", "accepted"), CASTABLE, ids=[f"{g}->{w}" for g, w, _ in CASTABLE])
def test_which_batch_types_a_table_column_accepts(
    got: pa.DataType, want: pa.DataType, accepted: bool
) -> None:
    assert checks._leaf_castable(got, want) is accepted


@pytest.mark.parametrize(
    ("got", "want", "fits"),
    [
        (pa.int64(), pa.int64(), True),
        (pa.uint16(), pa.uint16(), True),
        (pa.int16(), pa.int32(), True),
        (pa.int32(), pa.int16(), False),
        (pa.uint8(), pa.int16(), True),
        (pa.uint16(), pa.int16(), False),
        (pa.int8(), pa.uint64(), False),
    ],
)
def test_an_integer_type_fits_another_when_all_its_values_do(
    got: pa.DataType, want: pa.DataType, fits: bool
) -> None:
    assert checks._int_fits(got, want) is fits


def test_prepare_batch_takes_the_table_schema_from_the_timeline_it_is_given(tmp_path: Path) -> None:
    """The writer passes the timeline it read under the write lock: the schema is that timeline's
    (before any commit: the batch's own, in canonical types), not a newer one read again."""
    table = _table(tmp_path / "t")
    before = table.timeline()
    write(table, pa.table({"id": [1], "ts": pa.array([1], pa.int64())}), "insert")
    narrower = pa.table({"id": [2], "ts": pa.array([2], pa.int32())})
    old, _, rows = checks.prepare_batch(table, narrower, Operation.UPSERT, before, None)
    assert old == pa.schema([("id", pa.int64()), ("ts", pa.int32())])
    assert rows.column("ts").type == pa.int32()
    now, _, rows = checks.prepare_batch(table, narrower, Operation.UPSERT, table.timeline(), None)
    assert now == pa.schema([("id", pa.int64()), ("ts", pa.int64())])
    assert rows.column("ts").type == pa.int64()
