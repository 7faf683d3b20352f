"""Every table Apache Hudi wrote (tests/data/hudi-tables) reads exactly as hudi-rs reads it."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.errors import SchemaError
from airflow_lake_provider.lake.table.reader import conform, read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

HUDI_TABLES = Path(__file__).resolve().parents[3] / "data" / "hudi-tables"  # see tests/data/README.md

# name -> rows a snapshot holds (the hudi-tables README's numbers)
TABLES = {
    "cow_v6_complexkeygen_hivestyle": 4,
    "cow_v6_empty": 0,
    "cow_v6_nonpartitioned": 4,
    "cow_v6_simplekeygen_hivestyle_no_metafields": 4,
    "cow_v6_simplekeygen_nonhivestyle": 4,
    "cow_v6_simplekeygen_nonhivestyle_overwritetable": 1,
    "cow_v6_timebasedkeygen_nonhivestyle": 4,
    "moravro_v6_trips_8i1u": 8,
    "moravro_v6_trips_8i3d": 5,
    "morparquet_v6_complexkeygen_hivestyle": 4,
    "morparquet_v6_empty": 0,
    "morparquet_v6_nonpartitioned": 4,
    "morparquet_v6_nonpartitioned_rollback": 3,
    "morparquet_v6_simplekeygen_hivestyle_no_metafields": 4,
    "morparquet_v6_simplekeygen_nonhivestyle": 4,
    "morparquet_v6_simplekeygen_nonhivestyle_overwritetable": 1,
}


def _rows(table: pa.Table) -> list[str]:
    """Rows as sorted canonical strings, so the comparison is exact but order-free."""
    return sorted(repr(sorted(row.items())) for row in table.to_pylist())


def test_shared_tables_all_listed() -> None:
    assert sorted(p.stem for p in HUDI_TABLES.glob("*.zip")) == sorted(TABLES)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_real_table_snapshot_matches_hudi_rs(hudi_table_zip, name: str) -> None:
    path = hudi_table_zip(name)
    ours = read_snapshot(LakeTable.open(path))
    assert ours.num_rows == TABLES[name]
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    if not batches:  # hudi-rs returns no batches (and no schema) for a table without commits
        assert TABLES[name] == 0
        return
    theirs = pa.Table.from_batches(batches)
    assert ours.column_names == theirs.column_names
    assert _rows(ours) == _rows(theirs)


def test_real_mor_table_delete_block_removes_three_riders(hudi_table_zip) -> None:
    ours = read_snapshot(LakeTable.open(hudi_table_zip("moravro_v6_trips_8i3d")))
    before = read_snapshot(LakeTable.open(hudi_table_zip("moravro_v6_trips_8i1u")))
    assert before.num_rows == 8 and ours.num_rows == 5
    assert sorted(ours.column("rider").to_pylist()) == ["rider-E", "rider-F", "rider-G", "rider-I", "rider-J"]


def test_real_rollback_table_hides_rolled_back_blocks(hudi_table_zip) -> None:
    table = LakeTable.open(hudi_table_zip("morparquet_v6_nonpartitioned_rollback"))
    timeline = table.timeline()
    assert timeline.is_committed("20250126040823628")
    assert not timeline.is_committed("20250126040826878")  # rolled back: a gap in the timeline
    ours = read_snapshot(table).select(["id", "_hoodie_commit_time"]).to_pylist()
    assert sorted((r["id"], r["_hoodie_commit_time"]) for r in ours) == [
        (1, "20250126040823628"),
        (2, "20250126060846931"),
        (3, "20250126040823628"),
    ]


WRITABLE = sorted(
    n for n, rows in TABLES.items() if rows and "no_metafields" not in n and "timebased" not in n
)


@pytest.mark.parametrize("name", WRITABLE)
def test_upserting_existing_keys_into_a_spark_written_table_updates_them_in_place(
    hudi_table_zip, name: str
) -> None:
    """The key lookup (names-only listing, the view's index, the bloom probe on Spark's filters)
    finds every existing key of a table Spark wrote: an upsert of all its rows keeps the key count,
    and hudi-rs reads what we read."""

    path = hudi_table_zip(name)
    table = LakeTable.open(path)
    before = read_snapshot(table)
    data = before.drop_columns([c for c in before.column_names if c.startswith("_hoodie_")])
    result = write(table, data, "upsert")
    assert (result.inserted, result.updated) == (0, before.num_rows), name
    after = read_snapshot(LakeTable.open(path))
    keys = after.column("_hoodie_record_key").to_pylist()
    assert sorted(keys) == sorted(before.column("_hoodie_record_key").to_pylist())
    theirs = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read())
    assert _rows(after) == _rows(theirs)
    assert set(after.column("_hoodie_commit_time").to_pylist()) == {result.instant}


def test_a_table_of_a_key_generator_we_do_not_derive_is_refused_and_left_unchanged(hudi_table_zip) -> None:
    """TimestampBasedKeyGenerator formats a time field into the path (2023/04/01/12): writing the raw
    value instead would put each row into a new partition beside its old version."""
    from airflow_lake_provider.lake.errors import TableConfigError

    path = hudi_table_zip("cow_v6_timebasedkeygen_nonhivestyle")
    files = sorted(p.relative_to(path) for p in path.rglob("*"))
    table = LakeTable.open(path)
    before = read_snapshot(table)
    data = before.drop_columns([c for c in before.column_names if c.startswith("_hoodie_")])
    with pytest.raises(
        TableConfigError, match="keygenerator.class=org.apache.hudi.keygen.TimestampBasedKeyGenerator"
    ):
        write(table, data, "upsert")
    assert sorted(p.relative_to(path) for p in path.rglob("*")) == files


@pytest.mark.parametrize("name", sorted(n for n in TABLES if n.startswith("mor")))
def test_the_key_lookups_log_keys_are_the_keys_of_the_decoded_blocks(hudi_table_zip, name: str) -> None:
    """The write's key lookup takes only the record keys of log blocks (Avro: from the meta fields
    alone, all blocks at once); on every log file Spark wrote (Avro and parquet data blocks, delete
    blocks, rollbacks) they are exactly the keys of the fully decoded blocks, in order."""
    from airflow_lake_provider.lake.table.merge import DataItem
    from airflow_lake_provider.lake.table.reader import SliceReader

    table = LakeTable.open(hudi_table_zip(name))
    timeline = table.timeline()
    reader = SliceReader(table, timeline, table.arrow_schema(timeline) or pa.schema([]))
    logs = [
        f
        for group in table.file_system_view(timeline).file_groups()
        for s in group.slices
        for f in s.log_files
    ]
    for log_file in logs:
        items = reader.log_items([log_file])
        decoded = [
            k for item in items for k in (item.keys if isinstance(item, DataItem) else item.keys).to_pylist()
        ]
        assert reader.log_keys([log_file]).to_pylist() == decoded, log_file.relative_path
    kinds = {b.block_type.name for f in logs for b in reader.visible_blocks([f])}
    assert kinds == LOG_BLOCKS.get(name), name


# The visible log block types of each merge-on-read table (what the test above covers).
LOG_BLOCKS = {
    "moravro_v6_trips_8i1u": {"AVRO_DATA"},
    "moravro_v6_trips_8i3d": {"DELETE"},
    "morparquet_v6_complexkeygen_hivestyle": {"PARQUET_DATA"},
    "morparquet_v6_empty": set(),
    "morparquet_v6_nonpartitioned": {"PARQUET_DATA"},
    "morparquet_v6_nonpartitioned_rollback": {"PARQUET_DATA"},
    "morparquet_v6_simplekeygen_hivestyle_no_metafields": set(),  # base files only
    "morparquet_v6_simplekeygen_nonhivestyle": {"PARQUET_DATA"},
    "morparquet_v6_simplekeygen_nonhivestyle_overwritetable": {"PARQUET_DATA"},
}


def test_reader_conform_refuses_lossy_cast_of_stored_values() -> None:
    schema = pa.schema([("f", pa.float32()), ("g", pa.int64())])
    assert conform(pa.table({"f": [0.25]}), schema).to_pylist() == [{"f": 0.25, "g": None}]
    with pytest.raises(SchemaError, match=r"column 'f': value 0.1 does not fit float exactly"):
        conform(pa.table({"f": [0.25, 0.1]}), schema)


@pytest.mark.parametrize(("table_version", "precombine"), [(6, "ts"), (8, "ts"), (8, "")])
def test_a_version_flagged_hoodie_is_deleted_in_a_log_reads_deleted_as_hudi_rs_reads_it(
    tmp_path: Path, table_version: int, precombine: str
) -> None:
    """``_hoodie_is_deleted`` is a data column (Hudi's delete marker), not a meta column: an upsert
    flagging k0 true logs a delete of it. Our read, like hudi-rs, hides k0 and shows the column."""
    table = LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field=precombine,
        partition_fields=("p",),
        table_version=table_version,
    )

    def rows(ids: list[str], ts: int, flag: bool) -> pa.Table:
        n = len(ids)
        return pa.table(
            {
                "id": ids,
                "ts": pa.array([ts] * n, pa.int64()),
                "p": ["x"] * n,
                "_hoodie_is_deleted": [flag] * n,
            }
        )

    write(table, rows(["k0", "k1"], 1, False), "insert")
    write(table, rows(["k0"], 2, True), "upsert")
    ours = read_snapshot(LakeTable.open(table.base_path))
    theirs = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table.base_path)).build().read())
    assert ours.column_names == theirs.column_names
    assert ours.column_names[-1] == "_hoodie_is_deleted"
    assert _rows(ours.drop(["_hoodie_commit_seqno"])) == _rows(theirs.drop(["_hoodie_commit_seqno"]))
    assert ours.select(["id", "_hoodie_is_deleted"]).to_pylist() == [
        {"id": "k1", "_hoodie_is_deleted": False}
    ]
