"""``LakeTable.create`` / ``lake init --table-version {8,9}``: ``hoodie.properties`` carries exactly
the keys Hudi 1.x's Spark writer writes for the same table (the Spark-written tables of
``tests/data/hudi-tables-1x``), with the checksum, and the folders it creates."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import UnsupportedTableVersionError
from airflow_lake_provider.lake.format.properties import parse_properties, table_checksum
from airflow_lake_provider.lake.table.table import LakeTable

# Spark-written tables without a metadata table (nometa) or with only the v8 COW defaults, and
# how each was declared, so that we create the same table.
SAME_TABLES: dict[str, tuple[str, str, str, tuple[str, ...], bool]] = {
    # name: (table type, record key, ordering field, partition fields, hive-style)
    "cow_v8_nonpartitioned": ("cow", "id", "longField", (), True),
    "cow_v8_simplekeygen_nonhivestyle": ("cow", "id", "longField", ("byteField",), False),
    "cow_v9_txns_simple_nometa": ("cow", "txn_id", "txn_ts", ("region",), True),
    "cow_v9_txns_nonpart_nometa": ("cow", "txn_id", "txn_ts", (), True),
    "mor_avro_v9_txns_simple_nometa": ("mor", "txn_id", "txn_ts", ("region",), True),
    "mor_avro_v9_txns_nonpart_nometa": ("mor", "txn_id", "txn_ts", (), True),
}
# Keys in which ours may differ, each for a reason the table's options explain:
# - the schema: Spark knows it when its first write creates the table, ``init`` does not (the
#   first commit records it);
# - our instant times are UTC: a Java writer told so writes the time zone key (default: local);
# - the checksum covers the database name, which Spark's session set to ``default``;
# - the MDT: Spark-written tables with one list its partitions; we create none (absent, as Hudi
#   writes a table with hoodie.metadata.enable=false).
EXPLAINED = {
    "hoodie.table.create.schema": "Spark only",
    "hoodie.table.timeline.timezone": "ours only",
    "hoodie.table.metadata.partitions": "Spark only",
}


def _props(table: Path) -> dict[str, str]:
    return parse_properties((table / ".hoodie" / "hoodie.properties").read_text())


@pytest.mark.parametrize("name", sorted(SAME_TABLES))
def test_init_writes_the_keys_and_values_of_a_spark_written_table(
    name: str, hudi_table_zip: Callable[[str], Path], tmp_path: Path
) -> None:
    spark = hudi_table_zip(name)
    theirs = _props(spark)
    table_type, key, order, parts, hive = SAME_TABLES[name]
    version = int(theirs["hoodie.table.version"])
    ours_path = tmp_path / "ours"
    LakeTable.create(
        ours_path,
        name=theirs["hoodie.table.name"],
        table_type=table_type,
        record_key_fields=(key,),
        precombine_field=order,
        partition_fields=parts,
        hive_style=hive,
        table_version=version,
        database="default",
    )
    ours = _props(ours_path)
    differences = {
        key: (ours.get(key), theirs.get(key))
        for key in sorted(set(ours) | set(theirs))
        if ours.get(key) != theirs.get(key) and key not in EXPLAINED
    }
    assert differences == {}
    assert ours["hoodie.table.timeline.timezone"] == "UTC"
    assert "hoodie.table.timeline.timezone" not in theirs
    assert ours["hoodie.table.checksum"] == theirs["hoodie.table.checksum"] == str(table_checksum(ours))
    # The folders Hudi 1.x creates (no archived/: layout 2 archives to timeline/history/).
    assert sorted(
        str(p.relative_to(ours_path)) for p in (ours_path / ".hoodie").rglob("*") if p.is_dir()
    ) == [
        ".hoodie/.aux",
        ".hoodie/.aux/.bootstrap",
        ".hoodie/.aux/.bootstrap/.fileids",
        ".hoodie/.aux/.bootstrap/.partitions",
        ".hoodie/.schema",
        ".hoodie/.temp",
        ".hoodie/timeline",
        ".hoodie/timeline/history",
    ]


@pytest.mark.parametrize("version", [8, 9])
def test_lake_init_table_version_creates_a_table_that_opens_as_that_version(
    version: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t"
    args = ["init", str(path), "--table-type", "mor", "--name", "t", "--record-key", "id"]
    assert main([*args, "--precombine", "ts", "--table-version", str(version)]) == 0
    table = LakeTable.open(path)
    assert table.config.table_version == version
    assert table.config.precombine_field == "ts"
    assert table.layout.folder == ".hoodie/timeline"
    assert table.timeline().instants == ()
    props = _props(path)
    assert props["hoodie.table.keygenerator.type"] == "NON_PARTITION"
    assert "hoodie.table.partition.fields" not in props
    assert ("hoodie.table.ordering.fields" in props) == (version == 9)
    assert ("hoodie.table.precombine.field" in props) == (version == 8)
    # lake write and lake read on it; hudi-rs reads the same rows.
    source, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "ts": [1, 1], "v": [1, 2]}), source)
    for operation in ("insert", "upsert"):
        assert main(["write", str(path), "--input", str(source), "--operation", operation]) == 0
    assert main(["read", str(path), "--output", str(out)]) == 0
    ours = pq.read_table(out)
    theirs = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read())
    assert sorted(map(repr, ours.to_pylist())) == sorted(map(repr, theirs.to_pylist()))
    assert ours.num_rows == 2
    names = sorted(p.name for p in (path / ".hoodie" / "timeline").iterdir() if p.is_file())
    assert [n.split(".", 1)[1] for n in names] == [
        "deltacommit.inflight",
        "deltacommit.requested",
        "deltacommit",  # <requested>_<completion>.deltacommit
    ] * 2


def test_lake_init_defaults_to_version_6_and_refuses_other_versions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["init", str(tmp_path / "t"), "--table-type", "cow", "--name", "t", "--record-key", "id"]
    assert main([*args, "--precombine", "ts"]) == 0
    assert LakeTable.open(tmp_path / "t").config.table_version == 6
    assert (tmp_path / "t" / ".hoodie" / "archived").is_dir()
    with pytest.raises(SystemExit):
        main([*args[:1], str(tmp_path / "u"), *args[2:], "--precombine", "ts", "--table-version", "7"])
    assert not (tmp_path / "u").exists()
    with pytest.raises(UnsupportedTableVersionError, match="table version 7 cannot be created"):
        LakeTable.create(
            tmp_path / "v",
            name="v",
            table_type="cow",
            record_key_fields=("id",),
            precombine_field="ts",
            table_version=7,
        )
    assert not (tmp_path / "v").exists()


def test_create_without_a_precombine_field_takes_none_as_empty(tmp_path: Path) -> None:
    """``precombine_field=None`` means no ordering field, as ``""`` does (it failed with a raw
    AttributeError): the same hoodie.properties."""
    tables = [
        LakeTable.create(
            tmp_path / name, name="t", table_type="cow", record_key_fields=("id",), precombine_field=given
        )
        for name, given in (("none", None), ("empty", ""))
    ]
    none, empty = (parse_properties((t.base_path / ".hoodie/hoodie.properties").read_text()) for t in tables)
    assert none == empty and none["hoodie.table.precombine.field"] == ""
    assert tables[0].config.precombine_field is None
