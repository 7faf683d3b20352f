"""Compaction of Hudi's metadata table (MDT) under ``lake.metadata-table.maintain``.

Java's own MDT compactions in the 1.x test tables are the reference for the merge and the base
file: executing Java's plan, our merge of each file group's base file and log blocks, written by our
HFile writer, gives Java's base file byte for byte (the ``files`` partition: the same records, field
for field; the order of a record's file map is that of Java's ``HashMap``s, which differ between
1.0 and 1.1). Maintained writes then compact the MDT when Java's rule says so; hudi-rs lists the
table through the compacted MDT (and reads our base HFile: a file left out of it disappears from its
read) and reads the rows we read; ``--check`` finds no difference.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)
import pytest
from mdt_tables import keep_files_partition_only

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.format.hfile import read_hfile
from airflow_lake_provider.lake.format.properties import parse_properties
from airflow_lake_provider.lake.log_file.hfile_block import SCHEMA_INFO, decode_hfile_cells
from airflow_lake_provider.lake.storage import open_storage
from airflow_lake_provider.lake.table.metadata import compaction as mc
from airflow_lake_provider.lake.table.metadata.files import read_files_partition, read_partition_records
from airflow_lake_provider.lake.table.metadata.policy import kept_metadata_table
from airflow_lake_provider.lake.table.metadata.services import run_metadata_table_services
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import write
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Action, State
from airflow_lake_provider.lake.timeline.layouts import TimelineLayout
from tests.unit.lake.table.metadata.test_commit import (
    INDEXES,
    MAINTAIN,
    _batch,
    _rows,
    assert_consistent,
    assert_index_consistent,
    hudi_rs,
)

# Every 1.x test table whose MDT Java compacted (the v8 one by Hudi 1.0, the v9 ones by 1.1).
JAVA_COMPACTED = (
    "cow_v9_lance_txns_nonpart",
    "cow_v9_lance_txns_simple",
    "cow_v9_txns_complex_meta",
    "cow_v9_txns_nonpart_meta",
    "cow_v9_txns_simple_meta",
    "mdt_basic_mor_avro_v8_nonpartitioned",
    "mor_avro_v9_txns_complex_meta",
    "mor_avro_v9_txns_nonpart_meta",
    "mor_avro_v9_txns_simple_meta",
)
DELTA_COMMITS = "hoodie.metadata.compact.max.delta.commits"


def _mdt_timeline(path: Path) -> Timeline:
    return kept_metadata_table(LakeTable.open(path)).timeline()  # type: ignore[union-attr]


def _decoded(data: bytes) -> list[tuple[str, dict]]:
    hfile = read_hfile(data, "hfile")
    return decode_hfile_cells(hfile, hfile.content.info(SCHEMA_INFO), "hfile")


@pytest.mark.parametrize("name", JAVA_COMPACTED)
def test_executing_javas_plan_writes_javas_base_files(hudi_table_zip, name: str) -> None:
    path = hudi_table_zip(name)
    storage = open_storage(path).child(".hoodie/metadata")
    props = parse_properties(storage.read(".hoodie/hoodie.properties").decode())
    timeline = Timeline.load(storage, TimelineLayout.from_properties(props, "mdt"))
    (compaction,) = timeline.filter([Action.COMMIT], [State.COMPLETED])
    plan = timeline.compaction_plan(compaction.timestamp)
    written = {
        s["path"]
        for stats in timeline.avro_record(compaction)["partitionToWriteStats"].values()
        for s in stats
    }
    compared = 0
    for record in plan["operations"]:
        op = mc.MetadataCompactionOperation.from_avro(record)
        records, *_ = mc.merged_records(storage, op, lambda _instant: True)
        javas = [p for p in written if p.startswith(f"{op.partition}/{op.file_id}_")]
        if not javas:  # Java writes no file for a slice with no base file and no record
            assert not records and op.base_file is None, op
            continue
        (java,) = javas
        data = storage.read(java)
        hfile = read_hfile(data, java)
        ours = mc.base_file_bytes(
            records,
            java.rsplit("/", 1)[-1],
            hfile.content.info(SCHEMA_INFO).decode(),
            hfile.settings(),
            mc.bloom_settings_of(storage, java),
        )
        if op.partition == "files":
            mine = read_hfile(ours, "ours")
            assert mine.content.file_info == hfile.content.file_info
            assert mine.content.meta_blocks == hfile.content.meta_blocks
            assert _decoded(ours) == _decoded(data)
        else:
            assert ours == data, java
        compared += 1
    assert compared >= 4


def _upserts(path: Path, count: int, options: dict[str, str]) -> list:
    """``count`` maintained upserts of the table's first two rows (txn tables: txn_id, txn_ts)."""
    results = []
    for _ in range(count):
        snapshot = read_snapshot(LakeTable.open(path))
        keys = snapshot.column("txn_id").to_pylist()[:2]
        batch = _batch(snapshot, "txn_id", "txn_ts", [0, 1], keys)
        results.append(write(LakeTable.open(path), batch, "upsert", options=options))
    return results


NAME = "mor_avro_v9_txns_simple_meta"


def test_maintained_writes_compact_the_mdt_when_java_would(hudi_table_zip) -> None:
    path = keep_files_partition_only(hudi_table_zip(NAME), INDEXES)
    options = {**MAINTAIN, DELTA_COMMITS: "3"}
    since = mc.deltacommits_since_compaction(_mdt_timeline(path))
    # Java compacted the MDT, then wrote 7 deltacommits (by requested time; one it requested before
    # the compaction completed after it, in the new slice, and does not count, as in Java's count).
    assert since == 7
    # Past 3 already: the first maintained write compacts after it, then every third.
    first, second, third, fourth = _upserts(path, 4, options)
    assert first.metadata_compaction is not None
    assert (second.metadata_compaction, third.metadata_compaction) == (None, None)
    assert fourth.metadata_compaction is not None and fourth.metadata_compaction > fourth.instant
    timeline = _mdt_timeline(path)
    c = fourth.metadata_compaction
    names = sorted(p.name for p in (path / ".hoodie/metadata/.hoodie/timeline").glob(f"{c}*"))
    assert names[0] == f"{c}.compaction.inflight" and names[1] == f"{c}.compaction.requested"
    assert names[2].startswith(f"{c}_") and names[2].endswith(".commit") and len(names) == 3
    # The plan: every file group with logs since the first compaction of ours, each with those logs.
    plan = timeline.compaction_plan(c)
    ops = {(o["partitionPath"], o["fileId"]): o for o in plan["operations"]}
    assert ("files", "files-0000-0") in ops
    files_op = ops[("files", "files-0000-0")]
    assert files_op["baseInstantTime"] == first.metadata_compaction
    assert files_op["deltaFilePaths"] == [
        f".files-0000-0_{r.instant}.log.1_0-0-0" for r in (second, third, fourth)
    ]
    commit = timeline.avro_record(timeline.filter([Action.COMMIT], [State.COMPLETED])[-1])
    assert commit["operationType"] == "COMPACT" and commit["compacted"] is True
    new_bases = sorted(s["path"] for stats in commit["partitionToWriteStats"].values() for s in stats)
    assert new_bases == sorted(f"{p}/{f}_{i}-0-0_{c}.hfile" for i, (p, f) in enumerate(ops))
    # Both readers list through it: hudi-rs reads our rows, the files partition equals the listing.
    after = assert_consistent(path)
    assert_index_consistent(path)
    listing = read_files_partition(open_storage(path))
    assert (
        listing.base_file
        == f".hoodie/metadata/files/files-0000-0_{list(ops).index(('files', 'files-0000-0'))}-0-0_{c}.hfile"
    )
    assert listing.log_files == ()
    # A fifth write's log goes to the new slice.
    (fifth,) = _upserts(path, 1, options)
    assert fifth.metadata_compaction is None
    assert read_files_partition(open_storage(path)).log_files == (
        f".hoodie/metadata/files/.files-0000-0_{fifth.instant}.log.1_0-0-0",
    )
    assert_consistent(path)
    assert len(after) == len(read_snapshot(LakeTable.open(path)))


def test_hudi_rs_lists_the_table_through_our_base_file(hudi_table_zip) -> None:
    """Rewriting our compacted base file without one data file's entry makes hudi-rs drop that
    file's rows: it reads our HFile (it does not fall back to listing storage)."""
    path = keep_files_partition_only(hudi_table_zip(NAME))
    (result,) = _upserts(path, 1, {**MAINTAIN, DELTA_COMMITS: "1"})
    assert result.metadata_compaction is not None
    rows = hudi_rs(path)
    listing = read_files_partition(open_storage(path))
    base = path / listing.base_file
    records = dict(_decoded(base.read_bytes()))
    partition = "region=eu"
    parquet = sorted(n for n in records[partition]["filesystemMetadata"] if n.endswith(".parquet"))[0]
    file_id = parquet.split("_")[0]
    kept = {
        n: i
        for n, i in records[partition]["filesystemMetadata"].items()
        if not n.startswith(file_id) and not n.startswith(f".{file_id}")
    }
    records[partition] = {**records[partition], "filesystemMetadata": kept}
    storage = open_storage(path).child(".hoodie/metadata")
    hfile = read_hfile(base.read_bytes(), str(base))
    bloom = mc.bloom_settings_of(storage, listing.base_file.removeprefix(".hoodie/metadata/"))
    base.write_bytes(
        mc.base_file_bytes(
            records, base.name, hfile.content.info(SCHEMA_INFO).decode(), hfile.settings(), bloom
        )
    )
    fewer = hudi_rs(path)
    gone = rows.filter(pa.compute.starts_with(rows.column("_hoodie_file_name"), file_id))
    assert gone.num_rows > 0
    assert _rows(fewer) == _rows(
        rows.filter(pa.compute.invert(pa.compute.starts_with(rows.column("_hoodie_file_name"), file_id)))
    )


def _unread() -> Timeline:
    raise AssertionError("the data timeline is read only once the count is reached")


def test_no_compaction_while_a_data_instant_before_the_latest_deltacommit_is_pending(hudi_table_zip) -> None:
    path = keep_files_partition_only(hudi_table_zip(NAME))
    timeline = LakeTable.open(path).timeline()
    mdt = _mdt_timeline(path)
    latest = max(i.timestamp for i in mdt.filter([Action.DELTACOMMIT], [State.COMPLETED]))
    assert mc.why_not_due(lambda: timeline, mdt, 7) is None
    assert mc.why_not_due(_unread, mdt, 8) == "7 deltacommits since its last compaction (fewer than 8)"
    # A pending data instant at or before the MDT's latest deltacommit (a write that failed after
    # its MDT deltacommit completed) holds the compaction back, as Java's rule does.
    pending = [i for i in timeline.instants if i.timestamp <= latest and i.is_completed][-1]
    (path / ".hoodie/timeline" / timeline.layout.file_name(pending)).unlink()
    held = LakeTable.open(path).timeline()
    assert mc.why_not_due(lambda: held, mdt, 7) == (
        f"data instant(s) {pending.timestamp} at or before its latest deltacommit {latest} are pending"
    )
    before = sorted(p.name for p in (path / ".hoodie/metadata/.hoodie/timeline").iterdir())
    assert run_metadata_table_services(LakeTable.open(path), {**MAINTAIN, DELTA_COMMITS: "1"}) is None
    assert sorted(p.name for p in (path / ".hoodie/metadata/.hoodie/timeline").iterdir()) == before


def test_under_maintain_false_nothing_runs(hudi_table_zip) -> None:
    path = keep_files_partition_only(hudi_table_zip(NAME))
    before = sorted(p.name for p in (path / ".hoodie/metadata/.hoodie/timeline").iterdir())
    off = {DELTA_COMMITS: "1", "lake.metadata-table.maintain": "false"}
    assert run_metadata_table_services(LakeTable.open(path), off) is None
    assert sorted(p.name for p in (path / ".hoodie/metadata/.hoodie/timeline").iterdir()) == before


def test_lake_write_compacts_then_check_finds_no_difference(hudi_table_zip, capsys) -> None:
    path = keep_files_partition_only(hudi_table_zip(NAME), INDEXES)
    _upserts(path, 1, {**MAINTAIN, DELTA_COMMITS: "1"})
    capsys.readouterr()
    assert main(["metadata-table", str(path), "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["consistent"] is True


@pytest.mark.parametrize("value", ["0", "ten", "-3"])
def test_a_bad_threshold_is_refused_before_the_write_changes_anything(hudi_table_zip, value: str) -> None:
    from tree_digest import tree_digest

    from airflow_lake_provider.lake.errors import MetadataTableConfigError

    path = keep_files_partition_only(hudi_table_zip(NAME))
    digest = tree_digest(path)
    with pytest.raises(MetadataTableConfigError, match=f"^{DELTA_COMMITS}='?{value}"):
        _upserts(path, 1, {**MAINTAIN, DELTA_COMMITS: value})
    assert tree_digest(path) == digest


def test_a_record_index_group_of_log_files_only_is_compacted_with_every_log(hudi_table_zip) -> None:
    """Before Java's first MDT compaction the record index groups hold log files only (one per
    deltacommit that wrote keys there). They are one slice each, as Java groups them: one slice per
    log made the MDT's readers, and our compaction of the group, take the newest log alone, so the
    record index lost the keys of the older logs (a Java writer then inserts them again)."""
    path = hudi_table_zip("mor_avro_v9_txns_simple_meta")
    mdt = path / ".hoodie/metadata"
    java = "20260307162612567"  # Spark's MDT compaction, undone: every record index group log-only
    for name in [*mdt.glob(f".hoodie/timeline/{java}*"), *mdt.glob(f"*/*_{java}.hfile")]:
        name.unlink()
    keys = sorted(read_snapshot(LakeTable.open(path)).column("txn_id").to_pylist())
    storage = open_storage(path)
    assert sorted(read_partition_records(storage, "record_index")) == keys
    compacted = run_metadata_table_services(LakeTable.open(path), {**MAINTAIN, DELTA_COMMITS: "1"})
    assert compacted is not None and list(mdt.glob(f"record_index/record-index-*_{compacted}.hfile"))
    assert sorted(read_partition_records(storage, "record_index")) == keys
