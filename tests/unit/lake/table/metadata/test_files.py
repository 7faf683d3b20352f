"""The metadata table's ``files`` partition, merged as Hudi's readers merge it, equals a listing of
the data table's storage (files of completed instants) on every 1.x test table with an MDT; its
merge rules; and ``lake metadata-table --check`` names each difference exactly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from lake_processes import lake_all
from mdt_tables import MDT_TABLES

from airflow_lake_provider.lake.errors import CorruptDataFileError, TableConfigError, TableNotFoundError
from airflow_lake_provider.lake.format.hfile import Dialect, HFileContent, HFileSettings, write_hfile
from airflow_lake_provider.lake.log_file.hfile_block import (
    decode_hfile_block,
    encode_records,
    hfile_data_block,
)
from airflow_lake_provider.lake.log_file.log_format import BlockType, HeaderKey, parse_log_bytes
from airflow_lake_provider.lake.storage import open_storage
from airflow_lake_provider.lake.table.metadata.files import _combine, read_files_partition
from airflow_lake_provider.lake.table.metadata.listing import check_files_partition, list_table_files

SIMPLE = "mor_avro_v9_txns_simple_meta"
LAST = "20260307162620509"  # its last deltacommit: two new base files, in region=eu and region=us
LAST_FILES = {
    "region=eu": "694491b7-ed54-402d-ad59-c36ed6c1d6a2-0_0-263-694_20260307162620509.parquet",
    "region=us": "38396fa4-915f-483c-9bc0-a6edf6a0b941-0_1-263-695_20260307162620509.parquet",
}


@pytest.mark.parametrize("name", MDT_TABLES)
def test_files_partition_equals_the_storage_listing(hudi_table_zip, name: str) -> None:
    storage = open_storage(hudi_table_zip(name))
    listing = read_files_partition(storage)
    actual = list_table_files(storage)
    assert listing.files == actual
    assert set(listing.partitions) == set(actual)
    assert check_files_partition(storage).consistent


def test_files_partition_of_the_v8_table_exactly(hudi_table_zip) -> None:
    listing = read_files_partition(open_storage(hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")))
    group = "ccfdc9b6-b2d0-438f-a236-40b797bf07ea-0"
    assert listing.partitions == (".",)
    assert listing.files == {
        ".": {
            f".{group}_20260101054330718.log.1_0-88-300": 1755,
            f".{group}_20260101054332333.log.1_0-104-337": 1601,
            f".{group}_20260101054333805.log.1_0-120-380": 1765,
            f".{group}_20260101054335228.log.1_0-136-417": 1601,
            f".{group}_20260101054337037.log.1_0-167-518": 1767,
            f"{group}_0-149-448_20260101054335805.parquet": 437581,
            f"{group}_0-61-225_20260101054316354.parquet": 437945,
        }
    }
    # The MDT compaction at ...337083 completed before deltacommit ...337037 did: that one's log
    # joins the new slice (completion-time slicing), the older logs are in the base file.
    assert listing.base_file == ".hoodie/metadata/files/files-0000-0_22-161-506_20260101054337083.hfile"
    assert listing.log_files == (".hoodie/metadata/files/.files-0000-0_20260101054337037.log.1_4-175-537",)


def test_blocks_of_a_data_instant_that_did_not_complete_are_ignored(hudi_table_zip) -> None:
    table = hudi_table_zip(SIMPLE)
    storage = open_storage(table)
    before = read_files_partition(storage).files
    (table / ".hoodie" / "timeline" / f"{LAST}_20260307162621330.deltacommit").unlink()
    after = read_files_partition(storage).files
    assert {p: set(before[p]) - set(after[p]) for p in before} == {
        "region=apac": set(),
        "region=eu": {LAST_FILES["region=eu"]},
        "region=us": {LAST_FILES["region=us"]},
    }
    assert check_files_partition(storage).consistent  # storage lists only completed instants too


def test_blocks_of_an_mdt_deltacommit_that_did_not_complete_are_ignored(hudi_table_zip) -> None:
    table = hudi_table_zip(SIMPLE)
    (completed,) = (table / ".hoodie/metadata/.hoodie/timeline").glob(f"{LAST}_*.deltacommit")
    completed.unlink()  # the MDT deltacommit stays inflight, the data instant completed
    found = check_files_partition(open_storage(table))
    assert not found.consistent
    assert found.missing_files == tuple(
        (f"{p}/{f}", (table / p / f).stat().st_size) for p, f in sorted(LAST_FILES.items())
    )
    assert (found.extra_files, found.size_mismatches, found.missing_partitions) == ((), (), ())


def test_merge_keeps_tombstones_only_for_unknown_files_and_the_larger_size() -> None:
    older = {
        "type": 2,
        "filesystemMetadata": {"a": {"size": 5, "isDeleted": False}, "b": {"size": 7, "isDeleted": False}},
    }
    newer = {
        "type": 2,
        "filesystemMetadata": {
            "a": {"size": 3, "isDeleted": False},  # sizes only grow: max wins
            "b": {"size": 0, "isDeleted": True},  # deletes a known file: gone, no tombstone
            "c": {"size": 0, "isDeleted": True},  # deletes an unknown one: tombstone kept
        },
    }
    assert _combine(older, newer, "p")["filesystemMetadata"] == {
        "a": {"size": 5, "isDeleted": False},
        "c": {"size": 0, "isDeleted": True},
    }
    # ... so that the tombstone still removes the file from an older base record later.
    base = {"type": 2, "filesystemMetadata": {"c": {"size": 9, "isDeleted": False}}}
    assert _combine(base, _combine(older, newer, "p"), "p")["filesystemMetadata"] == {
        "a": {"size": 5, "isDeleted": False}
    }


def test_no_table_or_no_metadata_table_is_an_error(hudi_table_zip, tmp_path: Path) -> None:
    with pytest.raises(TableNotFoundError, match=r"is not a Hudi table"):
        read_files_partition(open_storage(tmp_path))
    table = hudi_table_zip("cow_v6_nonpartitioned")
    with pytest.raises(TableConfigError, match=r"has no metadata table"):
        read_files_partition(open_storage(table))


def test_cli_check_reports_each_difference_and_exits_1(hudi_table_zip) -> None:
    table = hudi_table_zip(SIMPLE)
    (good,) = lake_all(["metadata-table", str(table), "--check"])
    assert good.returncode == 0, good.stderr
    report = json.loads(good.stdout)
    assert (report["consistent"], report["partitions"], report["files"]) == (True, 3, 19)
    gone = "region=eu/c923cb31-a2d3-49c6-8f47-4be96502c239-0_0-27-52_20260307162557587.parquet"
    (table / gone).unlink()
    added = "region=us/0a0a0a0a-0000-0000-0000-000000000000-0_0-1-1_20260307162620509.parquet"
    (table / added).write_bytes(b"12345")
    grown = "region=eu/.c923cb31-a2d3-49c6-8f47-4be96502c239-0_20260307162609526.log.1_0-130-290"
    with (table / grown).open("ab") as f:
        f.write(b"xx")
    (table / "region=af").mkdir()
    shutil.copy(table / "region=us" / ".hoodie_partition_metadata", table / "region=af")
    new_partition_file = "region=af/1b1b1b1b-0000-0000-0000-000000000000-0_0-1-1_20260307162620509.parquet"
    (table / new_partition_file).write_bytes(b"123")
    ignored = "region=us/2c2c2c2c-0000-0000-0000-000000000000-0_0-1-1_20991231000000000.parquet"
    (table / ignored).write_bytes(b"1")  # no such completed instant: not a file of the table
    (bad,) = lake_all(["metadata-table", str(table), "--check"])
    assert bad.returncode == 1, bad.stderr
    report = json.loads(bad.stdout)
    assert report["consistent"] is False
    assert report["missing_files"] == [{"file": new_partition_file, "size": 3}, {"file": added, "size": 5}]
    assert report["extra_files"] == [{"file": gone, "size": 438580}]
    assert report["size_mismatches"] == [{"file": grown, "metadata_size": 1820, "storage_size": 1822}]
    assert report["missing_partitions"] == ["region=af"]
    assert report["extra_partitions"] == []
    # The stats partitions are checked too: the files added have no column stats, the one gone is
    # not compared, the grown log's records are the same; region=us's stats cannot be recomputed
    # (a file there is no parquet), region=af has none. Nothing is pending.
    assert report["column_stats"] == {
        "consistent": False,
        "files": 20,
        "missing_files": [new_partition_file, added],
        "stats_mismatches": [],
        "unreadable_files": [],
        "unverifiable_files": [],
    }
    stats = report["partition_stats"]
    assert (stats["partitions"], stats["missing_partitions"], stats["stats_mismatches"]) == (
        4,
        ["region=af"],
        [],
    )
    assert stats["unreadable_partitions"] == [
        f"region=us: {table / added}: unreadable parquet footer (Parquet file size is 5 bytes, smaller "
        "than the minimum file footer (8 bytes))"
    ]
    assert report["pending_instants"] == []


def test_cli_check_errors(hudi_table_zip) -> None:
    nometa = str(hudi_table_zip("cow_v6_nonpartitioned"))
    table = str(hudi_table_zip(SIMPLE))
    none, both = lake_all(
        ["metadata-table", nometa, "--check"], ["metadata-table", table, "--check", "--drop"]
    )
    assert (none.returncode, none.stdout) == (1, "")
    assert none.stderr == f"lake: error: {nometa} has no metadata table ({nometa}/.hoodie/metadata)\n"
    assert (both.returncode, both.stderr) == (1, "lake: error: --check and --drop cannot be combined\n")


def test_v6_layout_1_slice_by_base_instant_and_suffixed_instants(hudi_table_zip) -> None:
    """A v6 table (timeline layout 1) with an MDT built by our writers: the slice is the latest
    completed base instant's (a log names it), blocks count for completed data instants and the
    MDT's own (initialisation, or a data time plus a 3-digit suffix), not for others."""

    v8 = hudi_table_zip("mdt_basic_mor_avro_v8_nonpartitioned")
    sample = v8 / ".hoodie/metadata/files/.files-0000-0_20260101054337037.log.1_4-175-537"
    (block,) = [
        b for b in parse_log_bytes(sample.read_bytes(), str(sample)) if b.block_type == BlockType.HFILE_DATA
    ]
    schema = block.header[HeaderKey.SCHEMA]
    template = decode_hfile_block(block)[0][1]

    def record(kind: int, files: dict[str, int | None]) -> dict:
        listing = {n: {"size": s or 0, "isDeleted": s is None} for n, s in files.items()}
        return {**template, "type": kind, "filesystemMetadata": listing}

    table = hudi_table_zip("moravro_v6_trips_8i1u")
    storage = open_storage(table)
    actual = list_table_files(storage)
    assert set(actual) == {"city=chennai", "city=san_francisco", "city=sao_paulo"}
    init, first, second = "00000000000000010", "20250331030642808", "20250331030645735"
    mdt = table / ".hoodie" / "metadata"
    (mdt / ".hoodie").mkdir(parents=True)
    (mdt / ".hoodie" / "hoodie.properties").write_text("hoodie.table.name=t_metadata\n")
    for instant in (init, "00000000000000005", first, f"{second}002", second, "20991231000000000"):
        (mdt / ".hoodie" / f"{instant}.deltacommit").write_text("{}")
    (mdt / "files").mkdir()
    chennai = sorted(actual["city=chennai"].items())
    base = [
        ("__all_partitions__", record(1, {"city=chennai": 0, "city=gone": 0})),
        ("city=chennai", record(2, {"ghost.parquet": 5, **dict(chennai[:1])})),
    ]
    settings = HFileSettings(dialect=Dialect.HBASE)
    content = HFileContent(tuple(encode_records(base, schema)), ((b"schema", schema.encode()),), ())
    (mdt / "files" / f"files-0000-0_0-0-0_{init}.hfile").write_bytes(write_hfile(content, settings))
    # An older slice, whose records must not count.
    stale = HFileContent(
        tuple(encode_records([("city=old", record(2, {"x": 1}))], schema)), content.file_info, ()
    )
    (mdt / "files" / "files-0000-0_0-0-0_00000000000000005.hfile").write_bytes(write_hfile(stale, settings))
    others = {p: f for p, f in actual.items() if p != "city=chennai"}
    blocks = [
        hfile_data_block(
            [
                ("__all_partitions__", record(1, dict.fromkeys(others, 0))),
                *((p, record(2, f)) for p, f in others.items()),
            ],
            schema,
            first,
            settings,
        ),
        hfile_data_block([("city=chennai", record(2, dict(chennai[1:])))], schema, second, settings),
        # the MDT's own instant (a suffix on a data time): deletes the ghost and the gone partition
        hfile_data_block(
            [
                ("__all_partitions__", record(1, {"city=gone": None})),
                ("city=chennai", record(2, {"ghost.parquet": None})),
            ],
            schema,
            f"{second}002",
            settings,
        ),
        # a data instant that never completed
        hfile_data_block(
            [("city=chennai", record(2, {"late.parquet": 9}))], schema, "20991231000000000", settings
        ),
    ]
    (mdt / "files" / f".files-0000-0_{init}.log.1_0-0-0").write_bytes(b"".join(blocks))
    stale_block = hfile_data_block(
        [("city=chennai", record(2, {"stale.parquet": 3}))], schema, first, settings
    )
    (mdt / "files" / ".files-0000-0_00000000000000005.log.1_0-0-0").write_bytes(stale_block)
    listing = read_files_partition(storage)
    assert listing.files == actual
    assert listing.partitions == ("city=chennai", "city=san_francisco", "city=sao_paulo")
    assert listing.base_file == f".hoodie/metadata/files/files-0000-0_0-0-0_{init}.hfile"
    assert check_files_partition(storage).consistent


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            ("hoodie.timeline.layout.version=2", "hoodie.timeline.layout.version=1"),
            "hoodie.timeline.layout.version=1 must be 2 for table version 9",
        ),
        (
            ("hoodie.table.version=9", "hoodie.table.version=6"),
            "hoodie.timeline.layout.version=2 must be 1 for table version 6",
        ),
        (
            ("hoodie.table.version=9", "hoodie.table.version=10"),
            "hoodie.table.version=10 is not supported (only table versions 6, 8 and 9)",
        ),
    ],
)
def test_cli_check_refuses_a_version_and_layout_that_do_not_go_together(
    hudi_table_zip, edit: tuple[str, str], message: str
) -> None:
    """Before, layout 1 on a version 9 table read the timeline from ``.hoodie/``: no completed
    instant, so every file was dropped and the check reported the MDT inconsistent (exit 1, no
    error); the others checked a table no other command opens and said it was consistent."""
    table = hudi_table_zip(SIMPLE)
    props = table / ".hoodie" / "hoodie.properties"
    text = props.read_text()
    assert edit[0] in text
    props.write_text(text.replace(edit[0], edit[1]))
    (found,) = lake_all(["metadata-table", str(table), "--check"])
    assert (found.returncode, found.stdout) == (1, "")
    assert found.stderr == f"lake: error: {props}: {message}\n"


def test_a_partition_folder_without_files_of_completed_instants_is_not_missing(hudi_table_zip) -> None:
    """A write that created a partition, rolled back: its folder and partition metadata stay (as
    Hudi leaves them), its files and its MDT records go, so neither Hudi's MDT nor ours lists the
    partition; the check agrees. A file of a completed instant there makes it missing again."""
    table = hudi_table_zip(SIMPLE)
    (table / "region=af").mkdir()
    shutil.copy(table / "region=us" / ".hoodie_partition_metadata", table / "region=af")
    (table / "region=af/3c3c3c3c-0000-0000-0000-000000000000-0_0-1-1_20991231000000000.parquet").write_bytes(
        b"1"
    )
    found = check_files_partition(open_storage(table))
    assert (found.consistent, found.missing_partitions) == (True, ())
    (table / f"region=af/1b1b1b1b-0000-0000-0000-000000000000-0_0-1-1_{LAST}.parquet").write_bytes(b"123")
    assert check_files_partition(open_storage(table)).missing_partitions == ("region=af",)


@pytest.mark.parametrize("completed", [True, False])
def test_a_damaged_log_of_a_completed_v9_mdt_deltacommit_is_refused(hudi_table_zip, completed: bool) -> None:
    """Hudi 1.x names an MDT log after the deltacommit that wrote it: bytes lost from the log of a
    completed one would hide its records from every reader (refused, naming it); the torn log of
    a deltacommit that never completed is skipped, as readers skip it."""
    table = hudi_table_zip(SIMPLE)
    (log,) = (table / ".hoodie/metadata/files").glob(f".files-0000-0_{LAST}.log.*")
    data = log.read_bytes()
    log.write_bytes(data[:-10])
    storage = open_storage(table)
    if not completed:
        (done,) = (table / ".hoodie/metadata/.hoodie/timeline").glob(f"{LAST}_*.deltacommit")
        done.unlink()
        assert LAST_FILES["region=eu"] not in read_files_partition(storage).files["region=eu"]
        return
    with pytest.raises(CorruptDataFileError) as refused:
        read_files_partition(storage)
    assert str(refused.value).startswith(
        f"{log}: damaged (offset 0: block length {len(data) - 14} runs past end of file "
        f"({len(data) - 10} bytes; truncated)): the metadata table's completed deltacommit(s) {LAST} "
        f"have no readable block in {table / '.hoodie/metadata/files'}, "
    )
