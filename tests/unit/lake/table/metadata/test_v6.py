"""The metadata table (MDT) of a version 6 table, kept as Hudi 0.14/0.15 keeps it: the test tables
given the MDT Java 0.15 initialises (``mdt_v6_tables``), then written through our writer with the
MDT writer's v6 path, which the maintain policy (the default) takes on version 6.

v6 conventions checked: MDT instants in ``.hoodie/metadata/.hoodie/`` (layout 1), the
initialisation at the latest data instant plus ``010``, each write's MDT deltacommit at the data
instant's own time, completed before it, one new log version of the ``files`` slice named after the
slice's base instant; the ``files`` partition, merged as Hudi 0.15 merges it, equals a listing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from crash_support import crashing, steps_of
from hudi import HudiTableBuilder
from mdt_v6_tables import INIT_SUFFIX, V6_HFILE, add_v6_metadata_table, mdt_properties
from metadata_table_support import tree_digest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.errors import LakeError
from airflow_lake_provider.lake.format.hfile import read_hfile
from airflow_lake_provider.lake.format.properties import parse_properties
from airflow_lake_provider.lake.log_file.delete_block import DeleteRecord, delete_block
from airflow_lake_provider.lake.log_file.hfile_block import decode_hfile_block
from airflow_lake_provider.lake.log_file.log_format import (
    BlockType,
    HeaderKey,
    parse_log_bytes,
    rollback_command_block,
)
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction, run_compaction
from airflow_lake_provider.lake.services.compaction.result import Outcome
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.services.partition_commit.executor import commit_partitions
from airflow_lake_provider.lake.services.restore import restore
from airflow_lake_provider.lake.services.savepoint import create_savepoint, delete_savepoint
from airflow_lake_provider.lake.storage import SimulatedCrash, open_storage
from airflow_lake_provider.lake.table.archival.executor import Outcome as ArchivalOutcome
from airflow_lake_provider.lake.table.archival.executor import run_archival
from airflow_lake_provider.lake.table.metadata.files import read_files_partition
from airflow_lake_provider.lake.table.metadata.listing import check_files_partition, list_table_files
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import WriteResult, write
from airflow_lake_provider.lake.timeline.archived import decode_archive_block
from airflow_lake_provider.lake.timeline.avro import read_avro
from airflow_lake_provider.lake.timeline.instant import Action
from airflow_lake_provider.lake.timeline.markers import IOType

MAINTAIN = {"lake.metadata-table.maintain": "true"}
ONE_VERSION = {
    "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
    "hoodie.cleaner.fileversions.retained": "1",
}
MDT = Path(".hoodie/metadata")
GROUP = "files-0000-0"
# name -> (its latest completed instant, partitioned)
TABLES = {
    "morparquet_v6_simplekeygen_nonhivestyle": ("20250121000557095", True),
    "cow_v6_simplekeygen_nonhivestyle": ("20240418172804498", True),
    "morparquet_v6_nonpartitioned": ("20250117083136333", False),
    "cow_v6_nonpartitioned": ("20240418173551906", False),
}


def _mdt_files(table: Path) -> list[str]:
    """The MDT's timeline files and partition files (not the empty folders Hudi creates)."""
    mdt = table / MDT
    return sorted(
        str(p.relative_to(mdt))
        for p in mdt.rglob("*")
        if p.is_file() and ".aux" not in p.parts and p.name != "hoodie.properties"
    )


def _rows(table: pa.Table) -> list[str]:
    return sorted(repr(r) for r in table.drop_columns(["_hoodie_commit_seqno"]).to_pylist())


def _data(table: pa.Table) -> list[str]:
    """The rows without the meta fields a compaction rewrites (file name, sequence number)."""
    return _rows(table.drop_columns(["_hoodie_file_name"]))


def assert_consistent(table: Path, *, referee: bool = True) -> pa.Table:
    """The files partition equals a listing of the table; hudi-rs reads our rows (it lists storage
    for a v6 table: hudi-rs 0.5 reads the MDT of version 8+ tables only)."""
    check = check_files_partition(open_storage(table))
    assert check.consistent, check.to_dict()
    assert read_files_partition(open_storage(table)).files == list_table_files(open_storage(table))
    ours = read_snapshot(LakeTable.open(table))
    if not referee:
        return ours
    theirs = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table)).build().read())
    assert _rows(theirs) == _rows(ours)
    return ours


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_builder_gives_the_mdt_java_0_15_initialises(hudi_table_zip, name: str) -> None:
    table = hudi_table_zip(name)
    latest, partitioned = TABLES[name]
    init = add_v6_metadata_table(table)
    assert init == latest + INIT_SUFFIX
    assert _mdt_files(table) == [
        f".hoodie/{init}.deltacommit",
        f".hoodie/{init}.deltacommit.inflight",
        f".hoodie/{init}.deltacommit.requested",
        f"files/.{GROUP}_{init}.log.1_0-0-0",
        f"files/{GROUP}_0-0-0_{init}.hfile",
    ]
    props = parse_properties((table / MDT / ".hoodie/hoodie.properties").read_text())
    data = LakeTable.open(table)
    assert props == mdt_properties(data.config.name)
    assert (props["hoodie.table.version"], props["hoodie.timeline.layout.version"]) == ("6", "1")
    assert data.config.properties["hoodie.table.metadata.partitions"] == "files"
    # The initial log: one empty DELETE block at the init time.
    log = table / MDT / f"files/.{GROUP}_{init}.log.1_0-0-0"
    (block,) = parse_log_bytes(log.read_bytes(), str(log))
    assert (block.block_type, block.header[HeaderKey.INSTANT_TIME]) == (BlockType.DELETE, init)
    # The base HFile in the 0.x (HBase) dialect, listing every file of the table.
    base = table / MDT / f"files/{GROUP}_0-0-0_{init}.hfile"
    assert read_hfile(base.read_bytes(), str(base)).settings().dialect is V6_HFILE.dialect
    commit = json.loads((table / MDT / f".hoodie/{init}.deltacommit").read_text())
    assert commit["operationType"] == "BULK_INSERT_PREPPED"
    listing = read_files_partition(open_storage(table))
    assert listing.base_file == str(MDT / f"files/{GROUP}_0-0-0_{init}.hfile")
    assert listing.partitions == (("10", "20", "30") if partitioned else (".",))
    assert sum(len(f) for f in listing.files.values()) > 0
    assert_consistent(table)


def _batch(snapshot: pa.Table, ids: list[int], bump: int) -> pa.Table:
    """Rows of ``snapshot`` (data columns) taken for ``ids`` (the first row's values for a new id),
    their ordering value raised by ``bump``."""
    data = snapshot.drop_columns([c for c in snapshot.column_names if c.startswith("_hoodie_")])
    have = data.column("id").to_pylist()
    batch = data.take([have.index(i) if i in have else 0 for i in ids])
    batch = batch.set_column(
        batch.column_names.index("id"), "id", pa.array(ids, batch.schema.field("id").type)
    )
    bumped = pa.array([v + bump for v in batch.column("longField").to_pylist()], pa.int64())
    return batch.set_column(batch.column_names.index("longField"), "longField", bumped)


def _completed(table: Path, folder: Path, instant: str) -> bool:
    return any((table / folder / f"{instant}.{a}").exists() for a in ("commit", "deltacommit"))


@pytest.mark.parametrize("name", sorted(TABLES))
def test_insert_upsert_delete_keep_a_v6_metadata_table(hudi_table_zip, name: str) -> None:
    table = hudi_table_zip(name)
    init = add_v6_metadata_table(table)
    before = assert_consistent(table)
    lake = LakeTable.open(table)
    order: list[tuple[bool, bool]] = []

    def at_commit(point: str) -> None:
        if point == "commit":  # the MDT deltacommit is completed, the data instant not yet
            (pending,) = [i for i in LakeTable.open(table).timeline().instants if not i.is_completed]
            order.append(
                (
                    _completed(table, MDT / ".hoodie", pending.timestamp),
                    _completed(table, Path(".hoodie"), pending.timestamp),
                )
            )

    ids = sorted(before.column("id").to_pylist())
    results = [
        write(lake, _batch(before, [101, 102], 1), "insert", options=MAINTAIN, fault=at_commit),
        write(lake, _batch(before, [ids[0], 103], 2), "upsert", options=MAINTAIN, fault=at_commit),
        write(lake, _batch(before, [ids[1], 101], 3), "delete", options=MAINTAIN, fault=at_commit),
    ]
    # hudi-rs 0.5 cannot decode a delete block whose ordering value is a long past 32 bits
    # (longField, "varint overflow", docs/compatibility.md): our check stands alone on MOR there.
    after = assert_consistent(table, referee=name.startswith("cow_"))
    assert sorted(after.column("id").to_pylist()) == sorted({*ids, 102, 103} - {ids[1]})
    assert order == [(True, False)] * 3
    # One MDT deltacommit per write at the data instant's time, one new version of the init slice's
    # log each (no base file since the init: the slice is the init's).
    instants = [r.instant for r in results]
    assert _mdt_files(table) == sorted(
        [
            f".hoodie/{init}.deltacommit",
            f".hoodie/{init}.deltacommit.inflight",
            f".hoodie/{init}.deltacommit.requested",
            *(f".hoodie/{t}.deltacommit{s}" for t in instants for s in ("", ".inflight", ".requested")),
            f"files/.{GROUP}_{init}.log.1_0-0-0",
            *(f"files/.{GROUP}_{init}.log.{v}_0-0-0" for v in (2, 3, 4)),
            f"files/{GROUP}_0-0-0_{init}.hfile",
        ]
    )
    for version, instant in zip((2, 3, 4), instants, strict=True):
        log = table / MDT / f"files/.{GROUP}_{init}.log.{version}_0-0-0"
        (block,) = parse_log_bytes(log.read_bytes(), str(log))
        assert (block.block_type, block.header[HeaderKey.INSTANT_TIME]) == (BlockType.HFILE_DATA, instant)
        stats = json.loads((table / MDT / f".hoodie/{instant}.deltacommit").read_text())
        (stat,) = stats["partitionToWriteStats"]["files"]
        assert (stat["prevCommit"], stat["baseFile"], stat["logVersion"]) == (
            init,
            f"{GROUP}_0-0-0_{init}.hfile",
            version,
        )
    # No MDT service ran (none is v6-shaped yet): no compaction, clean or archival instant.
    assert all(r.metadata_compaction is None for r in results)


class _Crash(LakeError):
    pass


def test_a_failed_write_removes_its_v6_mdt_deltacommit(hudi_table_zip) -> None:
    """A write that fails after its MDT deltacommit completed rolls it back: the MDT deltacommit and
    its log (a v6 log is named after the slice: found by its blocks' instant) go, the others stay."""
    table = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    init = add_v6_metadata_table(table)
    lake = LakeTable.open(table)
    before = assert_consistent(table)
    kept = write(lake, _batch(before, [201], 1), "insert", options=MAINTAIN).instant
    files = _mdt_files(table)

    def crash(point: str) -> None:
        if point == "commit":
            raise _Crash("crash before the data commit")

    with pytest.raises(_Crash):
        write(lake, _batch(before, [202], 1), "insert", options=MAINTAIN, fault=crash)
    assert _mdt_files(table) == files
    assert f"files/.{GROUP}_{init}.log.2_0-0-0" in files and f".hoodie/{kept}.deltacommit" in files
    after = assert_consistent(table)
    assert 202 not in after.column("id").to_pylist()


def test_check_on_a_v6_metadata_table(hudi_table_zip, capsys: pytest.CaptureFixture[str]) -> None:
    """``lake metadata-table --check`` merges a v6 MDT (suffixed instants, layout 1) and finds no
    difference; a data file the MDT does not list is named exactly."""
    table = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    add_v6_metadata_table(table)
    assert main(["metadata-table", str(table), "--check"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["consistent"], report["partitions"], report["files"]) == (True, 3, 4)
    (base,) = (table / "20").glob("*.parquet")
    stray = base.with_name(base.name.replace("_0-13-24_", "_0-99-99_"))
    stray.write_bytes(b"x" * 7)
    assert main(["metadata-table", str(table), "--check"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["missing_files"] == [{"file": f"20/{stray.name}", "size": 7}]
    assert report["extra_files"] == report["size_mismatches"] == []


def test_a_v6_metadata_table_is_kept_by_default(hudi_table_zip, capsys) -> None:
    """Unset (the default), a write keeps a v6 MDT as Hudi 0.14/0.15 do (a Hudi 0.14.0 reader
    compiled here once read what this engine writes, docs/services.md); ``false`` refuses naming
    that the default would keep it."""
    table = hudi_table_zip("cow_v6_nonpartitioned")
    add_v6_metadata_table(table)
    before = read_snapshot(LakeTable.open(table))
    digest = tree_digest(table)
    data = str(table.parent / "in.parquet")
    pq.write_table(_batch(before, [301], 1), data)
    off = ["--option", "lake.metadata-table.maintain=false"]
    assert main(["write", str(table), "--input", data, "--operation", "insert", *off]) == 1
    err = capsys.readouterr().err.splitlines()
    assert (
        len(err) == 1 and "Without that option (its default is true) the action keeps the metadata" in err[0]
    )
    assert tree_digest(table) == digest
    assert main(["write", str(table), "--input", data, "--operation", "insert"]) == 0
    ours = assert_consistent(table)
    assert sorted(ours.column("id").to_pylist()) == sorted([*before.column("id").to_pylist(), 301])


@pytest.mark.parametrize("name", ["morparquet_v6_simplekeygen_nonhivestyle", "cow_v6_nonpartitioned"])
def test_the_v6_mdt_compacts_at_its_latest_deltacommit_plus_001(hudi_table_zip, name: str) -> None:
    """With 3 deltacommits since none (the init's and two writes'), the MDT compacts after the
    second write at that write's time + ``001`` (a ``commit``, JSON); the third write's log starts the
    new slice, named after it; the files partition still equals the listing."""
    table = hudi_table_zip(name)
    init = add_v6_metadata_table(table)
    lake = LakeTable.open(table)
    options = {**MAINTAIN, "hoodie.metadata.compact.max.delta.commits": "3"}
    before = assert_consistent(table)
    first = write(lake, _batch(before, [401], 1), "insert", options=options)
    assert first.metadata_compaction is None
    second = write(lake, _batch(before, [402], 1), "insert", options=options)
    compaction = second.instant + "001"
    assert second.metadata_compaction == compaction
    third = write(lake, _batch(before, [403], 1), "insert", options=options)
    assert third.metadata_compaction is None
    after = assert_consistent(table)
    assert {401, 402, 403} <= set(after.column("id").to_pylist())
    base = f"files/{GROUP}_0-0-0_{compaction}.hfile"
    assert [f for f in _mdt_files(table) if compaction in f] == [
        f".hoodie/{compaction}.commit",
        f".hoodie/{compaction}.compaction.inflight",
        f".hoodie/{compaction}.compaction.requested",
        f"files/.{GROUP}_{compaction}.log.1_0-0-0",
        base,
    ]
    commit = json.loads((table / MDT / f".hoodie/{compaction}.commit").read_text())
    assert commit["operationType"] == "COMPACT"
    (stat,) = commit["partitionToWriteStats"]["files"]
    assert (stat["prevCommit"], stat["path"]) == (init, base)
    listing = read_files_partition(open_storage(table))
    assert listing.base_file == str(MDT / base)
    assert listing.log_files == (str(MDT / f"files/.{GROUP}_{compaction}.log.1_0-0-0"),)
    log = table / MDT / f"files/.{GROUP}_{compaction}.log.1_0-0-0"
    (block,) = parse_log_bytes(log.read_bytes(), str(log))
    assert block.header[HeaderKey.INSTANT_TIME] == third.instant


def test_the_v6_mdt_cleans_at_its_latest_deltacommit_plus_002(hudi_table_zip) -> None:
    """Compaction after the third write (4 deltacommits), then, 3 instants after it, the clean at
    the sixth write's time + ``002``: with 1 commit retained the initialisation's slice goes (its
    HFile and its 4 logs), the compaction's slice stays; the listing is unchanged."""
    table = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    init = add_v6_metadata_table(table)
    lake = LakeTable.open(table)
    options = {
        **MAINTAIN,
        "hoodie.metadata.compact.max.delta.commits": "4",
        "hoodie.cleaner.commits.retained": "1",
    }
    before = assert_consistent(table)
    done = [write(lake, _batch(before, [500 + n], 1), "insert", options=options) for n in range(6)]
    compaction, clean = done[2].instant + "001", done[5].instant + "002"
    assert [r.metadata_compaction for r in done] == [None, None, compaction, None, None, None]
    files = _mdt_files(table)
    assert [f for f in files if clean in f] == [
        f".hoodie/{clean}.clean",
        f".hoodie/{clean}.clean.inflight",
        f".hoodie/{clean}.clean.requested",
    ]
    assert [f for f in files if f.startswith("files/")] == [
        *(f"files/.{GROUP}_{compaction}.log.{v}_0-0-0" for v in (1, 2, 3)),
        f"files/{GROUP}_0-0-0_{compaction}.hfile",
    ]
    assert not any(init in f for f in files if f.startswith("files/"))
    after = assert_consistent(table)
    assert set(range(500, 506)) <= set(after.column("id").to_pylist())
    # No second clean at the same time while no deltacommit followed it.
    assert not [f for f in _mdt_files(table) if f.endswith(".clean") and f != f".hoodie/{clean}.clean"]


@pytest.mark.parametrize("name", ["morparquet_v6_simplekeygen_nonhivestyle", "morparquet_v6_nonpartitioned"])
def test_data_compaction_then_clean_keep_a_v6_mdt(hudi_table_zip, name: str) -> None:
    """The data table's compaction and clean each add their MDT deltacommit at their own instant
    (completed before it): the new base files listed, then the cleaned files gone."""
    table = hudi_table_zip(name)
    init = add_v6_metadata_table(table)
    before = assert_consistent(table)
    ids = sorted(before.column("id").to_pylist())
    write(LakeTable.open(table), _batch(before, ids, 5), "upsert", options=MAINTAIN)
    rows = assert_consistent(table)
    scheduled, done = run_compaction(LakeTable.open(table), MAINTAIN, force=True)
    assert done.outcome is Outcome.COMPLETED and scheduled.plan is not None
    assert _data(assert_consistent(table)) == _data(rows)
    new_bases = {s.path.rsplit("/", 1)[-1] for s in done.stats}
    listing = read_files_partition(open_storage(table)).files
    assert new_bases <= {n for files in listing.values() for n in files}
    cleaned = run_clean(LakeTable.open(table), {**MAINTAIN, **ONE_VERSION})
    assert cleaned.deleted_files > 0
    assert _data(assert_consistent(table)) == _data(rows)
    for instant in (done.instant, cleaned.instant):
        assert f".hoodie/{instant}.deltacommit" in _mdt_files(table)
    # Each a new log version of the init slice (no MDT compaction ran: 4 deltacommits < 10).
    assert [f for f in _mdt_files(table) if f.startswith("files/.")] == [
        f"files/.{GROUP}_{init}.log.{v}_0-0-0" for v in (1, 2, 3, 4)
    ]


@pytest.mark.parametrize(
    "name", ["morparquet_v6_simplekeygen_nonhivestyle", "cow_v6_simplekeygen_nonhivestyle"]
)
def test_rollback_of_a_completed_write_keeps_a_v6_mdt(hudi_table_zip, name: str) -> None:
    """A forced rollback of a completed maintained write removes its MDT deltacommit and its log (a
    v6 log found by its blocks' instant), and the MDT lists the table as before the write."""
    table = hudi_table_zip(name)
    init = add_v6_metadata_table(table)
    before = assert_consistent(table)
    files = _mdt_files(table)
    ids = sorted(before.column("id").to_pylist())
    t = write(LakeTable.open(table), _batch(before, [ids[0], 601], 7), "upsert", options=MAINTAIN).instant
    assert f"files/.{GROUP}_{init}.log.2_0-0-0" in _mdt_files(table)
    (done,) = rollback(LakeTable.open(table), t, force=True, options=MAINTAIN)
    assert done.target == t
    assert _mdt_files(table) == files
    assert _data(assert_consistent(table)) == _data(before)


@pytest.mark.parametrize(
    "name", ["morparquet_v6_simplekeygen_nonhivestyle", "cow_v6_simplekeygen_nonhivestyle"]
)
@pytest.mark.parametrize("when", ["compacted", "before the mdt"])
def test_rollback_of_a_write_the_v6_mdt_cannot_forget_is_corrected_by_the_rollbacks_deltacommit(
    hudi_table_zip, name: str, when: str
) -> None:
    """A forced rollback of a write an MDT compaction folded into the MDT's base file, or of the
    last commit from before the MDT (its initialisation listed its files): the write's records
    cannot be removed there, so the rollback's own MDT deltacommit (at the rollback's instant,
    completed before it) deletes every file the rollback deletes and lists the marked logs' sizes,
    as Java 0.14 records a rollback. The MDT then lists the table as it is."""
    table = hudi_table_zip(name)
    add_v6_metadata_table(table)
    before = assert_consistent(table)
    ids = sorted(before.column("id").to_pylist())
    if when == "compacted":
        compact = {**MAINTAIN, "hoodie.metadata.compact.max.delta.commits": "1"}
        done = write(LakeTable.open(table), _batch(before, [ids[0], 601], 7), "upsert", options=compact)
        assert done.metadata_compaction is not None
        t, expected = done.instant, _data(before)
    else:
        t = LakeTable.open(table).timeline().completed_commits[-1].timestamp
        previous = LakeTable.open(table).timeline().completed_commits[-2].timestamp
        expected = _data(read_snapshot(LakeTable.open(table), as_of=previous))
    mdt_timeline = table / MDT / ".hoodie"
    own = sorted(p.name for p in mdt_timeline.glob(f"{t}.*"))
    (done_rb,) = rollback(LakeTable.open(table), t, force=True, options=MAINTAIN)
    assert done_rb.target == t
    assert sorted(p.name for p in mdt_timeline.glob(f"{t}.*")) == own  # kept: not forgettable
    assert (mdt_timeline / f"{done_rb.instant}.deltacommit").exists()
    deleted = {f.rsplit("/", 1)[-1] for f in done_rb.deleted}
    assert deleted and not deleted & {
        n for files in list_table_files(open_storage(table)).values() for n in files
    }
    assert _data(assert_consistent(table)) == expected


@pytest.mark.parametrize(
    "name", ["morparquet_v6_simplekeygen_nonhivestyle", "cow_v6_simplekeygen_nonhivestyle"]
)
def test_a_corrected_v6_rollback_of_the_only_write_to_a_new_partition_lists_it_no_more(
    hudi_table_zip, name: str
) -> None:
    """The write that created partition 99, folded into the MDT's base file by an MDT compaction,
    rolled back: the correction names 99 deleted in ``__all_partitions__`` (no file is left there),
    and the MDT lists the partitions it listed before the write."""
    table = hudi_table_zip(name)
    add_v6_metadata_table(table)
    before = assert_consistent(table)
    listed = read_files_partition(open_storage(table)).partitions
    batch = _batch(before, [601], 7)
    batch = batch.set_column(batch.column_names.index("byteField"), "byteField", pa.array([99], pa.int32()))
    compact = {**MAINTAIN, "hoodie.metadata.compact.max.delta.commits": "1"}
    done = write(LakeTable.open(table), batch, "upsert", options=compact)
    assert done.metadata_compaction is not None
    assert read_files_partition(open_storage(table)).partitions == tuple(sorted((*listed, "99")))
    rollback(LakeTable.open(table), done.instant, force=True, options=MAINTAIN)
    assert read_files_partition(open_storage(table)).partitions == listed
    assert _data(assert_consistent(table)) == _data(before)


def test_a_corrected_rollback_marks_the_logs_it_would_delete_so_no_later_log_takes_their_name(
    hudi_table_zip,
) -> None:
    """Found with Hudi 0.14's reader: a rollback that deleted the log a rolled-back MOR write had
    made (its size in the MDT's base file after an MDT compaction) let the next write make a log of
    the same name, smaller; Java merges the MDT's logs before its base file, and the larger size
    wins. A corrected rollback marks such a log (a rollback block), as Java 0.14 does, and the next
    write makes the next log version: the MDT's sizes equal the storage's."""
    table, before, done, logs = _mdt_compacted_mor_upsert(hudi_table_zip)
    ids = sorted(before.column("id").to_pylist())
    compact = {**MAINTAIN, "hoodie.metadata.compact.max.delta.commits": "1"}
    (rolled,) = rollback(LakeTable.open(table), done.instant, force=True, options=MAINTAIN)
    assert sorted(rolled.marked) == logs and not set(logs) & set(rolled.deleted)
    for log in logs:
        assert [b.is_rollback for b in parse_log_bytes((table / log).read_bytes(), log)] == [False, True]
    again = write(LakeTable.open(table), _batch(before, ids[:2], 3), "upsert", options=compact)
    assert not set(logs) & {s.path for s in again.metadata.write_stats()}
    assert_consistent(table)


def _mdt_compacted_mor_upsert(hudi_table_zip) -> tuple[Path, pa.Table, WriteResult, list[str]]:
    """A v6 MOR table with an MDT, an upsert of two keys that an MDT compaction folded in right
    after (so its rollback is corrected): the table, its rows before, the write, its log files."""
    table = hudi_table_zip("morparquet_v6_nonpartitioned")
    add_v6_metadata_table(table)
    before = assert_consistent(table)
    ids = sorted(before.column("id").to_pylist())
    compact = {**MAINTAIN, "hoodie.metadata.compact.max.delta.commits": "1"}
    done = write(LakeTable.open(table), _batch(before, ids[:2], 7), "upsert", options=compact)
    assert done.metadata_compaction is not None
    logs = sorted({s.path for s in done.metadata.write_stats() if ".log." in s.path})
    assert logs
    return table, before, done, logs


def test_a_corrected_rollback_marks_a_log_that_holds_another_rollbacks_block_too(hudi_table_zip) -> None:
    """A v6 log is shared: it may already hold another rollback's command block (Hudi's rollback of
    another failed write appended to it, here planted). Only a block of this rollback for this
    instant means the log is marked already (a resumed rollback); otherwise the corrected rollback
    appends its own, and the rolled-back write's records are read no more."""
    table, before, done, logs = _mdt_compacted_mor_upsert(hudi_table_zip)
    other = rollback_command_block("20200101000000001", "20200101000000000")  # not this instant's
    for log in logs:
        with open(table / log, "ab") as fh:
            fh.write(other)
    (rolled,) = rollback(LakeTable.open(table), done.instant, force=True, options=MAINTAIN)
    for log in logs:
        blocks = parse_log_bytes((table / log).read_bytes(), log)
        assert [(b.instant_time, b.target_instant_time) for b in blocks if b.is_rollback] == [
            ("20200101000000001", "20200101000000000"),
            (rolled.instant, done.instant),
        ]
    assert _data(assert_consistent(table)) == _data(before)


@pytest.mark.parametrize("name", ["morparquet_v6_simplekeygen_nonhivestyle", "cow_v6_nonpartitioned"])
def test_a_crash_at_every_step_of_a_corrected_v6_rollback_then_the_next_rollback_finishes_it(
    hudi_table_zip, tmp_path: Path, name: str
) -> None:
    """The forced rollback of a write an MDT compaction folded in, crashed after each durable step
    (the correction, the write's completed file, its files, the marks, the rollback completed, the
    write's pending files), then ``rollback`` with no instant: the rows before the write, and the
    MDT equal to the listing. After the rollback completed, the write is pending with nothing left
    to undo: it is only removed (a new plan would delete the logs the rollback marked, which the
    MDT lists)."""
    template = hudi_table_zip(name)
    add_v6_metadata_table(template)
    before = _data(assert_consistent(template))
    ids = sorted(read_snapshot(LakeTable.open(template)).column("id").to_pylist())
    compact = {**MAINTAIN, "hoodie.metadata.compact.max.delta.commits": "1"}
    batch = _batch(read_snapshot(LakeTable.open(template)), [ids[0], 601], 7)
    t = write(LakeTable.open(template), batch, "upsert", options=compact).instant
    counting = crashing(LakeTable.open(shutil.copytree(template, tmp_path / "count")))
    rollback(counting, t, force=True, options=MAINTAIN)
    steps = steps_of(counting)
    assert any(s.endswith(".rollback") for s in steps)
    for step in range(1, len(steps) + 1):
        path = shutil.copytree(template, tmp_path / f"crash{step}")
        with pytest.raises(SimulatedCrash):
            rollback(crashing(LakeTable.open(path), step), t, force=True, options=MAINTAIN)
        rollback(LakeTable.open(path), options=MAINTAIN)
        assert not list((path / ".hoodie").glob(f"{t}.*")), (step, steps[step - 1])
        assert _data(assert_consistent(path)) == before, (step, steps[step - 1])


def test_the_v6_mdt_timeline_is_archived_to_layout_1_archive_files(hudi_table_zip) -> None:
    """With an MDT compaction every 2 deltacommits and keep.min/max 2/3 (the MDT's 3/4), the MDT's
    older instants go to ``.hoodie/metadata/.hoodie/archived/`` archive files (each entry once, with
    its metadata) and leave its active timeline, which keeps every deltacommit of the latest slice;
    the files partition still equals the listing."""
    table = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    init = add_v6_metadata_table(table)
    options = {
        **MAINTAIN,
        "hoodie.metadata.compact.max.delta.commits": "2",
        "hoodie.keep.min.commits": "2",
        "hoodie.keep.max.commits": "3",
        "hoodie.cleaner.commits.retained": "1",
    }
    before = assert_consistent(table)
    done = [
        write(LakeTable.open(table), _batch(before, [700 + n], 1), "insert", options=options)
        for n in range(8)
    ]
    after = assert_consistent(table)
    assert set(range(700, 708)) <= set(after.column("id").to_pylist())
    archived = []
    for path in sorted((table / MDT / ".hoodie/archived").glob(".commits_.archive.*")):
        for block in parse_log_bytes(path.read_bytes(), str(path)):
            archived.extend((e["commitTime"], e["actionType"]) for e in decode_archive_block(block))
    active = {p.name.split(".")[0] for p in (table / MDT / ".hoodie").glob("[0-9]*")}
    assert archived and (init, "deltacommit") in archived
    assert len(archived) == len(set(archived)) and not {t for t, _ in archived} & active
    # Every deltacommit whose block the latest slice holds is still active.
    listing = read_files_partition(open_storage(table))
    for log in listing.log_files:
        for block in parse_log_bytes((table / log).read_bytes(), log):
            assert block.header[HeaderKey.INSTANT_TIME] in active
    compactions = [r.metadata_compaction for r in done if r.metadata_compaction]
    assert listing.base_file == str(MDT / f"files/{GROUP}_0-0-0_{compactions[-1]}.hfile")


def test_rollback_blocks_appended_to_a_log_are_listed_in_the_v6_mdt(hudi_table_zip) -> None:
    """A failed write of a Java writer on storage that appends (HDFS) left a block in the log file
    of an earlier write: its rollback appends a rollback block there, and (as Java's
    ``processRollbackMetadata``) adds an MDT deltacommit at the rollback's time with the file's new
    size, completed before the rollback: the MDT lists the log at its size again."""
    table = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    add_v6_metadata_table(table)
    before = assert_consistent(table)
    ids = sorted(before.column("id").to_pylist())
    lake = LakeTable.open(table)
    first = write(lake, _batch(before, [ids[0]], 1), "upsert", options=MAINTAIN).instant
    (log,) = [
        p
        for p in (table / "10").glob(".*.log.*")
        if parse_log_bytes(p.read_bytes(), str(p))[0].header[HeaderKey.INSTANT_TIME] == first
    ]
    log_rel = log.name
    # The crashed write: requested and inflight, a marker naming the log, one block appended to it.
    failed = lake.clock.next(after=first)
    inflight = lake.store.transition_to_inflight(lake.store.create_requested(failed, Action.DELTACOMMIT))
    assert inflight.is_inflight
    lake.store.markers.create(failed, "10", log_rel, IOType.APPEND)
    (own,) = parse_log_bytes(log.read_bytes(), str(log))
    schema = json.loads(own.header[HeaderKey.SCHEMA])
    with log.open("ab") as out:
        out.write(delete_block([DeleteRecord(str(ids[0]), "10")], failed, schema))
    (done,) = rollback(
        LakeTable.open(table), options={**MAINTAIN, "hoodie.cleaner.policy.failed.writes": "EAGER"}
    )
    assert (done.target, done.marked, done.deleted) == (failed, (f"10/{log_rel}",), ())
    assert f".hoodie/{done.instant}.deltacommit" in _mdt_files(table)
    listing = read_files_partition(open_storage(table))
    assert listing.files["10"][log_rel] == log.stat().st_size
    after = assert_consistent(table)
    assert _data(after) == _data(read_snapshot(LakeTable.open(table)))
    assert ids[0] in after.column("id").to_pylist()


_KEEP_FEW = {
    "hoodie.metadata.compact.max.delta.commits": "1",
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
    "hoodie.cleaner.commits.retained": "1",
}


def _savepointed(table: Path) -> tuple[Path, pa.Table, str]:
    """The table with a v6 MDT added, its rows (checked consistent) and a savepoint at its latest
    completed commit."""
    add_v6_metadata_table(table)
    before = assert_consistent(table)
    lake = LakeTable.open(table)
    point = lake.timeline().completed_commits[-1].timestamp
    create_savepoint(lake, point)
    return table, before, point


@pytest.mark.parametrize(
    "name", ["morparquet_v6_simplekeygen_nonhivestyle", "cow_v6_simplekeygen_nonhivestyle"]
)
@pytest.mark.parametrize("mdt_compactions", [False, True])
def test_restore_keeps_a_v6_mdt(hudi_table_zip, name: str, mdt_compactions: bool) -> None:
    """A restore to a savepoint taken before two maintained writes removes both writes' MDT
    deltacommits and logs: the MDT is byte for byte what it was at the savepoint. With an MDT
    compaction after each write (their records in the MDT's base file), each of its rollbacks
    instead records the files it deletes in its own MDT deltacommit, and the MDT lists the table
    as at the savepoint."""
    table, before, point = _savepointed(hudi_table_zip(name))
    mdt_before = {f: (table / MDT / f).read_bytes() for f in _mdt_files(table)}
    ids = sorted(before.column("id").to_pylist())
    options = {**MAINTAIN, "hoodie.metadata.compact.max.delta.commits": "1"} if mdt_compactions else MAINTAIN
    write(LakeTable.open(table), _batch(before, [ids[0], 801], 1), "upsert", options=options)
    done = write(LakeTable.open(table), _batch(before, [802], 1), "insert", options=options)
    assert (done.metadata_compaction is not None) is mdt_compactions
    restore(LakeTable.open(table), point, MAINTAIN)
    rollbacks = [p.name.split(".")[0] for p in (table / ".hoodie").glob("*.rollback")]
    assert len(rollbacks) == 2
    corrections = [r for r in rollbacks if (table / MDT / f".hoodie/{r}.deltacommit").exists()]
    if mdt_compactions:
        assert corrections == rollbacks
    else:
        assert corrections == []
        assert {f: (table / MDT / f).read_bytes() for f in _mdt_files(table)} == mdt_before
    assert _data(assert_consistent(table)) == _data(before)
    assert main(["metadata-table", str(table), "--check"]) == 0


@pytest.mark.parametrize("name", ["morparquet_v6_nonpartitioned", "morparquet_v6_simplekeygen_nonhivestyle"])
@pytest.mark.parametrize("upserts", [1, 2])
def test_a_restore_past_a_data_compaction_deletes_the_logs_on_its_slices_and_the_mdt_forgets_them(
    hudi_table_zip, name: str, upserts: int
) -> None:
    """A savepoint, a data compaction C, upserts onto C's slices (each followed by an MDT
    compaction), then the restore. The upserts' rollbacks are corrected (the MDT's base file holds
    their records) and mark the log named after C's slice; C's rollback deletes its base files and
    that log: left, once archival passed C's rollback it would read as a committed slice without a
    base file, hiding the file group's rows. The MDT's base file and its logs (the marking
    rollbacks') both list the log, so C's rollback writes its tombstone twice: Hudi merges the logs
    first, where one tombstone goes with the logs' entry and leaves the base file's. After more
    writes and archival past C's rollback, we and hudi-rs read the savepoint's rows plus theirs."""
    table, before, point = _savepointed(hudi_table_zip(name))
    options = {**MAINTAIN, **_KEEP_FEW}
    compacted = run_compaction(
        LakeTable.open(table), {**options, "hoodie.compact.inline.max.delta.commits": "1"}
    )
    c = compacted[1].instant
    assert c is not None
    ids = sorted(before.column("id").to_pylist())
    for n in range(upserts):
        upsert = write(LakeTable.open(table), _batch(before, [ids[0]], n + 1), "upsert", options=options)
        assert upsert.metadata_compaction is not None
    on_slice = sorted(p for p in table.rglob(f".*_{c}.log.*") if ".hoodie" not in p.parts)
    assert len(on_slice) == upserts  # (our writer adds a log version per write)
    restore(LakeTable.open(table), point, options)
    assert not list(table.rglob(f"*_{c}.parquet"))
    assert not any(p.exists() for p in on_slice)
    rollbacks = sorted(p.name.split(".")[0] for p in (table / ".hoodie").glob("*.rollback"))
    (of_c,) = [r for r in rollbacks if c in (read_rollback(table, r)["commitsRollback"])]
    blocks = _mdt_blocks(table, of_c)
    assert [b.block_type for b in blocks] == [BlockType.HFILE_DATA, BlockType.HFILE_DATA]
    second = dict(decode_hfile_block(blocks[1]))
    partition = on_slice[0].parent.relative_to(table).as_posix()
    tombstones = {p.name: {"size": 0, "isDeleted": True} for p in on_slice}
    assert second[partition]["filesystemMetadata"] == tombstones
    assert _data(assert_consistent(table)) == _data(before)
    assert main(["metadata-table", str(table), "--check"]) == 0
    # The savepoint goes; more writes: the MDT compacts, the data timeline archives past C's rollback.
    delete_savepoint(LakeTable.open(table), point)
    for n in range(5):
        write(LakeTable.open(table), _batch(before, [ids[1]], 10 + n), "upsert", options=options)
        if n == 1:  # (archival keeps what the last clean retained)
            run_clean(LakeTable.open(table), options)
    assert not (table / ".hoodie" / f"{of_c}.rollback").exists()
    after = assert_consistent(table)
    assert len(after) == len(before)
    assert main(["metadata-table", str(table), "--check"]) == 0


@pytest.mark.parametrize("name", ["morparquet_v6_nonpartitioned", "morparquet_v6_simplekeygen_nonhivestyle"])
def test_a_restore_past_a_pending_compaction_deletes_the_marked_log_on_its_slice_and_the_mdt_forgets_it(
    hudi_table_zip, name: str
) -> None:
    """As above with C only scheduled, and the MDT initialised again after the upsert onto C's
    slice (its base file then holds the upsert's log): the upsert's rollback is corrected and marks
    the log; C's rollback (of a pending instant: no MDT deltacommit undone) deletes it and records
    its tombstone in the MDT, at the base path as in a partition."""
    table, before, point = _savepointed(hudi_table_zip(name))
    c = schedule_compaction(
        LakeTable.open(table), {**MAINTAIN, "hoodie.compact.inline.max.delta.commits": "1"}
    )
    assert c.instant is not None
    ids = sorted(before.column("id").to_pylist())
    write(LakeTable.open(table), _batch(before, [ids[0]], 1), "upsert", options=MAINTAIN)
    (on_slice,) = [p for p in table.rglob(f".*_{c.instant}.log.*") if ".hoodie" not in p.parts]
    shutil.rmtree(table / MDT)
    add_v6_metadata_table(table)
    restore(LakeTable.open(table), point, MAINTAIN)
    assert not on_slice.exists() and not list((table / ".hoodie").glob(f"{c.instant}.*"))
    assert _data(assert_consistent(table)) == _data(before)
    assert main(["metadata-table", str(table), "--check"]) == 0


@pytest.mark.parametrize("name", ["morparquet_v6_nonpartitioned"])
def test_a_crash_at_every_step_of_a_compactions_rollback_that_deletes_logs_on_its_slices(
    hudi_table_zip, tmp_path: Path, name: str
) -> None:
    """Forced rollbacks of an upsert onto a compaction's slices (corrected: an MDT compaction
    folded it in), then of the compaction, crashed after each durable step of the second; the next
    rollback finishes it: the compaction's base files and the marked log are gone, and the MDT
    lists the table (the two tombstones written once, with the rollback's deltacommit)."""
    template = hudi_table_zip(name)
    add_v6_metadata_table(template)
    before = _data(assert_consistent(template))
    options = {**MAINTAIN, "hoodie.metadata.compact.max.delta.commits": "1"}
    c = run_compaction(LakeTable.open(template), {**options, "hoodie.compact.inline.max.delta.commits": "1"})
    t = c[1].instant
    assert t is not None
    ids = sorted(read_snapshot(LakeTable.open(template)).column("id").to_pylist())
    batch = _batch(read_snapshot(LakeTable.open(template)), [ids[0]], 7)
    u = write(LakeTable.open(template), batch, "upsert", options=options).instant
    rollback(LakeTable.open(template), u, force=True, options=options)
    counting = crashing(LakeTable.open(shutil.copytree(template, tmp_path / "count")))
    rollback(counting, t, force=True, options=options)
    steps = steps_of(counting)
    assert any(".log." in s and "metadata" not in s for s in steps), steps  # the slice's log deleted
    for step in range(1, len(steps) + 1):
        path = shutil.copytree(template, tmp_path / f"crash{step}")
        with pytest.raises(SimulatedCrash):
            rollback(crashing(LakeTable.open(path), step), t, force=True, options=options)
        # A compaction run in between never redoes the compaction: once the rollback un-completed
        # it, that rollback is pending or (a crash after its completion) completed.
        redo = run_compaction(LakeTable.open(path), options)[1]
        assert (redo.outcome, redo.instant) == (Outcome.NO_WORK, None), (step, steps[step - 1])
        rollback(LakeTable.open(path), options=options)
        assert not list((path / ".hoodie").glob(f"{t}.*")), (step, steps[step - 1])
        assert not [p for p in path.rglob(f"*_{t}*") if ".hoodie" not in p.parts], (step, steps[step - 1])
        assert _data(assert_consistent(path)) == before, (step, steps[step - 1])
        assert main(["metadata-table", str(path), "--check"]) == 0, (step, steps[step - 1])


def test_archival_waits_on_a_log_left_on_a_rolled_back_compactions_slice_the_mdt_lists(
    hudi_table_zip,
) -> None:
    """A log an earlier version's restore left on a rolled-back compaction's slice, on a table
    whose MDT is kept: archival cannot delete it (the MDT lists it, archival writes nothing there)
    and does not move past the rollback; its reason names the log and the way out."""
    table, before, point = _savepointed(hudi_table_zip("morparquet_v6_nonpartitioned"))
    options = {**MAINTAIN, **_KEEP_FEW}
    c = run_compaction(LakeTable.open(table), {**options, "hoodie.compact.inline.max.delta.commits": "1"})[1]
    assert c.instant is not None
    ids = sorted(before.column("id").to_pylist())
    write(LakeTable.open(table), _batch(before, [ids[0]], 1), "upsert", options=options)
    (left,) = [p for p in table.rglob(f".*_{c.instant}.log.*") if ".hoodie" not in p.parts]
    kept = left.read_bytes()
    restore(LakeTable.open(table), point, options)
    left.write_bytes(kept)  # as the earlier version left it
    delete_savepoint(LakeTable.open(table), point)
    for n in range(5):
        write(LakeTable.open(table), _batch(before, [ids[1]], 10 + n), "upsert", options=options)
        if n == 1:
            run_clean(LakeTable.open(table), options)
    result = run_archival(LakeTable.open(table), options)
    assert result.outcome is ArchivalOutcome.NO_WORK
    assert f"{left.name} is left on the slices of compaction {c.instant}" in result.reason
    assert "lake metadata-table" in result.reason and "--drop" in result.reason
    assert left.exists()


def test_after_a_crash_that_left_a_rolled_back_compaction_pending_it_is_never_run_and_a_write_removes_it(
    hudi_table_zip, tmp_path: Path
) -> None:
    """The forced rollback of a compaction that corrects the MDT completes before the compaction's
    pending files go; a crash in between leaves the compaction pending with a completed rollback.
    Compaction passes it over (asked for by name: refused, naming the rollback), and the next write
    removes its pending files first, so its logs go on the older slices, and archival later finds
    nothing of it to expose."""
    table = hudi_table_zip("morparquet_v6_nonpartitioned")
    add_v6_metadata_table(table)
    options = {**MAINTAIN, **_KEEP_FEW}
    c = run_compaction(LakeTable.open(table), {**options, "hoodie.compact.inline.max.delta.commits": "1"})
    t = c[1].instant
    assert t is not None
    counting = crashing(LakeTable.open(shutil.copytree(table, tmp_path / "count")))
    rollback(counting, t, force=True, options=options)
    steps = steps_of(counting)
    (step,) = [n for n, s in enumerate(steps, 1) if s.endswith(".rollback") and "metadata" not in s]
    with pytest.raises(SimulatedCrash):
        rollback(crashing(LakeTable.open(table), step), t, force=True, options=options)
    assert sorted(p.name for p in (table / ".hoodie").glob(f"{t}.*")) == [
        f"{t}.compaction.inflight",
        f"{t}.compaction.requested",
    ]
    with pytest.raises(LakeError, match=rf"compaction {t} is rolled back by \d+.*lake rollback"):
        execute_compaction(LakeTable.open(table), t, options=options)
    before = read_snapshot(LakeTable.open(table))
    ids = sorted(before.column("id").to_pylist())
    write(LakeTable.open(table), _batch(before, [ids[0]], 5), "upsert", options=options)
    assert not list((table / ".hoodie").glob(f"{t}.*"))
    assert not [p for p in table.rglob(f"*_{t}*") if ".hoodie" not in p.parts]
    assert_consistent(table)


def read_rollback(table: Path, instant: str) -> dict:
    path = table / ".hoodie" / f"{instant}.rollback"
    return read_avro(path.read_bytes(), str(path))


def _mdt_blocks(table: Path, instant: str) -> list:
    """The blocks of MDT deltacommit ``instant`` in the files partition's logs."""
    found = []
    for log in sorted((table / MDT / "files").glob(f".{GROUP}_*.log.*")):
        found += [b for b in parse_log_bytes(log.read_bytes(), str(log)) if b.instant_time == instant]
    return found


def test_merge_small_files_keeps_a_v6_mdt(hudi_table_zip) -> None:
    """Partition commit's merge of small files on a v6 COW table: its replacecommit's MDT
    deltacommit (the new base file; the replaced ones listed until a clean) at its own time."""
    table = hudi_table_zip("cow_v6_simplekeygen_nonhivestyle")
    init = add_v6_metadata_table(table)
    before = assert_consistent(table)
    for n in range(3):
        write(LakeTable.open(table), _batch(before, [900 + n], 1), "insert", options=MAINTAIN)
    rows = assert_consistent(table)
    partition = str(rows.column("_hoodie_partition_path")[0].as_py())
    merge = {
        **MAINTAIN,
        "sink.partition-commit.policy.kind": "merge-small-files",
        "compaction.file-size": "4mb",
    }
    result = commit_partitions(LakeTable.open(table), [partition], merge)
    assert result.committed == (partition,)
    (replace,) = LakeTable.open(table).timeline().filter([Action.REPLACECOMMIT])
    assert f".hoodie/{replace.timestamp}.deltacommit" in _mdt_files(table)
    assert f"files/.{GROUP}_{init}.log.5_0-0-0" in _mdt_files(table)
    assert _data(assert_consistent(table)) == _data(rows)


def _blocks_of(table: Path, instant: str) -> list[str]:
    """The MDT log files holding a block of ``instant`` (a v6 log is named after its slice)."""
    found = []
    for log in sorted((table / MDT / "files").glob(".*.log.*")):
        if any(
            b.header.get(HeaderKey.INSTANT_TIME) == instant
            for b in parse_log_bytes(log.read_bytes(), str(log))
        ):
            found.append(log.name)
    return found


def test_crash_at_every_durable_step_of_a_maintained_v6_write(hudi_table_zip, tmp_path: Path) -> None:
    """A crash after any durable step of a maintained upsert (data instant, data files, the MDT
    deltacommit's requested/inflight/log/completed files, the data instant completed, the clean-up)
    leaves both readers on the rows before it (after it once its data instant completed) and the
    files partition equal to the listing; the next maintained write rolls the crashed one back
    (Spark's EAGER), its MDT deltacommit and log with it, and everything stays so."""
    template = hudi_table_zip("morparquet_v6_simplekeygen_nonhivestyle")
    add_v6_metadata_table(template)
    before = assert_consistent(template)
    ids = sorted(before.column("id").to_pylist())
    batch, second = _batch(before, [ids[0], 1001], 9), _batch(before, [1002], 9)
    counting = crashing(LakeTable.open(shutil.copytree(template, tmp_path / "count")))
    t = write(counting, batch, "upsert", options=MAINTAIN).instant
    steps = steps_of(counting)
    mdt_done = steps.index(f"create .hoodie/{t}.deltacommit") + 1  # the MDT's (relative to it)
    data_done = max(i for i, s in enumerate(steps, 1) if s == f"create .hoodie/{t}.deltacommit")
    assert data_done > mdt_done
    eager = {**MAINTAIN, "hoodie.cleaner.policy.failed.writes": "EAGER"}
    for step in range(1, len(steps) + 1):
        path = shutil.copytree(template, tmp_path / f"crash{step}")
        with pytest.raises(SimulatedCrash):
            write(crashing(LakeTable.open(path), step), batch, "upsert", options=MAINTAIN)
        crashed = [
            i
            for i in LakeTable.open(path).timeline().instants
            if i.timestamp > max(before.column("_hoodie_commit_time").to_pylist())
        ]
        expected = {*ids, 1001} if step >= data_done else set(ids)
        assert set(assert_consistent(path).column("id").to_pylist()) == expected, (step, steps[step - 1])
        write(LakeTable.open(path), second, "insert", options=eager)
        after = assert_consistent(path)
        assert set(after.column("id").to_pylist()) == expected | {1002}, (step, steps[step - 1])
        for instant in crashed:  # rolled back, or completed
            if not LakeTable.open(path).timeline().get(instant.timestamp):
                assert not _blocks_of(path, instant.timestamp), (step, steps[step - 1])
                assert not list((path / MDT / ".hoodie").glob(f"{instant.timestamp}.*"))
