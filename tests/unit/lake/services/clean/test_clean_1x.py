"""Clean and savepoints on copies of the Spark-written Hudi 1.x tables (versions 8 and 9): hudi-rs
reads the result exactly as we do, every retained instant reads as before, the files deleted are
exactly the ones the clean metadata names, and every timeline file we write is a layout-2 file that
decodes under Hudi 1.x's schemas (for clean and savepoint, the same as the shipped ones)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from hudi import HudiReadOptions, HudiTableBuilder

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import SnapshotCleanedError
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.clean.result import Outcome
from airflow_lake_provider.lake.services.savepoint import create_savepoint, delete_savepoint, savepoints
from airflow_lake_provider.lake.table.metadata.policy import drop_metadata_table
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from tests.tree_digest import tree_digest

RETAIN_ONE = {"hoodie.cleaner.commits.retained": "1"}
# Tables without a metadata table, with the files a clean retaining one commit deletes (replaced
# file groups and slices older than the last one before the earliest commit to retain: base files
# and, on MOR, the log files sliced to them by completion time). Two-commit tables keep everything.
NOMETA = {
    "cow_v8_nonpartitioned": 0,
    "cow_v8_complexkeygen_hivestyle": 0,
    "cow_v8_simplekeygen_hivestyle_no_metafields": 0,
    "cow_v9_txns_simple_nometa": 12,
    "cow_v9_txns_complex_nometa": 12,
    "cow_v9_txns_nonpart_nometa": 9,
    "mor_avro_v9_txns_simple_nometa": 14,
    "mor_avro_v9_txns_complex_nometa": 14,
    "mor_avro_v9_txns_nonpart_nometa": 10,
}


def _hudi_rs(path: Path, as_of: str | None = None) -> list[str]:
    table = HudiTableBuilder.from_base_uri(str(path)).build()
    batches = table.read(HudiReadOptions().with_as_of_timestamp(as_of)) if as_of else table.read()
    return sorted(repr(r) for r in pa.Table.from_batches(batches).to_pylist()) if batches else []


def _ours(table: LakeTable, as_of: str | None = None) -> list[str]:
    return sorted(repr(r) for r in read_snapshot(table, as_of).to_pylist())


def _data_files(path: Path) -> set[str]:
    found = set()
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        found |= {os.path.relpath(os.path.join(root, f), path) for f in files if not f.startswith(".hoodie_")}
    return found


def _decoded(path: Path, stem: str) -> dict:
    """The one record of an Avro timeline file, read under the shipped schema ``stem`` (Hudi 1.x's);
    the file's own writer schema must be that schema."""
    shipped = timeline_avro.schema(f"org.apache.hudi.avro.model.{stem}")
    with open(path, "rb") as fh:
        reader = fastavro.reader(fh, reader_schema=shipped)
        (record,) = list(reader)
    assert reader.writer_schema["name"] == f"org.apache.hudi.avro.model.{stem}"
    assert [f["name"] for f in reader.writer_schema["fields"]] == [f["name"] for f in shipped["fields"]]
    return record


@pytest.mark.parametrize("name", sorted(NOMETA))
def test_clean_of_a_spark_written_1x_table_reads_the_same_in_hudi_rs(
    name: str, hudi_table_zip: Callable[[str], Path]
) -> None:
    path = hudi_table_zip(name)
    table = LakeTable.open(path)
    commits = [c.timestamp for c in table.timeline().completed_commits]
    before = {c: _ours(table, c) for c in commits}
    files = _data_files(path)

    result = run_clean(table, RETAIN_ONE)

    assert result.deleted_files == NOMETA[name] and result.failed_files == 0
    deleted = files - _data_files(path)
    assert _data_files(path) <= files and len(deleted) == NOMETA[name]
    assert _ours(table) == _hudi_rs(path) == before[commits[-1]]
    if not NOMETA[name]:
        assert result.outcome is Outcome.NO_WORK and table.timeline().last_completed(Action.CLEAN) is None
        return
    assert result.outcome is Outcome.CLEANED
    # The last commit before the earliest retained one stays readable too (a query begun before it).
    retained = commits[-2:]
    for c in retained:
        assert _ours(table, c) == _hudi_rs(path, c) == before[c], c
    for c in commits[:-2]:
        with pytest.raises(SnapshotCleanedError):
            read_snapshot(table, c)
    # Layout 2: requested, inflight, then <requested>_<completion>.clean; metadata names the deletes.
    (clean,) = table.timeline().filter([Action.CLEAN])
    assert clean.completion_time is not None and clean.completion_time > clean.timestamp
    folder = path / table.layout.folder
    names = {n for n in os.listdir(folder) if n.startswith(clean.timestamp)}
    assert names == {
        f"{clean.timestamp}.clean.requested",
        f"{clean.timestamp}.clean.inflight",
        f"{clean.timestamp}_{clean.completion_time}.clean",
    }
    plan = _decoded(folder / f"{clean.timestamp}.clean.requested", "HoodieCleanerPlan")
    assert plan == _decoded(folder / f"{clean.timestamp}.clean.inflight", "HoodieCleanerPlan")
    assert plan["earliestInstantToRetain"]["timestamp"] == commits[-1]
    planned = {
        os.path.relpath(info["filePath"], path)
        for infos in plan["filePathsToBeDeletedPerPartition"].values()
        for info in infos
    }
    assert planned == deleted
    meta = _decoded(folder / f"{clean.timestamp}_{clean.completion_time}.clean", "HoodieCleanMetadata")
    assert meta["earliestCommitToRetain"] == commits[-1] and meta["totalFilesDeleted"] == len(deleted)
    named = {
        os.path.join(part, f) if part else f
        for part, p in meta["partitionMetadata"].items()
        for f in p["successDeleteFiles"]
    }
    assert named == deleted


def test_savepoint_on_a_spark_written_v9_mor_table_keeps_its_read_through_a_clean(
    hudi_table_zip: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``lake savepoint create`` on a v9 MOR table, a clean retaining one commit, the read as of the
    savepoint is whole and equal in hudi-rs; ``lake savepoint delete`` frees it for the next clean."""
    path = hudi_table_zip("mor_avro_v9_txns_simple_nometa")
    table = LakeTable.open(path)
    commits = [c.timestamp for c in table.timeline().completed_commits]
    saved = commits[3]
    as_of_saved = _ours(table, saved)

    assert main(["savepoint", "create", str(path), "--instant", saved]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"savepoint {saved}: ")
    (point,) = table.timeline().savepoints()
    assert point.timestamp == saved and point.completion_time is not None
    others = [i for i in table.timeline().instants if i.action is not Action.SAVEPOINT]
    assert point.completion_time > max(t for i in others for t in (i.timestamp, i.completion_time or ""))
    folder = path / table.layout.folder
    assert {n for n in os.listdir(folder) if ".savepoint" in n} == {
        f"{saved}.savepoint.inflight",
        f"{saved}_{point.completion_time}.savepoint",
    }
    record = _decoded(folder / f"{saved}_{point.completion_time}.savepoint", "HoodieSavepointMetadata")
    kept = {
        os.path.join(p, f) for p, m in record["partitionMetadata"].items() for f in m["savepointDataFile"]
    }
    assert kept and kept <= _data_files(path)

    result = run_clean(table, RETAIN_ONE)
    assert result.outcome is Outcome.CLEANED and result.deleted_files > 0
    assert kept <= _data_files(path)
    assert _ours(table, saved) == _hudi_rs(path, saved) == as_of_saved
    assert _ours(table) == _hudi_rs(path)

    assert main(["savepoint", "delete", str(path), "--instant", saved]) == 0
    assert {n for n in os.listdir(folder) if ".savepoint" in n} == set()
    assert table.timeline().savepoints() == []


def test_clean_of_a_v8_table_with_a_metadata_table_is_refused_or_drops_it_first(
    hudi_table_zip: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """The refuse and drop policies on version 8: refused with nothing written
    (``lake.metadata-table.maintain=false``), or (``hoodie.metadata.enable=false``) the MDT dropped
    as Hudi 1.x does, then cleaned; hudi-rs, which reads v8 through the MDT when there is one, reads
    what we read."""
    path = hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")
    before = tree_digest(path)
    off = ["--option", "lake.metadata-table.maintain=false"]
    assert main(["clean", str(path), "--option", "hoodie.cleaner.commits.retained=1", *off]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"lake: error: clean refused: {path} has Hudi's metadata table (partitions [")
    assert tree_digest(path) == before

    argv = ["clean", str(path), "--option", "hoodie.cleaner.commits.retained=1"]
    assert main([*argv, "--option", "hoodie.metadata.enable=false"]) == 0
    assert '"metadata_table_dropped"' in capsys.readouterr().out
    table = LakeTable.open(path)
    assert not (path / ".hoodie" / "metadata").exists()
    assert table.config.properties["hoodie.table.metadata.partitions"] == ""
    assert _ours(table) == _hudi_rs(path)
    for c in table.timeline().completed_commits[-2:]:
        assert _ours(table, c.timestamp) == _hudi_rs(path, c.timestamp)


@pytest.mark.parametrize("version", [8, 9])
def test_savepoint_store_files_of_layout_2_and_a_half_made_one(tmp_path: Path, version: int) -> None:
    """The store writes ``<t>.savepoint.inflight`` then ``<t>_<completion>.savepoint`` (completion
    after every time on the timeline), finishes a half-made one, and removes it by its own names."""
    table = LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        table_version=version,
    )
    commit = write(table, pa.table({"id": ["a"], "ts": pa.array([1], pa.int64())}), "upsert").instant
    folder = table.base_path / table.layout.folder
    table.store.create_requested(table.clock.next(after=table.timeline().latest_time), Action.COMMIT)
    latest = table.timeline().latest_time
    (folder / f"{commit}.savepoint.inflight").write_bytes(b"")  # a create that died half way
    point = create_savepoint(table, commit, user="u")
    completed = table.timeline().savepoints()[0]
    assert completed == Instant(commit, State.COMPLETED, Action.SAVEPOINT, completed.completion_time)
    assert completed.completion_time is not None and completed.completion_time > latest
    assert point.instant == commit
    assert sorted(n for n in os.listdir(folder) if ".savepoint" in n) == [
        f"{commit}.savepoint.inflight",
        f"{commit}_{completed.completion_time}.savepoint",
    ]
    delete_savepoint(table, commit)
    assert [n for n in os.listdir(folder) if ".savepoint" in n] == []
    assert table.timeline().get(commit) is not None  # the commit itself is untouched


def test_a_pending_clustering_holds_the_earliest_commit_to_retain_back_as_a_pending_replacecommit_does(
    tmp_path: Path,
) -> None:
    """Layout 2 gives clustering its own action (``<t>.clustering.requested``), where layout 1 has a
    pending ``replacecommit``: a clustering pending since before the earliest commit to retain may
    still read older slices, so the clean retains from the last commit before it."""
    table = LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        table_version=8,
    )

    def upsert(ts: int) -> str:
        return write(table, pa.table({"id": ["a"], "ts": pa.array([ts], pa.int64())}), "upsert").instant

    commits = [upsert(ts) for ts in range(3)]
    plan = {"operationType": "CLUSTER", "clusteringPlan": None, "extraMetadata": None, "version": 1}
    clustering = table.store.create_requested(
        table.clock.next(after=table.timeline().latest_time),
        Action.CLUSTERING,
        timeline_avro.write_avro(timeline_avro.REQUESTED_REPLACE_METADATA, plan),
    )
    commits += [upsert(ts) for ts in range(3, 5)]
    assert commits[2] < clustering.timestamp < commits[3]

    result = run_clean(table, RETAIN_ONE)

    assert result.outcome is Outcome.CLEANED
    assert result.plan is not None and result.plan.earliest_instant_to_retain.timestamp == commits[2]
    assert sorted(f.rsplit("_", 1)[1][:17] for f in _data_files(tmp_path / "t")) == commits[1:]


# (table, rewrite its rows first, files the clean deletes): an overwrite table's last commit is the
# replacecommit (its replaced file groups are cleaned once a later commit is the one retained).
WITH_MDT = [
    ("cow_v9_txns_simple_meta", False, 12),
    ("cow_v9_txns_simple_overwrite", False, 0),
    ("cow_v9_txns_simple_overwrite", True, None),
    ("mor_avro_v9_txns_complex_meta", False, 14),
    ("mor_avro_v9_txns_simple_overwrite", True, None),
    ("mor_avro_v9_nonpartitioned_rollback", False, 0),
]
NO_MDT = {"hoodie.metadata.enable": "false"}


@pytest.mark.parametrize(("name", "rewrite", "deletes"), WITH_MDT)
def test_clean_of_a_spark_written_v9_table_after_dropping_its_metadata_table(
    name: str, rewrite: bool, deletes: int | None, hudi_table_zip: Callable[[str], Path]
) -> None:
    """``hoodie.metadata.enable=false``: the MDT is dropped as Hudi 1.x drops it, then the table is
    cleaned; hudi-rs (listing storage now) reads the snapshot and every retained instant as we do,
    and the files gone are exactly the ones the clean metadata names."""
    path = hudi_table_zip(name)
    table = LakeTable.open(path)
    if rewrite:  # upsert the rows it holds (the writer refuses a record index: drop the MDT first)
        assert drop_metadata_table(table) is not None
        rows = read_snapshot(table)
        write(
            table,
            rows.drop_columns([c for c in rows.column_names if c.startswith("_hoodie_")]),
            "upsert",
            options=NO_MDT,
        )
    commits = [c.timestamp for c in table.timeline().completed_commits]
    before = {c: _ours(table, c) for c in commits[-2:]}
    files = _data_files(path)
    replaced = {
        (part, fid)
        for c in table.timeline().completed_commits
        if c.action is Action.REPLACECOMMIT
        for part, ids in (table.timeline().commit_metadata(c).partition_to_replace_file_ids or {}).items()
        for fid in ids
    }

    result = run_clean(table, {**RETAIN_ONE, **NO_MDT})

    assert not (path / ".hoodie" / "metadata").exists()
    assert table.config.properties["hoodie.table.metadata.partitions"] == ""
    assert result.failed_files == 0
    deleted = files - _data_files(path)
    assert len(deleted) == result.deleted_files
    if deletes is not None:
        assert result.deleted_files == deletes
    else:  # every file of the groups the replacecommit replaced, now older than the retained commit
        assert replaced and result.deleted_files > 0
        gone = {(os.path.dirname(f), os.path.basename(f).lstrip(".").split("_")[0]) for f in deleted}
        assert replaced <= gone
    for c, rows in before.items():
        assert _ours(table, c) == _hudi_rs(path, c) == rows, c
    assert _ours(table) == _hudi_rs(path) == before[commits[-1]]
    if result.outcome is Outcome.CLEANED:
        clean = table.timeline().last_completed(Action.CLEAN)
        meta = _decoded(path / table.layout.instant_path(clean), "HoodieCleanMetadata")
        named = {
            os.path.join(part, f) if part else f
            for part, p in meta["partitionMetadata"].items()
            for f in p["successDeleteFiles"]
        }
        assert named == deleted


def _plain(node: object) -> object:
    """A parsed fastavro schema as plain Avro JSON (its bookkeeping keys dropped)."""
    if isinstance(node, dict):
        return {k: _plain(v) for k, v in node.items() if not k.startswith("__")}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


def test_java_avro_reads_our_v8_clean_and_savepoint_files_under_hudis_schemas(
    tmp_path: Path, spark: Any
) -> None:
    """Java's Avro (in Spark's JVM) opens the requested, inflight and completed clean files and the
    savepoint file of a v8 table, resolving each to the shipped (Hudi 1.x) schema of its record."""
    import json

    table = LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        table_version=8,
    )
    commits = [
        write(table, pa.table({"id": ["a"], "ts": pa.array([ts], pa.int64()), "p": ["x"]}), "upsert").instant
        for ts in range(4)
    ]
    create_savepoint(table, commits[3], user="u", comment="keep")
    done = run_clean(table, RETAIN_ONE)
    assert done.outcome is Outcome.CLEANED and done.deleted_files == 2
    timeline = table.timeline()
    clean = timeline.last_completed(Action.CLEAN)
    (point,) = timeline.savepoints()
    folder = tmp_path / "t" / table.layout.folder
    files = {
        "requested": (folder / f"{clean.timestamp}.clean.requested", timeline_avro.CLEANER_PLAN),
        "inflight": (folder / f"{clean.timestamp}.clean.inflight", timeline_avro.CLEANER_PLAN),
        "completed": (folder / table.layout.file_name(clean), timeline_avro.CLEAN_METADATA),
        "savepoint": (folder / table.layout.file_name(point), timeline_avro.SAVEPOINT_METADATA),
    }
    jvm = spark.sparkContext._jvm
    read = {}
    for what, (file, record_name) in files.items():
        shipped = jvm.org.apache.avro.Schema.Parser().parse(
            json.dumps(_plain(timeline_avro.schema(record_name)))
        )
        reader = jvm.org.apache.avro.file.DataFileReader(
            jvm.java.io.File(str(file)), jvm.org.apache.avro.generic.GenericDatumReader(None, shipped)
        )
        record = reader.next()
        assert not reader.hasNext()
        reader.close()
        read[what] = json.loads(record.toString())
    assert read["requested"] == read["inflight"]
    assert read["requested"]["earliestInstantToRetain"] == {
        "timestamp": commits[3],
        "action": "commit",
        "state": "COMPLETED",
    }
    assert len(read["requested"]["filePathsToBeDeletedPerPartition"]["x"]) == 2
    assert read["completed"]["earliestCommitToRetain"] == commits[3]
    assert read["completed"]["totalFilesDeleted"] == 2
    assert sorted(read["completed"]["partitionMetadata"]["x"]["successDeleteFiles"]) == sorted(
        p.rsplit("/", 1)[1] for p in done.plan.files_per_partition["x"]
    )
    assert (read["savepoint"]["savepointedBy"], read["savepoint"]["comments"]) == ("u", "keep")
    assert read["savepoint"]["partitionMetadata"]["x"]["savepointDataFile"] == [
        f.rsplit("/", 1)[1] for f in sorted(savepoints(timeline)[0].files)
    ]


def test_a_log_that_completed_after_a_later_base_file_stays_with_that_slice(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    """Version 9 slices logs by completion time: a log named by a deltacommit requested before a
    compaction but completed after it belongs to the compaction's slice, so a clean that deletes the
    slice before keeps it. (The deltacommit's completion time is moved past the compaction's here:
    a write that was still running when Spark scheduled the compaction.)"""
    path = hudi_table_zip("mor_avro_v9_txns_simple_nometa")
    folder = path / ".hoodie" / "timeline"
    delta, compaction = "20260307135835748", "20260307135839895"
    (done,) = [n for n in os.listdir(folder) if n.startswith(f"{delta}_")]
    (folder / done).rename(folder / f"{delta}_20260307135839900.deltacommit")
    log = "region=apac/.9c6ed25b-6c9d-4793-ad27-1c8518086b6a-0_20260307135835748.log.1_0-38-83"
    old_base = "region=apac/9c6ed25b-6c9d-4793-ad27-1c8518086b6a-0_2-3-8_20260307135827749.parquet"
    new_base = "region=apac/9c6ed25b-6c9d-4793-ad27-1c8518086b6a-0_1-62-130_20260307135839895.parquet"
    table = LakeTable.open(path)
    group = table.file_system_view().groups[("region=apac", "9c6ed25b-6c9d-4793-ad27-1c8518086b6a-0")]
    assert [(s.base_instant, [f.file_name for f in s.log_files]) for s in group.slices] == [
        ("20260307135827749", []),
        (compaction, [log.split("/")[1]]),
    ]
    before = _ours(table)

    # Two commits retained: the earliest is the clustering that replaces this group (at 840454), so
    # the group is not wholly cleaned; its slice before the compaction's is.
    result = run_clean(table, {"hoodie.cleaner.commits.retained": "2"})

    assert result.outcome is Outcome.CLEANED
    assert result.plan is not None and result.plan.earliest_instant_to_retain.timestamp == "20260307135840454"
    files = _data_files(path)
    assert old_base not in files and {log, new_base} <= files
    assert _ours(table) == _hudi_rs(path) == before
