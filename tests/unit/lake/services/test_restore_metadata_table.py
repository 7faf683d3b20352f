"""``lake restore`` under ``lake.metadata-table.maintain`` on v8/v9 tables whose MDT keeps ``files``,
``column_stats`` and ``partition_stats``.

On copies of Spark-written tables (v9 COW and MOR, v8 MOR): a savepoint at the latest completed
write, then two maintained writes (an upsert of existing keys with an insert, then an insert), then
the restore. Each rollback of the restore removes its write's MDT deltacommit while the write is
pending, so afterwards hudi-rs, listing through the MDT, reads the savepoint's rows as we do,
``--check`` finds no difference, the stats partitions equal a recomputation and no MDT file of a
rolled-back write is left. A restore that rolls back a completed instant an MDT compaction came
after (or an MDT partition's initialisation) is corrected by that rollback's own MDT deltacommit.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from crash_support import crashing, steps_of
from mdt_tables import keep_files_partition_only, mdt_digest, mdt_files_of
from savepoint_support import savepoint
from tree_digest import tree_digest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.compaction.executor import run_compaction
from airflow_lake_provider.lake.services.partition_commit.merge import merge_small_files
from airflow_lake_provider.lake.services.restore import restore
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import write
from tests.unit.lake.services.partition_commit.test_merge_metadata_table import TARGET, _small_files
from tests.unit.lake.table.metadata.test_commit import (
    INDEXES,
    MAINTAIN,
    TABLES,
    _batch,
    _rows,
    assert_consistent,
    assert_index_consistent,
    hudi_rs,
)

OPT = ["--option", "lake.metadata-table.maintain=true"]


def _way_out(path: Path) -> str:
    return (
        "To drop the metadata table as Hudi does, run with option hoodie.metadata.enable=false (--option, "
        f"operator options or the lake connection's extra) or run 'lake metadata-table {path} --drop'; "
        "Spark/Flink writers of this table must run with hoodie.metadata.enable=false too, or their next "
        "commit rebuilds the metadata table from a full listing"
    )


def _prepared(path: Path, name: str) -> tuple[str, list[list[str]], list[str]]:
    """Savepoint the latest completed write, then two maintained writes: the savepoint, the rows
    after each step (savepoint, first write, second write) and the two writes' instants."""
    key, ordering, _partition, new_keys = TABLES[name]
    table = LakeTable.open(path)
    point = table.timeline().completed_commits[-1].timestamp
    savepoint(table, point)
    rows = [_rows(assert_consistent(path))]
    snapshot = read_snapshot(LakeTable.open(path))
    existing = snapshot.column(key).to_pylist()[:2]
    upsert = _batch(snapshot, key, ordering, [0, 1, 0], [*existing, new_keys[0]])
    t1 = write(LakeTable.open(path), upsert, "upsert", options=MAINTAIN).instant
    rows.append(_rows(assert_consistent(path)))
    insert = _batch(snapshot, key, ordering, [1], [new_keys[1]])
    t2 = write(LakeTable.open(path), insert, "insert", options=MAINTAIN).instant
    rows.append(_rows(assert_consistent(path)))
    assert rows[0] != rows[1] != rows[2]
    return point, rows, [t1, t2]


@pytest.mark.parametrize("name", sorted(TABLES))
def test_restore_keeps_the_metadata_table(hudi_table_zip, capsys, name: str) -> None:
    path = keep_files_partition_only(hudi_table_zip(name), INDEXES)
    mdt_before = mdt_digest(path)
    point, rows, writes = _prepared(path, name)
    assert all(mdt_files_of(path, t) for t in writes)
    before = tree_digest(path)
    off = ["--option", "lake.metadata-table.maintain=false"]
    assert main(["restore", str(path), "--savepoint", point, *off]) == 1  # the refuse policy
    assert "restore refused" in capsys.readouterr().err
    assert tree_digest(path) == before

    assert main(["restore", str(path), "--savepoint", point]) == 0  # kept by default
    assert capsys.readouterr().out.startswith(f"restored savepoint {point} at ")
    for t in writes:
        assert mdt_files_of(path, t) == []  # its deltacommit and log files are gone from the MDT
        assert not list((path / ".hoodie/timeline").glob(f"{t}*"))
    # The MDT is byte for byte what it was at the savepoint: timeline, log and base files.
    assert mdt_digest(path) == mdt_before
    assert _rows(hudi_rs(path)) == rows[0]
    assert _rows(assert_consistent(path)) == rows[0]
    assert_index_consistent(path)
    assert main(["metadata-table", str(path), "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["consistent"] is True


def test_a_restore_across_an_mdt_compaction_is_corrected_and_one_with_a_record_index_is_refused(
    hudi_table_zip, capsys
) -> None:
    """Spark's last deltacommit of this table was followed by an MDT compaction (its records are in
    the MDT's base files now): the restore's rollback of it keeps its MDT deltacommit and records,
    in its own, the files it deletes (their column stats marked deleted, the partition's stats
    recomputed). A record index (whose keys a restore would move back) is refused by the policy."""
    template = keep_files_partition_only(hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned"), INDEXES)
    folded = "20260101054337037"
    timeline = LakeTable.open(template).timeline()
    point = max(i.timestamp for i in timeline.completed_commits if i.timestamp < folded)
    savepoint(LakeTable.open(template), point)
    path = template.parent / "restored"
    shutil.copytree(template, path)
    at_point = _rows(read_snapshot(LakeTable.open(path), as_of=point))
    assert main(["restore", str(path), "--savepoint", point, *OPT]) == 0
    assert mdt_files_of(path, folded) != []
    assert _rows(hudi_rs(path)) == at_point
    assert _rows(assert_consistent(path)) == at_point
    assert_index_consistent(path)
    # The record index: refused, nothing changed.
    path = template
    props = path / ".hoodie/hoodie.properties"
    key = "hoodie.table.metadata.partitions="
    props.write_text(props.read_text().replace(f"\n{key}", f"\n{key}record_index,"))
    before = tree_digest(path)
    capsys.readouterr()
    assert main(["restore", str(path), "--savepoint", point, *OPT]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"lake: error: restore refused: {path} has Hudi's metadata table")
    assert (
        "lake.metadata-table.maintain=true cannot keep it for this action: partitions [record_index, " in err
    )
    assert err.strip().endswith(_way_out(path))
    assert tree_digest(path) == before
    # The way out the refusal names: the restore drops the metadata table (its record index too), then
    # restores.
    assert main(["restore", str(path), "--savepoint", point, "--option", "hoodie.metadata.enable=false"]) == 0
    assert not (path / ".hoodie" / "metadata").exists()
    assert LakeTable.open(path).timeline().last_completed_commit.timestamp == point  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["cow_v9_txns_simple_meta", "mor_avro_v9_txns_simple_meta"])
def test_a_crash_at_every_durable_step_of_the_restore_leaves_both_readers_agreeing(
    hudi_table_zip, tmp_path: Path, name: str
) -> None:
    """A crash after any durable step of the restore (its plan, each rollback's plan, the write's
    completed file, its files, its MDT deltacommit's files, its pending files, the rollback, the
    restore completed): hudi-rs, listing through the MDT, reads what we read, the files partition
    equals the listing, and those rows are the savepoint's or a write's after it (a restore rolls
    back one write at a time, newest first); the next restore finishes it, to the savepoint's rows,
    with no MDT file of a rolled-back write left."""
    template = keep_files_partition_only(hudi_table_zip(name), INDEXES)
    point, rows, writes = _prepared(template, name)
    counting = crashing(LakeTable.open(_copy(template, tmp_path / "count")))
    restore(counting, point, MAINTAIN)
    steps = steps_of(counting)
    assert sum(s.endswith(".rollback") for s in steps) == 2 and any(s.endswith(".restore") for s in steps)
    for step in range(1, len(steps) + 1):
        path = _copy(template, tmp_path / f"crash{step}")
        with pytest.raises(SimulatedCrash):
            restore(crashing(LakeTable.open(path), step), point, MAINTAIN)
        assert _rows(assert_consistent(path)) in rows, (step, steps[step - 1])
        restore(LakeTable.open(path), point, MAINTAIN)  # finishes the pending restore
        assert _rows(assert_consistent(path)) == rows[0], (step, steps[step - 1])
        assert_index_consistent(path)
        assert [f for t in writes for f in mdt_files_of(path, t)] == [], (step, steps[step - 1])


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# The MDT's own services held off (the table starts 7 MDT deltacommits after Java's compaction, these
# tests add 4-5): a restore over an MDT compaction is refused (tested below), and an MDT clean
# (keeping min(retained, 20) commits) is no part of the savepoint's MDT these tests compare with.
UNCOMPACTED = {
    **MAINTAIN,
    "hoodie.metadata.compact.max.delta.commits": "100",
    "hoodie.cleaner.commits.retained": "20",
}
ONE_VERSION = {
    **UNCOMPACTED,
    "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
    "hoodie.cleaner.fileversions.retained": "1",
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_a_restore_over_a_maintained_compaction_and_clean_keeps_the_metadata_table(
    hudi_table_zip, name: str
) -> None:
    """After the savepoint: an upsert, a compaction (merge-on-read), another upsert, then a clean
    keeping one file version, which deletes files of the first upsert. The restore rolls back both
    upserts and the compaction, whose MDT deltacommits go; the clean stays, and so does its MDT
    deltacommit: its deletions of files whose additions are gone are deletions of nothing, so the
    MDT lists exactly the files on disk, for hudi-rs as for ``--check``."""
    key, ordering, _partition, _new = TABLES[name]
    path = keep_files_partition_only(hudi_table_zip(name), INDEXES)
    table = LakeTable.open(path)
    point = table.timeline().completed_commits[-1].timestamp
    savepoint(table, point)
    before = _rows(assert_consistent(path))
    mdt_before = mdt_digest(path)
    snapshot = read_snapshot(LakeTable.open(path))
    upsert = _batch(snapshot, key, ordering, [0, 1], snapshot.column(key).to_pylist()[:2])
    undone = [write(LakeTable.open(path), upsert, "upsert", options=UNCOMPACTED).instant]
    if table.config.is_mor:
        _scheduled, compacted = run_compaction(LakeTable.open(path), UNCOMPACTED, force=True)
        assert compacted.instant is not None
        undone.append(compacted.instant)
    undone.append(write(LakeTable.open(path), upsert, "upsert", options=UNCOMPACTED).instant)
    cleaned = run_clean(LakeTable.open(path), ONE_VERSION)
    assert cleaned.instant is not None and cleaned.deleted_files > 0
    assert _rows(assert_consistent(path)) != before

    result = restore(LakeTable.open(path), point, MAINTAIN)
    assert result.rolled_back == tuple(reversed(undone))
    assert [f for t in undone for f in mdt_files_of(path, t)] == []
    assert any(n.endswith(".deltacommit") for n in mdt_files_of(path, cleaned.instant))
    # The MDT is what it was at the savepoint plus the clean's deltacommit, nothing else.
    added = set(mdt_digest(path)) - set(mdt_before)
    assert sorted(added) == mdt_files_of(path, cleaned.instant)
    assert set(mdt_before) <= set(mdt_digest(path))
    assert _rows(assert_consistent(path)) == before  # hudi-rs through the MDT too
    assert_index_consistent(path)


def test_an_mdt_partition_initialised_after_the_instants_a_restore_rolls_back_is_corrected(
    hudi_table_zip,
) -> None:
    """An MDT partition built after a write (Hudi's indexer initialises it from a listing, at one of
    its ``0000...`` instant times, before every data instant's, completed later) holds that write's
    records in files no MDT deltacommit of the write names: removing the write's deltacommit would
    leave them, so each rollback of the restore keeps it and records the files it deletes in its own.
    (The initialisation is made by hand as Hudi's looks on disk: its timeline files, an empty log
    file per file group, completed after the writes.)"""
    name = "cow_v9_txns_simple_meta"
    path = keep_files_partition_only(hudi_table_zip(name), INDEXES)
    point, rows, writes = _prepared(path, name)
    mdt = path / ".hoodie/metadata"
    init = "00000000000000005"
    timeline = mdt / ".hoodie/timeline"
    for suffix in ("deltacommit.requested", "deltacommit.inflight"):
        (timeline / f"{init}.{suffix}").write_bytes((timeline / f"00000000000000003.{suffix}").read_bytes())
    (done,) = timeline.glob("00000000000000003_*.deltacommit")
    (timeline / f"{init}_{int(writes[-1]) + 1}.deltacommit").write_bytes(done.read_bytes())
    (empty,) = (mdt / "column_stats").glob(".col-stats-0000-0_00000000000000001.log.*")
    (mdt / "column_stats" / f".col-stats-0000-0_{init}.log.1_0-0-0").write_bytes(empty.read_bytes())
    result = restore(LakeTable.open(path), point, MAINTAIN)
    assert list(result.rolled_back) == writes[::-1]
    assert all(mdt_files_of(path, t) != [] for t in writes)  # kept: corrected, not forgotten
    assert _rows(hudi_rs(path)) == rows[0]
    assert _rows(assert_consistent(path)) == rows[0]
    assert_index_consistent(path)


def test_a_restore_undoes_a_maintained_merge_of_small_files(hudi_table_zip) -> None:
    """After the savepoint: three small inserts, then partition commit's merge of the partition's
    small files (a clustering replacecommit with its MDT deltacommit). The restore rolls back the
    merge and the inserts; the MDT is the savepoint's again, byte for byte."""
    name = "mor_avro_v9_txns_simple_meta"
    path = keep_files_partition_only(hudi_table_zip(name), INDEXES)
    table = LakeTable.open(path)
    point = table.timeline().completed_commits[-1].timestamp
    savepoint(table, point)
    before = _rows(assert_consistent(path))
    mdt_before = mdt_digest(path)
    partition, _merged_rows = _small_files(path, name, UNCOMPACTED)
    merged = merge_small_files(LakeTable.open(path), partition, TARGET, options=UNCOMPACTED)
    assert merged.instant is not None and mdt_files_of(path, merged.instant)

    result = restore(LakeTable.open(path), point, UNCOMPACTED)
    assert result.rolled_back[0] == merged.instant and len(result.rolled_back) == 4
    assert mdt_digest(path) == mdt_before
    assert _rows(assert_consistent(path)) == before  # hudi-rs through the MDT too
    assert_index_consistent(path)


# -- the MDT's own services after a restore or rollback ------------------------------------------------
DUE_NOW = ["--option", "hoodie.metadata.compact.max.delta.commits=1"]


def _mdt_compactions_after(path: Path, instant: str) -> list[str]:
    """The MDT's completed compactions (``<t>_<completion>.commit``) at times after ``instant``."""
    timeline = path / ".hoodie/metadata/.hoodie/timeline"
    return sorted(p.name for p in timeline.glob("*.commit") if p.name.split("_")[0] > instant)


@pytest.mark.parametrize("how", ["restore", "rollback"])
def test_a_restore_or_rollback_runs_the_metadata_tables_services_after_it(
    hudi_table_zip, capsys, how: str
) -> None:
    """Under the default policy, with ``hoodie.metadata.compact.max.delta.commits=1``: once the
    restore (or the forced rollback of the last write) completed, the MDT is compacted, as after a
    write; hudi-rs, listing through its new base files, reads the rows we read, and ``--check``
    finds no difference."""
    name = "mor_avro_v9_txns_simple_meta"
    path = keep_files_partition_only(hudi_table_zip(name), INDEXES)
    point, rows, writes = _prepared(path, name)
    if how == "restore":
        assert main(["restore", str(path), "--savepoint", point, *DUE_NOW]) == 0
        instant = capsys.readouterr().out.split(" at ")[1].split(":")[0]
        expected = rows[0]
    else:
        assert main(["rollback", str(path), "--instant", writes[-1], "--force", *DUE_NOW]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"rolled back deltacommit {writes[-1]} at "), out
        instant = out.split(" at ")[1].split(":")[0]
        expected = rows[1]
    timeline = path / ".hoodie/timeline"
    assert len(list(timeline.glob(f"{instant}_*.{how}"))) == 1
    assert len(_mdt_compactions_after(path, instant)) == 1
    assert _rows(hudi_rs(path)) == expected
    assert _rows(assert_consistent(path)) == expected
    assert main(["metadata-table", str(path), "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["consistent"] is True
