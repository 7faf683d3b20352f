"""``lake rollback`` of a chosen completed instant under ``lake.metadata-table.maintain``.

On copies of Spark-written v8/v9 tables whose MDT keeps ``files``, ``column_stats`` and
``partition_stats``: a maintained write, an upsert of existing keys and an insert of new ones,
then its forced rollback. The rollback removes the write's MDT deltacommit (timeline files and log
files) after the write's completed file is gone and before its pending files go, as the undo of a
failed write does (Hudi 1.x readers skip the MDT deltacommit of a pending data instant; Java writes
an MDT rollback instant instead, which lists the same files). hudi-rs, listing through the MDT,
then reads the rows it read before the write, as we do; ``--check`` finds no difference and the
stats partitions equal a recomputation. A completed instant an MDT compaction has already folded
into the MDT's base files is corrected by the rollback's own MDT deltacommit instead.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from crash_support import crashing, steps_of
from mdt_tables import keep_files_partition_only, mdt_files_of

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.storage import SimulatedCrash, open_storage
from airflow_lake_provider.lake.table.metadata.files import read_files_partition, read_partition_records
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import rollback, rollback_instant_locked
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import write
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


@pytest.mark.parametrize("name", sorted(TABLES))
def test_rollback_of_a_completed_write_keeps_the_metadata_table(hudi_table_zip, capsys, name: str) -> None:
    key, ordering, _partition, new_keys = TABLES[name]
    path = keep_files_partition_only(hudi_table_zip(name), INDEXES)
    before = _rows(hudi_rs(path))
    assert _rows(read_snapshot(LakeTable.open(path))) == before
    snapshot = read_snapshot(LakeTable.open(path))
    existing = snapshot.column(key).to_pylist()[:2]
    batch = _batch(snapshot, key, ordering, [0, 1, 0], [*existing, new_keys[0]])
    t = write(LakeTable.open(path), batch, "upsert", options=MAINTAIN).instant
    assert _rows(hudi_rs(path)) != before
    assert any(n.startswith(".hoodie/timeline/") for n in mdt_files_of(path, t))

    assert main(["rollback", str(path), "--instant", t, "--force", *OPT]) == 0
    action = "deltacommit" if LakeTable.open(path).config.is_mor else "commit"
    assert capsys.readouterr().out.startswith(f"rolled back {action} {t} at ")
    assert mdt_files_of(path, t) == []  # its deltacommit and log files are gone from the MDT
    assert not list((path / ".hoodie/timeline").glob(f"{t}*"))
    assert _rows(hudi_rs(path)) == before
    assert _rows(assert_consistent(path)) == before
    assert_index_consistent(path)
    assert main(["metadata-table", str(path), "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["consistent"] is True


@pytest.mark.parametrize("also", [(), INDEXES])
def test_rollback_of_an_instant_an_mdt_compaction_folded_in_is_corrected_by_the_rollbacks_deltacommit(
    hudi_table_zip, capsys, also: tuple[str, ...]
) -> None:
    """Spark's last deltacommit of this table was followed by an MDT compaction (its records are in
    the MDT's base files now), so removing its deltacommit would not undo it there: it stays, and
    the rollback's own deltacommit, at the rollback's instant, deletes the files the rollback
    deletes in ``files``, marks their ``column_stats`` deleted and recomputes ``partition_stats``.
    hudi-rs, listing through the MDT, reads the rows before the deltacommit; the stats partitions
    equal a recomputation. Under the write lock too (restore's steps come this way)."""
    path = keep_files_partition_only(hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned"), also)
    t = "20260101054337037"
    timeline = LakeTable.open(path).timeline()
    previous = max(i.timestamp for i in timeline.completed_commits if i.timestamp < t)
    with_it = _rows(hudi_rs(path))
    if also:
        with LakeTable.open(path).store.exclusive("write"):
            (done,) = rollback_instant_locked(LakeTable.open(path), t, force=True)
        r = done.instant
    else:
        assert main(["rollback", str(path), "--instant", t, "--force", *OPT]) == 0
        r = capsys.readouterr().out.split(" at ")[1].split(":")[0]
    assert mdt_files_of(path, t) != []  # its MDT deltacommit is kept
    assert [p.name for p in (path / ".hoodie/metadata/.hoodie/timeline").glob(f"{r}_*.deltacommit")] != []
    after = _rows(hudi_rs(path))
    assert after != with_it
    assert after == _rows(read_snapshot(LakeTable.open(path), as_of=previous))
    assert _rows(assert_consistent(path)) == after
    assert_index_consistent(path)
    assert main(["metadata-table", str(path), "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["consistent"] is True


def test_a_crash_at_every_durable_step_of_the_rollback_leaves_both_readers_agreeing(
    hudi_table_zip, tmp_path: Path
) -> None:
    """A crash after any durable step of the forced rollback (rollback requested/inflight, the
    write's completed file, its files, its MDT deltacommit's files, its pending files, the rollback
    completed): hudi-rs, listing through the MDT, reads what we read (the rows with the write, or
    before it), the files partition equals the listing; the next rollback finishes it, to the rows
    before the write, with no MDT file of the write left."""
    key, ordering, _partition, new_keys = TABLES["cow_v9_txns_simple_meta"]
    template = keep_files_partition_only(hudi_table_zip("cow_v9_txns_simple_meta"), INDEXES)
    before = _rows(assert_consistent(template))
    snapshot = read_snapshot(LakeTable.open(template))
    batch = _batch(snapshot, key, ordering, [0, 0], [snapshot.column(key).to_pylist()[0], new_keys[0]])
    t = write(LakeTable.open(template), batch, "upsert", options=MAINTAIN).instant
    written = _rows(assert_consistent(template))
    assert written != before
    for path, step in _crashed_at_every_step(template, tmp_path, t, (written, before)):
        assert _rows(assert_consistent(path)) == before, step
        assert mdt_files_of(path, t) == [], step


def _crashed_at_every_step(
    template: Path, tmp_path: Path, t: str, rows: tuple[list, list]
) -> Iterator[tuple[Path, str]]:
    """Copies of ``template`` whose forced rollback of ``t`` crashed after each durable step: both
    readers agree on one of ``rows`` (with the instant, before it); each copy after the next
    rollback finished it, with the step's name."""
    counting = crashing(LakeTable.open(_copy(template, tmp_path / "count")))
    rollback(counting, t, force=True, options=MAINTAIN)
    steps = steps_of(counting)
    assert any(s.endswith(".rollback") for s in steps)
    for step in range(1, len(steps) + 1):
        path = _copy(template, tmp_path / f"crash{step}")
        with pytest.raises(SimulatedCrash):
            rollback(crashing(LakeTable.open(path), step), t, force=True, options=MAINTAIN)
        assert _rows(assert_consistent(path)) in rows, (step, steps[step - 1])
        assert_index_consistent(path)
        rollback(LakeTable.open(path), options=MAINTAIN)  # finishes the pending rollback
        yield path, f"{step}: {steps[step - 1]}"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.mark.parametrize("also", [(), INDEXES])
def test_a_crash_at_every_durable_step_of_a_corrected_rollback_leaves_both_readers_agreeing(
    hudi_table_zip, tmp_path: Path, also: tuple[str, ...]
) -> None:
    """The rollback corrected by its own MDT deltacommit (written before the target leaves the
    timeline), crashed after each durable step: hudi-rs, listing through the MDT, reads what we
    read (the rows with the deltacommit, or before it), the files partition equals the listing; the
    next rollback finishes it, to the rows before, and the MDT keeps the correction."""
    template = keep_files_partition_only(hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned"), also)
    t = "20260101054337037"
    with_it = _rows(assert_consistent(template))
    done = _copy(template, tmp_path / "done")
    (result,) = rollback(LakeTable.open(done), t, force=True, options=MAINTAIN)
    before = _rows(assert_consistent(done))
    assert before != with_it
    mdt_timeline = done / ".hoodie/metadata/.hoodie/timeline"
    assert list(mdt_timeline.glob(f"{result.instant}_*.deltacommit"))  # the correcting one
    assert mdt_files_of(done, t) != []  # the instant's own is kept
    for path, step in _crashed_at_every_step(template, tmp_path, t, (with_it, before)):
        # (a crash after the rollback completed leaves the instant pending, with nothing left to
        # delete: the next rollback undoes it as a failed write, and removes its MDT deltacommit)
        assert _rows(assert_consistent(path)) == before, step
        assert_index_consistent(path)


@pytest.mark.parametrize("name", ["cow_v9_txns_simple_meta", "mor_avro_v9_txns_simple_meta"])
def test_a_corrected_rollback_of_the_only_write_to_a_new_partition_lists_it_no_more(
    hudi_table_zip, name: str
) -> None:
    """Found by an adversarial run: the write that created a partition, folded into the MDT's base
    files by an MDT compaction, rolled back: the partition has no file left, so the correction names
    it deleted in ``__all_partitions__`` and marks its ``partition_stats`` records deleted (they
    held the rolled-back rows), as an MDT rollback of the write would leave them. A partition it
    does not empty keeps its listing and gets its earlier record back."""
    key, ordering, partition, new_keys = TABLES[name]
    path = keep_files_partition_only(hudi_table_zip(name), INDEXES)
    before = _rows(assert_consistent(path))
    old_partitions = read_files_partition(open_storage(path)).partitions
    old_stats = _partition_stats(path)
    snapshot = read_snapshot(LakeTable.open(path))
    batch = _batch(snapshot, key, ordering, [0, 1], [snapshot.column(key).to_pylist()[0], new_keys[0]])
    batch = batch.set_column(
        batch.column_names.index(partition), partition, pa.array(["us", "zz-new"], pa.string())
    )
    compact = {**MAINTAIN, "hoodie.metadata.compact.max.delta.commits": "1"}
    done = write(LakeTable.open(path), batch, "upsert", options=compact)
    assert done.metadata_compaction is not None  # its records are in the MDT's base files now
    listed = read_files_partition(open_storage(path)).partitions
    new = sorted(set(listed) - set(old_partitions))
    assert len(new) == 1 and "zz-new" in new[0]
    assert any(s["fileName"] == new[0] for s in _partition_stats(path).values())

    (result,) = rollback(LakeTable.open(path), done.instant, force=True, options=MAINTAIN)
    assert mdt_files_of(path, done.instant) != []  # corrected, not forgotten
    assert read_files_partition(open_storage(path)).partitions == old_partitions
    assert _partition_stats(path) == old_stats
    assert _rows(assert_consistent(path)) == before
    assert_index_consistent(path)


def _partition_stats(path: Path) -> dict[str, dict]:
    records = read_partition_records(open_storage(path), "partition_stats")
    # a record marked deleted reads as none (the reader returns the latest record of each key)
    return {
        k: r["ColumnStatsMetadata"] for k, r in records.items() if not r["ColumnStatsMetadata"]["isDeleted"]
    }
