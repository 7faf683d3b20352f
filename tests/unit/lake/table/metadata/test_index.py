"""The ``column_stats`` and ``partition_stats`` records of a data write: for every commit,
deltacommit, compaction commit and replacecommit of the Spark-written 1.x tables with those MDT
partitions, ours (from the instant's commit metadata and the table as that instant's writer saw it)
equal, key for key, field for field and file group for file group, the records Hudi's Java writer
put in that instant's MDT deltacommit."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pytest
from mdt_tables import keep_files_partition_only

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.log_file.hfile_block import decode_hfile_block
from airflow_lake_provider.lake.log_file.log_format import BlockType, HeaderKey, parse_log_bytes
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
from airflow_lake_provider.lake.services.compaction.result import Outcome
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.storage import open_storage
from airflow_lake_provider.lake.table.archival.executor import run_archival
from airflow_lake_provider.lake.table.metadata import index as index_module
from airflow_lake_provider.lake.table.metadata.index import GROUP_PREFIXES, INDEX_PARTITIONS, index_records
from airflow_lake_provider.lake.table.metadata.records import change_of_commit
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import write
from airflow_lake_provider.lake.timeline.instant import Action
from tests.unit.lake.table.metadata.test_commit import INDEXES, MAINTAIN, _batch, assert_index_consistent

WRITES = (Action.COMMIT, Action.DELTACOMMIT, Action.REPLACECOMMIT)


def _javas(path: Path, instant: str) -> tuple[dict, dict | None]:
    """(MDT partition, file id, key) -> record of the instant's index log blocks; the block schema."""
    found, schema = {}, None
    for partition, prefix in GROUP_PREFIXES.items():
        for log in (path / ".hoodie/metadata" / partition).glob(f".{prefix}*_{instant}.log.*"):
            file_id = log.name.lstrip(".").split("_")[0]
            for block in parse_log_bytes(log.read_bytes(), str(log)):
                if block.block_type is BlockType.HFILE_DATA:
                    schema = json.loads(block.header[HeaderKey.SCHEMA])
                    found.update({(partition, file_id, k): r for k, r in decode_hfile_block(block)})
    return found, schema


@pytest.mark.parametrize(
    ("name", "count"),
    [
        ("mor_avro_v9_txns_simple_meta", 13),
        ("cow_v9_txns_simple_meta", 12),
        ("mor_avro_v9_txns_complex_meta", 13),
        ("cow_v9_txns_nonpart_meta", 11),  # column_stats only
        ("mdt_basic_mor_avro_v8_nonpartitioned", 7),  # Hudi 1.0: index version 1
    ],
)
def test_index_records_of_every_write_equal_the_java_writers(
    hudi_table_zip, monkeypatch: pytest.MonkeyPatch, name: str, count: int
) -> None:
    """Every write of Spark's histories replayed: our records equal Java's. The replay reads the MDT
    as it is now, whose partition_stats records are later than the instant's, so each partition's
    record is recomputed over every file here (the merge with the stored record that a write which
    only grew a partition takes is checked against that recomputation below)."""
    monkeypatch.setattr(index_module, "_grown_records", lambda *args: {})
    path = hudi_table_zip(name)
    table = LakeTable.open(path)
    timeline = table.timeline()
    partitions = (
        frozenset(table.config.properties["hoodie.table.metadata.partitions"].split(",")) & INDEX_PARTITIONS
    )
    compared = 0
    for instant in timeline.instants:
        if not instant.is_completed or instant.action not in WRITES:
            continue
        theirs, schema = _javas(path, instant.timestamp)
        assert schema is not None
        # The timeline as the instant's writer saw it: what had completed before it did.
        seen = [
            i for i in timeline.instants if i.is_completed and i.completion_time < instant.completion_time
        ]
        seen_timeline = dataclasses.replace(timeline, instants=tuple(sorted([*seen, instant])))
        change = change_of_commit(timeline.commit_metadata(instant))
        groups = index_records(
            open_storage(path), table.config, seen_timeline, instant, change, partitions, schema
        )
        ours = flat_records(groups)
        assert ours == theirs, instant
        compared += 1
    assert compared == count


def flat_records(groups: dict) -> dict:
    """``index_records``' result as (MDT partition, file group, key) -> record, as ``_javas`` gives."""
    return {
        (p, f, k): r for p, by_group in groups.items() for f, records in by_group.items() for k, r in records
    }


@pytest.mark.parametrize("name", ["mor_avro_v9_txns_simple_meta", "cow_v9_txns_simple_meta"])
def test_a_write_that_only_grew_a_partition_merges_its_stored_record_equal_to_a_recomputation(
    hudi_table_zip, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """A write that only adds files to a partition's latest slices (MOR logs, new file groups) takes
    the partition's stored ``partition_stats`` record merged with its own files' stats, without
    reading the stats of the others; a write that rewrote a base file (COW) recomputes. Either way,
    after each of several writes, the records equal a recomputation over every file."""
    path = keep_files_partition_only(hudi_table_zip(name), INDEXES)
    grown: list[set[str]] = []
    real = index_module._grown_records

    def spied(*args: object) -> dict:
        out = real(*args)  # type: ignore[arg-type]
        grown.append(set(out))
        return out

    monkeypatch.setattr(index_module, "_grown_records", spied)
    for round_no in range(3):
        snapshot = read_snapshot(LakeTable.open(path))
        keys = sorted(snapshot.column("txn_id").to_pylist())
        batch = _batch(snapshot.sort_by("txn_id"), "txn_id", "txn_ts", [0, 1], [keys[0], f"grow-{round_no}"])
        write(LakeTable.open(path), batch, "upsert", options=MAINTAIN)
        assert_index_consistent(path)
    mor = LakeTable.open(path).config.is_mor
    assert all(grown) if mor else not any(grown), grown


@pytest.mark.parametrize("archived", [False, True])
def test_a_write_after_a_compaction_it_overtook_recomputes_and_check_names_the_overtaken_record(
    hudi_table_zip, capsys: pytest.CaptureFixture[str], archived: bool
) -> None:
    """Found by an adversarial run: a write requested after a compaction was scheduled completes
    before it. Readers merge MDT logs by requested time, so the partition's stored record is the
    write's (over the slices before the compaction), not the compaction's: ``--check`` lists it as
    unverifiable, naming both, and the next write that only grows the partition recomputes its
    record (merging into that one would carry it on) and ``--check`` is clean again."""
    path = keep_files_partition_only(hudi_table_zip("mor_avro_v9_txns_simple_meta"), INDEXES)

    def grow(new_key: str) -> str:
        snapshot = read_snapshot(LakeTable.open(path)).sort_by("txn_id")
        keys = snapshot.column("txn_id").to_pylist()
        batch = _batch(snapshot, "txn_id", "txn_ts", [0, 0], [keys[0], new_key])
        return write(LakeTable.open(path), batch, "upsert", options=MAINTAIN).instant

    grow("grow-1")
    options = {**MAINTAIN, "hoodie.compact.inline.max.delta.commits": "1"}
    compaction = schedule_compaction(LakeTable.open(path), options).instant
    overtaking = grow("grow-2")
    assert execute_compaction(LakeTable.open(path), options=MAINTAIN).outcome is Outcome.COMPLETED
    assert main(["metadata-table", str(path), "--check"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["consistent"] is True
    assert any(
        f"its last write {overtaking} completed before {compaction}, requested earlier" in reason
        for reason in report["partition_stats"]["unverifiable_partitions"]
    ), report["partition_stats"]
    if archived:
        # (helper-74) Once archival took the overtaking write off the active timeline, nothing
        # there tells why the record differs: unverifiable, not a mismatch.
        overtaken = [r.split(":")[0] for r in report["partition_stats"]["unverifiable_partitions"]]
        for n in range(4):
            grow_elsewhere = read_snapshot(LakeTable.open(path)).sort_by("txn_id")
            batch = _batch(grow_elsewhere, "txn_id", "txn_ts", [0], [f"far-{n}"])
            batch = batch.set_column(batch.column_names.index("region"), "region", pa.array(["zz-far"]))
            mdt_compacted = {**MAINTAIN, "hoodie.metadata.compact.max.delta.commits": "1"}
            write(LakeTable.open(path), batch, "upsert", options=mdt_compacted)  # (archival's MDT bound)
        versions = {
            "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
            "hoodie.cleaner.fileversions.retained": "1",
        }
        run_clean(LakeTable.open(path), {**MAINTAIN, **versions})
        keep = {"hoodie.keep.min.commits": "3", "hoodie.keep.max.commits": "4"}
        few = {"hoodie.cleaner.commits.retained": "1", "hoodie.compact.inline.max.delta.commits": "1"}
        run_archival(LakeTable.open(path), {**MAINTAIN, **keep, **few})
        assert LakeTable.open(path).timeline().get(overtaking) is None  # archived
        assert main(["metadata-table", str(path), "--check"]) == 0
        report = json.loads(capsys.readouterr().out)["partition_stats"]
        assert report["stats_mismatches"] == []
        for partition in overtaken:
            why = f"{partition}: its last write is archived, and the record differs from the latest slices"
            assert why in report["unverifiable_partitions"]
        return
    grow("grow-3")
    assert_index_consistent(path)
    assert main(["metadata-table", str(path), "--check"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["consistent"] is True and report["partition_stats"]["unverifiable_partitions"] == []
