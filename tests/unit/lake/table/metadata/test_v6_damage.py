"""A damaged metadata table (MDT) of a version 6 table, with ``lake.metadata-table.maintain=true``:
the ``lake`` CLI refuses with one ``lake: error:`` line naming the damaged path (no traceback) and
changes nothing; a service that crashed leaves an MDT ``--check`` finds equal to the table."""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from crash_support import crashing, steps_of
from mdt_v6_tables import add_v6_metadata_table
from metadata_table_support import tree_digest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import CorruptDataFileError
from airflow_lake_provider.lake.file_group.file_names import LogFileName
from airflow_lake_provider.lake.log_file.log_format import HeaderKey, parse_log_bytes
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
from airflow_lake_provider.lake.services.compaction.result import Outcome
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.storage import SimulatedCrash, open_storage
from airflow_lake_provider.lake.table.metadata.commit import MetadataTableWriter
from airflow_lake_provider.lake.table.metadata.files import read_files_partition
from airflow_lake_provider.lake.table.metadata.services import run_metadata_table_services
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import write
from tests.unit.lake.table.metadata.test_v6 import MAINTAIN as OPTIONS
from tests.unit.lake.table.metadata.test_v6 import _batch, _data, assert_consistent

MAINTAIN = ["--option", "lake.metadata-table.maintain=true"]
MDT = Path(".hoodie/metadata")


def _refused(table: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """A maintained upsert of one row of ``table``: refused, nothing changed; its stderr lines."""
    rows = read_snapshot(LakeTable.open(table))
    data = table.parent / "in.parquet"
    meta = [c for c in rows.column_names if c.startswith("_hoodie_")]
    pq.write_table(rows.drop_columns(meta).slice(0, 1), data)
    digest = tree_digest(table)
    capsys.readouterr()
    assert main(["write", str(table), "--input", str(data), "--operation", "upsert", *MAINTAIN]) == 1
    assert tree_digest(table) == digest
    return capsys.readouterr().err.splitlines()


def test_an_mdt_properties_file_that_is_not_text_is_named(hudi_table_zip, capsys) -> None:
    table = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    add_v6_metadata_table(table)
    props = table / MDT / ".hoodie/hoodie.properties"
    props.write_bytes(b"\x00\xffhoodie.table.version=6\n")
    # Refused before any lock file, as the default cannot keep it, with the ways out.
    (line,) = _refused(table, capsys)
    assert line.startswith(f"lake: error: write (upsert) refused: {table} has Hudi's metadata table ")
    assert f"cannot keep it for this action: {props}: cannot read (not UTF-8 text); " in line
    assert "run with option hoodie.metadata.enable=false" in line
    assert main(["metadata-table", str(table), "--check"]) == 1
    assert capsys.readouterr().err.splitlines() == [f"lake: error: {props}: cannot read (not UTF-8 text)"]


def test_an_mdt_whose_initialisation_did_not_complete_is_refused_before_the_write(
    hudi_table_zip, capsys
) -> None:
    """A writer that died after writing the initialisation's HFile, before completing its
    deltacommit: the HFile is no file group of the MDT's yet (Java initialises it again)."""
    table = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    init = add_v6_metadata_table(table)
    (table / MDT / f".hoodie/{init}.deltacommit").unlink()
    (line,) = _refused(table, capsys)
    assert (
        f"cannot keep it for this action: {table / MDT / 'files'}: no files-0000-0 base file of a completed "
        f"instant to take the record schema from (files-0000-0_0-0-0_{init}.hfile: its instant {init} is "
        "pending); "
    ) in line


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_an_unreadable_mdt_base_file_is_named(hudi_table_zip, capsys, damage: str) -> None:
    """The only ``files`` base file cut short: the one error line names it and what is wrong (no
    warning before it about skipping it)."""
    table = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    init = add_v6_metadata_table(table)
    base = table / MDT / f"files/files-0000-0_0-0-0_{init}.hfile"
    size = base.stat().st_size // 2 if damage == "truncated" else 0
    base.write_bytes(base.read_bytes()[:size])
    (line,) = _refused(table, capsys)
    assert (
        f"cannot keep it for this action: {table / MDT / 'files'}: no files-0000-0 base file of a completed "
        f"instant to take the record schema from ({base}: {size} bytes, shorter than an HFile v3 trailer); "
    ) in line


@pytest.mark.parametrize("name", ["morparquet_v6_simplekeygen_nonhivestyle", "morparquet_v6_nonpartitioned"])
def test_crash_at_every_durable_step_of_a_data_compaction_keeps_a_v6_mdt(
    hudi_table_zip, tmp_path: Path, capsys, name: str
) -> None:
    """A compaction that crashed after writing its base file: the file is none of the table's for
    the MDT until the compaction completes (Java lists it with the compaction's deltacommit), so
    ``--check`` finds no difference at any step; run again, the compaction completes and the MDT
    lists its base file."""
    template = hudi_table_zip(name)
    add_v6_metadata_table(template)
    before = assert_consistent(template)
    write(
        LakeTable.open(template),
        _batch(before, sorted(before.column("id").to_pylist()), 5),
        "upsert",
        options=OPTIONS,
    )
    rows = _data(assert_consistent(template))
    c = schedule_compaction(LakeTable.open(template), OPTIONS, force=True).instant
    assert c is not None
    counting = crashing(LakeTable.open(shutil.copytree(template, tmp_path / "count")))
    assert execute_compaction(counting, c, options=OPTIONS).outcome is Outcome.COMPLETED
    steps = steps_of(counting)
    bases = {
        s.split(" ", 1)[1].rsplit("/", 1)[-1]
        for s in steps
        if s.startswith("create ") and s.endswith(f"_{c}.parquet")
    }
    assert bases
    for step in range(1, len(steps) + 1):
        path = shutil.copytree(template, tmp_path / f"crash{step}")
        with pytest.raises(SimulatedCrash):
            execute_compaction(crashing(LakeTable.open(path), step), c, options=OPTIONS)
        capsys.readouterr()
        assert main(["metadata-table", str(path), "--check"]) == 0, (step, steps[step - 1])
        assert json.loads(capsys.readouterr().out)["missing_files"] == []
        # hudi-rs reads a pending compaction's base file as the group's newest slice: no referee.
        assert _data(assert_consistent(path, referee=False)) == rows, (step, steps[step - 1])
        execute_compaction(LakeTable.open(path), c, options=OPTIONS)
        assert _data(assert_consistent(path)) == rows, (step, steps[step - 1])
        listed = {n for files in read_files_partition(open_storage(path)).files.values() for n in files}
        assert bases <= listed


def test_a_v6_mdt_log_name_taken_by_a_concurrent_compaction_is_not_a_failure(
    hudi_table_zip, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each MDT deltacommit adds a new log version of the newest ``files`` slice. Ours take the MDT
    commit lock, but a writer that does not (a Java writer under its own lock provider; here our
    compaction without the lock and its removal of pending deltacommits) may take the name a write
    just chose: the write takes the next version (it used to fail: "already exists")."""
    table = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    init = add_v6_metadata_table(table)
    before = assert_consistent(table)
    ids = sorted(before.column("id").to_pylist())
    write(LakeTable.open(table), _batch(before, ids, 5), "upsert", options=OPTIONS)
    c = schedule_compaction(LakeTable.open(table), OPTIONS, force=True).instant
    assert c is not None
    choose = MetadataTableWriter._next_log_v6
    raced: list[str] = []

    def racing(self: MetadataTableWriter, partition: str, file_id: str) -> tuple[LogFileName, str, str]:
        chosen = choose(self, partition, file_id)
        if not raced:  # the compaction commits between the write's choice and its create
            raced.append(c)
            with monkeypatch.context() as unlocked:
                unlocked.setattr(MetadataTableWriter, "commit_lock", lambda self: contextlib.nullcontext())
                unlocked.setattr(MetadataTableWriter, "_discard_before", lambda self, instant, first: None)
                done = execute_compaction(LakeTable.open(table), c, options=OPTIONS)
            assert done.outcome is Outcome.COMPLETED
        return chosen

    monkeypatch.setattr(MetadataTableWriter, "_next_log_v6", racing)
    done = write(LakeTable.open(table), _batch(before, [ids[0], 1101], 9), "upsert", options=OPTIONS)
    monkeypatch.undo()
    assert raced == [c]
    logs = sorted(p.name for p in (table / MDT / "files").glob(".*.log.*"))
    assert logs == [f".files-0000-0_{init}.log.{v}_0-0-0" for v in (1, 2, 3, 4)]
    assert _blocks(table / MDT / "files" / logs[2]) == [c]
    assert _blocks(table / MDT / "files" / logs[3]) == [done.instant]
    after = assert_consistent(table)
    assert set(after.column("id").to_pylist()) == {*ids, 1101}


def _blocks(log: Path) -> list[str]:
    return [b.header[HeaderKey.INSTANT_TIME] for b in parse_log_bytes(log.read_bytes(), str(log))]


@pytest.mark.parametrize("name", ["morparquet_v6_empty", "cow_v6_empty"])
def test_a_v6_mdt_initialised_on_an_empty_table_is_kept(hudi_table_zip, capsys, name: str) -> None:
    """Spark 0.14/0.15 initialise the MDT of a new table before its first commit completes: at
    Hudi's ``SOLO_COMMIT_TIMESTAMP`` plus ``010``, ``00000000000000010``, no date. Its slice is read
    (``--check`` names its base file) and kept: a maintained write adds its log to that slice."""
    table = hudi_table_zip(name)
    init = add_v6_metadata_table(table)
    assert init == "00000000000000010"
    capsys.readouterr()
    assert main(["metadata-table", str(table), "--check"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["base_file"] == f".hoodie/metadata/files/files-0000-0_0-0-0_{init}.hfile"
    data = table.parent / "in.parquet"
    pq.write_table(
        pa.table({"id": pa.array([1, 2], pa.int32()), "name": ["a", "b"], "isActive": [True, False]}), data
    )
    assert main(["write", str(table), "--input", str(data), "--operation", "insert", *MAINTAIN]) == 0
    done = capsys.readouterr().out.strip()
    assert _blocks(table / MDT / f"files/.files-0000-0_{init}.log.2_0-0-0") == [done]
    assert main(["metadata-table", str(table), "--check"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["consistent"], report["partitions"], report["files"]) == (True, 1, 1)
    assert sorted(assert_consistent(table).column("id").to_pylist()) == [1, 2]


@pytest.mark.parametrize(
    ("key", "old", "new", "why"),
    [
        ("hoodie.table.version", "6", "8", "table version 8, not its data table's 6"),
        ("hoodie.timeline.layout.version", "1", "2", "timeline layout 2, not its data table's 1"),
        (
            "hoodie.table.type",
            "MERGE_ON_READ",
            "COPY_ON_WRITE",
            "hoodie.table.type=COPY_ON_WRITE, not MERGE_ON_READ",
        ),
        (
            "hoodie.table.base.file.format",
            "HFILE",
            "PARQUET",
            "hoodie.table.base.file.format=PARQUET, not HFILE",
        ),
    ],
)
def test_mdt_properties_that_do_not_fit_the_data_table_are_refused(
    hudi_table_zip, capsys, key: str, old: str, new: str, why: str
) -> None:
    """An MDT whose properties are not those of a v6 table's MDT (e.g. left by an upgrade that did
    not finish) is not written as one: writing a layout 1 deltacommit into it would corrupt it."""
    table = hudi_table_zip("cow_v6_simplekeygen_nonhivestyle")
    add_v6_metadata_table(table)
    props = table / MDT / ".hoodie/hoodie.properties"
    props.write_text(props.read_text().replace(f"{key}={old}", f"{key}={new}"))
    (line,) = _refused(table, capsys)
    assert f"cannot keep it for this action: {props}: not the metadata table of this table: {why}; " in line


def test_an_mdt_block_a_crashed_action_left_is_removed_before_the_next_mdt_commit(
    hudi_table_zip, tmp_path: Path, capsys
) -> None:
    """A compaction that crashed right after writing its MDT log block leaves a pending MDT
    deltacommit. Hudi 0.14's log scanner stops at a block newer than the MDT's latest completed
    instant, so that block would hide the next write's from it: the next MDT commit (a write's,
    under the one MDT commit lock) removes it first, as Java's MDT writer rolls back every pending
    deltacommit (EAGER). The compaction, run again, then completes with its own deltacommit."""
    name = "morparquet_v6_simplekeygen_nonhivestyle"
    template = hudi_table_zip(name)
    add_v6_metadata_table(template)
    before = assert_consistent(template)
    ids = sorted(before.column("id").to_pylist())
    write(LakeTable.open(template), _batch(before, ids, 5), "upsert")
    c = schedule_compaction(LakeTable.open(template), force=True).instant
    assert c is not None
    counting = crashing(LakeTable.open(shutil.copytree(template, tmp_path / "count")))
    execute_compaction(counting, c)
    steps = steps_of(counting)
    step = next(i for i, s in enumerate(steps, 1) if s.startswith("create files/.files-"))  # MDT-relative
    path = shutil.copytree(template, tmp_path / "crashed")
    with pytest.raises(SimulatedCrash):
        execute_compaction(crashing(LakeTable.open(path), step), c)
    mdt = path / MDT / ".hoodie"
    assert [p.name for p in mdt.glob(f"{c}.deltacommit*")] != []
    assert not (mdt / f"{c}.deltacommit").exists()  # pending, its block written
    done = write(LakeTable.open(path), _batch(before, ids[:1], 6), "upsert")
    assert [p.name for p in mdt.glob(f"{c}.deltacommit*")] == []
    blocks = [
        b.header.get(HeaderKey.INSTANT_TIME)
        for log in (path / MDT / "files").glob(".files-*.log.*")
        for b in parse_log_bytes(log.read_bytes(), str(log))
    ]
    assert c not in blocks and done.instant in blocks
    assert main(["metadata-table", str(path), "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["consistent"] is True
    assert execute_compaction(LakeTable.open(path), c).outcome is Outcome.COMPLETED
    assert (mdt / f"{c}.deltacommit").exists()
    assert_consistent(path)


def test_another_tables_mdt_copied_in_is_refused_before_anything_is_written(hudi_table_zip, capsys) -> None:
    """An MDT is named after its data table (``<name>_metadata``): one copied from another table is
    not this one's, and writing to it would corrupt both readers' listings (Hudi 0.14's failed)."""
    table = hudi_table_zip("cow_v6_simplekeygen_nonhivestyle")
    other = hudi_table_zip("cow_v6_nonpartitioned")
    add_v6_metadata_table(other)
    shutil.copytree(other / MDT, table / MDT)
    props = table / ".hoodie/hoodie.properties"
    props.write_text(props.read_text() + "hoodie.table.metadata.partitions=files\n")
    name, foreign = LakeTable.open(table).config.name, LakeTable.open(other).config.name
    (line,) = _refused(table, capsys)
    assert (
        f"cannot keep it for this action: {table / MDT}/.hoodie/hoodie.properties: not the metadata table "
        f"of this table: hoodie.table.name={foreign}_metadata, not {name}_metadata; "
    ) in line


def test_a_clean_on_an_mdt_without_its_files_base_file_deletes_nothing(hudi_table_zip, capsys) -> None:
    """The MDT is opened (its record schema taken from the ``files`` base file) before the first
    lock file: with that file gone a clean is refused having deleted nothing (it deleted the data
    files first, then failed, its instant left inflight), as a write is."""
    table = hudi_table_zip("cow_v6_simplekeygen_nonhivestyle")
    add_v6_metadata_table(table)
    before = assert_consistent(table)
    write(LakeTable.open(table), _batch(before, sorted(before.column("id").to_pylist())[:2], 5), "upsert")
    for base in (table / MDT / "files").glob("*.hfile"):
        base.unlink()
    digest = tree_digest(table)
    assert main(["clean", str(table), "--policy", "KEEP_LATEST_FILE_VERSIONS", "--retained", "1"]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"lake: error: clean refused: {table} has Hudi's metadata table ")
    assert f"{table / MDT}/files: no files-0000-0 base file of a completed instant" in line
    assert tree_digest(table) == digest


def test_a_torn_block_of_a_completed_mdt_deltacommit_is_refused_by_check_and_the_mdt_compaction(
    hudi_table_zip, capsys
) -> None:
    """Bytes lost from the block of a completed MDT deltacommit: every reader of the MDT would
    merge the slice without its records. ``--check`` names the log, the damage and the instant;
    an MDT compaction refuses before its plan (it would write the loss into the base file)."""
    table = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    add_v6_metadata_table(table)
    before = assert_consistent(table)
    done = write(LakeTable.open(table), _batch(before, sorted(before.column("id").to_pylist()), 5), "upsert")
    (log,) = [p for p in (table / MDT / "files").glob(".files-*.log.*") if _blocks(p) == [done.instant]]
    data = log.read_bytes()
    log.write_bytes(data[: len(data) // 2])
    why = (
        f"{log}: damaged (offset 0: block length {len(data) - 14} runs past end of file ({len(data) // 2} "
        f"bytes; truncated)): the metadata table's completed deltacommit(s) {done.instant} have no readable "
        f"block in {table / MDT / 'files'}, so every reader of the metadata table misses their records; drop "
        "the metadata table ('lake metadata-table <table> --drop') for Hudi to build it again"
    )
    capsys.readouterr()
    assert main(["metadata-table", str(table), "--check"]) == 1
    assert capsys.readouterr().err.splitlines() == [f"lake: error: {why}"]
    digest = tree_digest(table)
    due = {"hoodie.metadata.compact.max.delta.commits": "1"}
    with pytest.raises(CorruptDataFileError) as refused:
        run_metadata_table_services(LakeTable.open(table), due)
    assert str(refused.value) == why
    assert tree_digest(table) == digest  # no plan left behind


def test_a_torn_block_of_a_crashed_mdt_append_is_skipped(hudi_table_zip, capsys) -> None:
    """A partial block whose deltacommit never completed (a writer died while appending it) hides
    no completed deltacommit: readers skip it, and so does ``--check``."""
    table = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    init = add_v6_metadata_table(table)
    before = assert_consistent(table)
    done = write(LakeTable.open(table), _batch(before, sorted(before.column("id").to_pylist()), 5), "upsert")
    logs = sorted(
        (table / MDT / "files").glob(".files-*.log.*"), key=lambda p: LogFileName.parse(p.name).version
    )
    assert _blocks(logs[-1]) == [done.instant]
    torn = table / MDT / f"files/.files-0000-0_{init}.log.{len(logs) + 1}_0-0-0"
    torn.write_bytes(logs[-1].read_bytes()[:100])
    capsys.readouterr()
    assert main(["metadata-table", str(table), "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["consistent"] is True
    assert run_metadata_table_services(
        LakeTable.open(table), {"hoodie.metadata.compact.max.delta.commits": "1"}
    )
    assert_consistent(table)
