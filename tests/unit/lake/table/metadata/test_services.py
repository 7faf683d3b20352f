"""Compaction and clean that keep Hudi's metadata table (MDT) (``lake.metadata-table.maintain``).

On copies of the Spark-written v8/v9 merge-on-read tables with an MDT (every partition they have:
``files``, ``column_stats``, ``partition_stats``, ``record_index``, secondary indexes): a compaction
then a clean, each with its MDT deltacommit at its own instant time, completed before it. hudi-rs
lists these tables through the MDT ``files`` partition, so it would read a new base file's rows
twice, or fail on a deleted file, if the MDT were stale: it must read the rows it read before, as
we do; the files partition equals a full listing (``lake metadata-table --check``) and the
``column_stats``/``partition_stats`` entries equal a recomputation. The records of each deltacommit
are those Hudi's Java writer makes (``HoodieTableMetadataUtil``): a compaction's as a commit's (its
new base files; checked against the Spark-written compactions' own deltacommits in
``test_index``/``test_records`` and below); a clean's as the clean conversion
(planned deletes as ``files`` deletions, ``column_stats`` stubs marked deleted, no partition stats).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)
import pytest
from compaction_support import crash_at
from mdt_tables import keep_files_partition_only
from mdt_v6_tables import add_v6_metadata_table

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.log_file.hfile_block import decode_hfile_block
from airflow_lake_provider.lake.log_file.log_format import BlockType, HeaderKey, parse_log_bytes
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction, run_compaction
from airflow_lake_provider.lake.services.compaction.result import Outcome
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.storage import SimulatedCrash, open_storage
from airflow_lake_provider.lake.table.metadata.files import read_files_partition, read_partition_records
from airflow_lake_provider.lake.table.metadata.index import GROUP_PREFIXES, INDEX_PARTITIONS, index_records
from airflow_lake_provider.lake.table.metadata.records import change_of_commit, files_records
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import write
from airflow_lake_provider.lake.timeline.instant import Action, State
from tests.unit.lake.table.metadata.test_commit import (
    INDEXES,
    MAINTAIN,
    _batch,
    assert_consistent,
    assert_index_consistent,
    hudi_rs,
)
from tests.unit.lake.table.metadata.test_index import _javas, flat_records

# The Spark-written MOR tables with an MDT: the first two with their key indexes (record_index,
# a secondary index) and logs to compact; the last compacted by Spark already, given logs by a
# maintained upsert first (its key indexes dropped: a write does not keep them).
MOR_MDT = (
    "mdt_basic_mor_avro_v8_nonpartitioned",
    "mor_avro_v9_timebasedkeygen_nonhivestyle",
    "mor_avro_v9_txns_simple_meta",
)
UPSERT_FIRST = {"mor_avro_v9_txns_simple_meta"}
# Its column_stats already lack files of Spark's own commits (the MDT was initialised twice): its
# index entries are compared only where we wrote them.
INDEX_GAPS_FROM_SPARK = {"mor_avro_v9_timebasedkeygen_nonhivestyle"}
# Only the compacted slices are kept: every slice the compaction replaced goes.
ONE_VERSION = {
    **MAINTAIN,
    "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
    "hoodie.cleaner.fileversions.retained": "1",
}


def _rows(table: pa.Table) -> list[str]:
    """The rows, but for the file that holds each (a compaction moves rows to new base files)."""
    return sorted(repr(row) for row in table.drop_columns(["_hoodie_file_name"]).to_pylist())


def _blocks(path: Path, instant: str) -> dict[str, dict[str, dict]]:
    """MDT partition -> key -> record of the instant's MDT log blocks."""
    found: dict[str, dict[str, dict]] = {}
    for log in (path / ".hoodie/metadata").glob(f"*/.*_{instant}.log.*"):
        for block in parse_log_bytes(log.read_bytes(), str(log)):
            assert block.block_type is BlockType.HFILE_DATA
            assert block.header[HeaderKey.INSTANT_TIME] == instant
            found.setdefault(log.parent.name, {}).update(decode_hfile_block(block))
    return found


def _prepared(hudi_table_zip, name: str) -> Path:
    path = hudi_table_zip(name)
    if name in UPSERT_FIRST:
        keep_files_partition_only(path, INDEXES)
        snapshot = read_snapshot(LakeTable.open(path))
        eu = snapshot.filter(pa.compute.equal(snapshot.column("region"), "eu"))
        batch = _batch(eu, "txn_id", "txn_ts", [0, 1], eu.column("txn_id").to_pylist()[:2])
        write(LakeTable.open(path), batch, "upsert", options=MAINTAIN)
    return path


def _without_meta(records: dict[str, dict]) -> dict[str, dict]:
    return {k: {f: v for f, v in r.items() if not f.startswith("_hoodie_")} for k, r in records.items()}


def _mdt_completion(path: Path, instant: str) -> str:
    (done,) = (path / ".hoodie/metadata/.hoodie/timeline").glob(f"{instant}_*.deltacommit")
    return done.name.split("_")[1].split(".")[0]


def _data_completion(path: Path, instant: str, action: str) -> str:
    (done,) = (path / ".hoodie/timeline").glob(f"{instant}_*.{action}")
    return done.name.split("_")[1].split(".")[0]


@pytest.mark.parametrize("name", MOR_MDT)
def test_compaction_then_clean_keep_the_metadata_table(hudi_table_zip, name: str) -> None:
    path = _prepared(hudi_table_zip, name)
    table = LakeTable.open(path)
    partitions = table.config.properties["hoodie.table.metadata.partitions"].split(",")
    before = _rows(hudi_rs(path))
    assert _rows(read_snapshot(table)) == before

    scheduled, done = run_compaction(table, MAINTAIN, force=True)
    assert done.outcome is Outcome.COMPLETED and scheduled.plan is not None
    c = done.instant
    assert _rows(hudi_rs(path)) == before
    assert _rows(assert_consistent(path)) == before
    assert _mdt_completion(path, c) < _data_completion(path, c, "commit")
    if name not in INDEX_GAPS_FROM_SPARK:
        assert_index_consistent(path)
    records = _blocks(path, c)
    # No entry of the key indexes: a compaction moves no key (Java's writer skips COMPACT there).
    assert sorted(records) == sorted({"files", *partitions} & {"files", *GROUP_PREFIXES})
    new_bases = {s.path.rsplit("/", 1)[-1] for s in done.stats}
    listed = {n for r in records["files"].values() if r["type"] == 2 for n in r["filesystemMetadata"]}
    assert listed == new_bases
    if "column_stats" in records:
        files = {r["ColumnStatsMetadata"]["fileName"] for r in records["column_stats"].values()}
        assert files == new_bases

    stats_before = _without_meta(read_partition_records(open_storage(path), "partition_stats"))
    cleaned = run_clean(LakeTable.open(path), ONE_VERSION)
    assert cleaned.deleted_files > 0
    t = cleaned.instant
    assert _rows(hudi_rs(path)) == before
    assert _rows(assert_consistent(path)) == before
    assert _mdt_completion(path, t) < _data_completion(path, t, "clean")
    if name not in INDEX_GAPS_FROM_SPARK:
        # Partition stats as their last writes computed them: a clean leaves them (Java's does,
        # even where it deletes file groups a clustering replaced, which those stats still count).
        assert_index_consistent(path, partitions=False)
    # (An MDT compaction after the clean names its base file in each record's _hoodie_file_name.)
    assert _without_meta(read_partition_records(open_storage(path), "partition_stats")) == stats_before
    records = _blocks(path, t)
    mdt = path / ".hoodie/metadata/.hoodie/timeline"
    compacted = any(p.name.split(".")[0] > t for p in mdt.glob("*.compaction.requested"))
    deleted = {
        (part or ".", p.rsplit("/", 1)[-1])
        for part, paths in cleaned.plan.files_per_partition.items()
        for p in paths
    }
    assert {
        (key, n)
        for key, r in records["files"].items()
        for n, info in r["filesystemMetadata"].items()
        if info == {"size": 0, "isDeleted": True}
    } == deleted
    assert all(r["type"] == 2 for r in records["files"].values())  # no partition list
    assert "partition_stats" not in records
    if "column_stats" in partitions:
        stubs = records["column_stats"]
        assert {s["ColumnStatsMetadata"]["fileName"] for s in stubs.values()} == {n for _, n in deleted}
        for record in stubs.values():
            stats = record["ColumnStatsMetadata"]
            assert (stats["isDeleted"], stats["minValue"], stats["maxValue"]) == (True, None, None)
            assert stats["valueCount"] == stats["nullCount"] == stats["totalSize"] == -1
        # The stubs replace the deleted files' entries in the MDT's merged view.
        # An MDT compaction after the clean merged each stub over its file's entry: the key is gone
        # (Java's payload: a merged tombstone is a deleted record, which a compaction drops).
        live = read_partition_records(open_storage(path), "column_stats")
        for key in stubs:
            if compacted:
                assert key not in live
            else:
                assert live[key]["ColumnStatsMetadata"]["isDeleted"] is True
    listing = read_files_partition(open_storage(path))
    if compacted:  # the clean's log is in the MDT compaction's base file
        assert listing.base_file is not None and listing.log_files == ()
    else:
        assert f".hoodie/metadata/files/.files-0000-0_{t}.log.1_0-0-0" in listing.log_files


def test_lake_compact_and_clean_with_the_opt_in_then_check_finds_no_difference(
    hudi_table_zip, capsys
) -> None:
    path = _prepared(hudi_table_zip, "mor_avro_v9_txns_simple_meta")
    before = _rows(hudi_rs(path))
    opt = ["--option", "lake.metadata-table.maintain=true"]
    off = ["--option", "lake.metadata-table.maintain=false"]
    assert main(["compact", str(path), "--mode", "run", "--force", *off]) != 0  # refused
    assert "which this engine does not update" in capsys.readouterr().err
    assert main(["compact", str(path), "--mode", "run", "--force", *opt]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "COMPLETED"
    assert main(["clean", str(path), "--option", "hoodie.cleaner.commits.retained=1", *opt]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "CLEANED"
    assert main(["metadata-table", str(path), "--check"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["consistent"] is True and report["missing_files"] == report["extra_files"] == []
    assert _rows(hudi_rs(path)) == before


@pytest.mark.parametrize(
    "name",
    [
        "mor_avro_v9_txns_simple_meta",
        "mor_avro_v9_txns_complex_meta",
        "mor_avro_v9_txns_nonpart_meta",
        "mdt_basic_mor_avro_v8_nonpartitioned",
    ],
)
def test_the_records_of_our_compaction_commit_equal_those_java_wrote_for_spark_compactions(
    hudi_table_zip, name: str
) -> None:
    """For each compaction Spark ran on these tables: what our executor hands the MDT writer (the
    inflight compaction as the commit it becomes, its commit metadata, the timeline as it was) gives
    the records, file group for file group, of the MDT deltacommit Java wrote at its time; and Java
    wrote nothing to the record index or the secondary indexes there."""
    path = hudi_table_zip(name)
    table = LakeTable.open(path)
    timeline = table.timeline()
    kept = frozenset(table.config.properties["hoodie.table.metadata.partitions"].split(","))
    compared = 0
    for instant in timeline.instants:
        if not (instant.is_completed and timeline.is_compaction(instant)):
            continue
        theirs, schema = _javas(path, instant.timestamp)
        assert schema is not None
        key_indexes = [
            p for p in (path / ".hoodie/metadata").iterdir() if p.name.startswith(("record", "secondary"))
        ]
        assert key_indexes and not [f for p in key_indexes for f in p.glob(f"*_{instant.timestamp}.log.*")]
        # The timeline when the compaction committed: it inflight, what completed before it.
        inflight = dataclasses.replace(
            instant, state=State.INFLIGHT, action=Action.COMPACTION, completion_time=None
        )
        seen = [
            i for i in timeline.instants if i.is_completed and i.completion_time < instant.completion_time
        ]
        seen_timeline = dataclasses.replace(timeline, instants=tuple(sorted([*seen, inflight])))
        done = dataclasses.replace(inflight, action=Action.COMMIT)  # as compaction's _commit passes it
        change = change_of_commit(timeline.commit_metadata(instant))
        groups = index_records(
            open_storage(path), table.config, seen_timeline, done, change, kept & INDEX_PARTITIONS, schema
        )
        ours = flat_records(groups)
        assert ours == theirs, instant
        (log,) = (path / ".hoodie/metadata/files").glob(f".files-0000-0_{instant.timestamp}.log.*")
        (block,) = parse_log_bytes(log.read_bytes(), str(log))
        assert dict(files_records(change, schema)) == dict(decode_hfile_block(block))
        compared += 1
    assert compared >= 1


@pytest.mark.parametrize("crashed_first", [False, True])
@pytest.mark.parametrize("delta_commits, compacted", [("1", 1), (None, 0)])
def test_a_run_compaction_passes_its_options_on_to_the_mdt_services_after_the_commit(
    hudi_table_zip, delta_commits: str | None, compacted: int, crashed_first: bool
) -> None:
    """The options given to ``run_compaction`` reach its execution's MDT services too: with
    ``hoodie.metadata.compact.max.delta.commits=1`` the MDT is compacted after the data compaction;
    with the default (10) it is not (the MDT has 9 deltacommits since its last compaction then).
    The same when the run finishes a compaction a crashed run left inflight."""
    path = _prepared(hudi_table_zip, "mor_avro_v9_txns_simple_meta")
    options = dict(MAINTAIN)
    if delta_commits is not None:
        options["hoodie.metadata.compact.max.delta.commits"] = delta_commits
    if crashed_first:  # a crashed run's compaction: the next run finds nothing new, finishes it
        scheduled = schedule_compaction(LakeTable.open(path), options, force=True)
        with pytest.raises(SimulatedCrash):
            execute_compaction(
                LakeTable.open(path), scheduled.instant, options=options, fault=crash_at("file")
            )
    _, done = run_compaction(LakeTable.open(path), options, force=True)
    assert done.outcome is Outcome.COMPLETED
    if crashed_first:
        assert done.instant == scheduled.instant  # the crashed one, finished
    mdt = path / ".hoodie/metadata/.hoodie/timeline"
    requested = (p.name.split(".")[0] for p in mdt.glob("*.compaction.requested"))
    assert len([t for t in requested if t > done.instant]) == compacted


def test_an_execution_with_nothing_to_run_runs_no_mdt_service(hudi_table_zip) -> None:
    """The MDT's services follow a data compaction's commit only: an execution that finds no pending
    compaction (or the one asked for completed) leaves the MDT as it was, even with its compaction due
    (9 deltacommits since the last one, ``hoodie.metadata.compact.max.delta.commits=1``)."""
    path = _prepared(hudi_table_zip, "mor_avro_v9_txns_simple_meta")
    options = {**MAINTAIN, "hoodie.metadata.compact.max.delta.commits": "1"}
    mdt = path / ".hoodie/metadata/.hoodie/timeline"
    before = sorted(p.name for p in mdt.iterdir())
    assert execute_compaction(LakeTable.open(path), options=options).outcome is Outcome.NO_WORK
    assert sorted(p.name for p in mdt.iterdir()) == before


@pytest.mark.parametrize("delta_commits, compacted", [("1", 1), ("100", 0)])
def test_a_clean_passes_its_options_on_to_the_mdt_services_after_it(
    hudi_table_zip, delta_commits: str, compacted: int
) -> None:
    """As a compaction's: the options given to ``run_clean`` reach the MDT services that follow the
    clean instant (with ``hoodie.metadata.compact.max.delta.commits=1`` the MDT compacts after it,
    with 100 it does not, where the default, 10, would), and a dry run of the same clean runs none,
    even under ``lake.metadata-table.maintain=false`` (it writes nothing, so it refuses nothing)."""
    path = _prepared(hudi_table_zip, "mor_avro_v9_txns_simple_meta")
    run_compaction(LakeTable.open(path), MAINTAIN, force=True)  # a slice for the clean to remove
    options = {**MAINTAIN, **ONE_VERSION, "hoodie.metadata.compact.max.delta.commits": delta_commits}
    mdt = path / ".hoodie/metadata/.hoodie/timeline"
    before = sorted(p.name for p in mdt.iterdir())
    refuse = {**ONE_VERSION, "lake.metadata-table.maintain": "false"}
    dry = run_clean(LakeTable.open(path), refuse, dry_run=True)
    assert dry.deleted_files == 0 and sorted(p.name for p in mdt.iterdir()) == before
    cleaned = run_clean(LakeTable.open(path), options)
    assert cleaned.deleted_files > 0
    requested = (p.name.split(".")[0] for p in mdt.glob("*.compaction.requested"))
    assert len([t for t in requested if t > cleaned.instant]) == compacted


@pytest.mark.parametrize(
    "name, mdt_v6", [("cow_v9_txns_simple_meta", False), ("morparquet_v6_simplekeygen_nonhivestyle", True)]
)
def test_an_mdt_compaction_sweeps_the_temp_files_killed_writers_left_in_the_mdt(
    hudi_table_zip, name: str, mdt_v6: bool
) -> None:
    """A writer of ours killed between writing a file and renaming it leaves its temp file; one of
    an older version named like ``.<log name>.<hex>.tmp``, which Java's log file pattern takes for a
    log of file group ``.files-0000-0``. The MDT services sweep both forms (and only those) from
    the MDT's partitions and timeline folders when they compact it."""
    table = hudi_table_zip(name)
    if mdt_v6:
        add_v6_metadata_table(table)
    else:
        table = keep_files_partition_only(table)
    mdt = table / ".hoodie/metadata"
    hexes = [f"{n:032x}" for n in range(3)]
    timeline = "" if mdt_v6 else "/timeline"
    left = [
        f"files/.files-0000-0_20260101000000000.log.1_0-0-0.{hexes[0]}.tmp",
        f"files/_files-0000-0_20260101000000000.log.1_0-0-0.{hexes[1]}.tmp",
        f".hoodie{timeline}/_20260101000000000.deltacommit.{hexes[2]}.tmp",
    ]
    kept = ["files/_notes.tmp", f"files/.files-0000-0_x.log.1_0-0-0.{hexes[0]}.tmpx"]
    for rel in (*left, *kept):
        (mdt / rel).write_bytes(b"partial")
    before = read_snapshot(LakeTable.open(table))
    ids = before.column("id" if mdt_v6 else "txn_id").to_pylist()[:1]
    data = before.drop_columns([c for c in before.column_names if c.startswith("_hoodie_")])
    batch = data.filter(pa.compute.is_in(data.column("id" if mdt_v6 else "txn_id"), pa.array(ids)))
    options = {**MAINTAIN, "hoodie.metadata.compact.max.delta.commits": "1"}
    done = write(LakeTable.open(table), batch, "upsert", options=options)
    assert done.metadata_compaction is not None
    assert [rel for rel in left if (mdt / rel).exists()] == []
    assert [rel for rel in kept if (mdt / rel).exists()] == kept
    assert_consistent(table)
