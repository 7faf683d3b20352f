"""The LSM history of Hudi 1.x tables: what the reader sees, and what append/compact/clean write."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_lake_provider.lake.errors import ArchivalError, CorruptTimelineFileError
from airflow_lake_provider.lake.storage import LocalStorage
from airflow_lake_provider.lake.timeline.history.layout import HISTORY_DIR
from airflow_lake_provider.lake.timeline.history.reader import History
from airflow_lake_provider.lake.timeline.history.records import ArchivedEntry, ArchivedInstant
from airflow_lake_provider.lake.timeline.history.writer import HistoryWriter

H = HISTORY_DIR


def t(n: int) -> str:
    """Requested time ``n`` (17 digits, as Hudi 1.x writes them)."""
    return f"20250101{n:09d}"


def entry(n: int, action: str = "commit") -> ArchivedEntry:
    plan = b"plan-%d" % n if action == "clean" else None
    return ArchivedEntry(ArchivedInstant(t(n), t(n), action), b"meta-%d" % n, plan)


def completed(n: int, action: str = "commit") -> ArchivedInstant:
    return ArchivedInstant(t(n), t(n), action)


class CountingStorage(LocalStorage):
    """A local storage that records which files are read (whole or in part) and listed."""

    def __init__(self, root: Any) -> None:
        super().__init__(root)
        self.reads: list[str] = []

    def read(self, rel: str) -> bytes:
        self.reads.append(rel)
        return super().read(rel)

    def open_input(self, rel: str) -> Any:
        self.reads.append(rel)
        return super().open_input(rel)

    def list_names(self, rel: str = "") -> list[str]:
        self.reads.append(f"list {rel}")
        return super().list_names(rel)


def files(storage: LocalStorage) -> list[str]:
    return sorted(storage.list_names(H))


@pytest.fixture
def storage(tmp_path: Path) -> CountingStorage:
    return CountingStorage(tmp_path)


def test_an_empty_history_holds_nothing(storage: CountingStorage) -> None:
    history = History(storage)
    assert history.instants() == []
    assert history.entry(t(1)) is None
    assert history.snapshot.version == 0
    assert history.time_range is None


def test_append_publishes_a_level0_file_a_manifest_and_the_version(storage: CountingStorage) -> None:
    writer = HistoryWriter(storage)
    name = writer.append([entry(1), entry(2, "clean"), entry(3, "deltacommit")])
    assert name == f"{t(1)}_{t(3)}_0.parquet"
    assert files(storage) == [name, "_version_", "manifest_1"]
    assert storage.read(f"{H}/_version_") == b"1"
    size = storage.size(f"{H}/{name}")
    assert storage.read(f"{H}/manifest_1").decode() == (
        f'{{\n  "files" : [ {{\n    "fileName" : "{name}",\n    "fileLen" : {size}\n  }} ]\n}}'
    )
    writer.append([entry(4)])
    history = History(storage)
    assert history.snapshot.version == 2
    assert history.instants() == [
        completed(1),
        completed(2, "clean"),
        completed(3, "deltacommit"),
        completed(4),
    ]
    assert history.entry(t(2)) == ArchivedEntry(completed(2, "clean"), b"meta-2", b"plan-2")
    assert history.entry(t(3)) == ArchivedEntry(completed(3, "deltacommit"), b"meta-3", None)
    assert history.entry(t(2), "commit") is None
    assert history.time_range == (t(1), t(4))


def test_a_time_range_reads_only_the_files_whose_names_overlap_it(storage: CountingStorage) -> None:
    writer = HistoryWriter(storage)
    for first in (0, 10, 20):
        writer.append([entry(first + i) for i in range(5)])
    storage.reads.clear()
    assert History(storage).instants(t(12), t(21)) == [completed(n) for n in (12, 13, 14, 20, 21)]
    parquet = [r for r in storage.reads if r.endswith(".parquet")]
    assert parquet == [f"{H}/{t(10)}_{t(14)}_0.parquet", f"{H}/{t(20)}_{t(24)}_0.parquet"]
    storage.reads.clear()
    assert History(storage).entry(t(3)) == entry(3)
    assert [r for r in storage.reads if r.endswith(".parquet")] == [f"{H}/{t(0)}_{t(4)}_0.parquet"]


def test_opening_a_history_reads_nothing_and_its_range_reads_no_parquet(storage: CountingStorage) -> None:
    HistoryWriter(storage).append([entry(1), entry(2)])
    storage.reads.clear()
    history = History(storage)
    assert storage.reads == []
    assert history.time_range == (t(1), t(2))
    assert storage.reads == [f"{H}/_version_", f"{H}/manifest_1"]
    assert history.entry(t(7)) is None  # outside every file's name range: no file opened
    assert storage.reads == [f"{H}/_version_", f"{H}/manifest_1"]


def test_files_the_latest_manifest_does_not_name_do_not_count(storage: CountingStorage) -> None:
    writer = HistoryWriter(storage)
    writer.append([entry(1)])
    writer.append([entry(2)])
    # A crashed append: its file and its manifest are there, the version switch is not.
    manifest_2 = storage.read(f"{H}/manifest_2")
    storage.write(f"{H}/_version_", b"1")
    assert History(storage).instants() == [completed(1)]
    # Without a readable _version_, the newest manifest decides (Hudi's fallback).
    storage.write(f"{H}/_version_", b"not a number")
    assert History(storage).instants() == [completed(1), completed(2)]
    storage.delete(f"{H}/_version_")
    assert History(storage).instants() == [completed(1), completed(2)]
    assert storage.read(f"{H}/manifest_2") == manifest_2


def test_rerunning_an_append_already_published_writes_nothing(storage: CountingStorage) -> None:
    writer = HistoryWriter(storage)
    writer.append([entry(1), entry(2)])
    before = {n: storage.read(f"{H}/{n}") for n in files(storage)}
    writer.append([entry(1), entry(2)])
    assert {n: storage.read(f"{H}/{n}") for n in files(storage)} == before


@pytest.mark.parametrize(
    ("batch", "message"),
    [([], "nothing to archive"), ([entry(2), entry(1)], "requested-time order")],
)
def test_bad_appends_are_refused_and_change_nothing(
    storage: CountingStorage, batch: list[ArchivedEntry], message: str
) -> None:
    with pytest.raises(ArchivalError, match=message):
        HistoryWriter(storage).append(batch)
    assert files(storage) == []


def test_ten_level0_files_compact_into_one_level1_file_and_the_old_ones_are_cleaned(
    storage: CountingStorage,
) -> None:
    writer = HistoryWriter(storage)
    for n in range(10):
        writer.append([entry(2 * n), entry(2 * n + 1)])
        result = writer.compact()
        if n < 9:
            assert result.written == ()
    level1 = f"{t(0)}_{t(19)}_1.parquet"
    assert result.written == (level1,)
    assert result.replaced == (tuple(f"{t(2 * n)}_{t(2 * n + 1)}_0.parquet" for n in range(10)),)
    assert result.version == 11
    # Cleaning keeps 3 snapshots plus one per level compacted (manifests 8..11): manifest 10 still
    # names the ten level-0 files.
    level0 = [f"{t(2 * n)}_{t(2 * n + 1)}_0.parquet" for n in range(10)]
    manifests = ["manifest_8", "manifest_9", "manifest_10", "manifest_11"]
    assert files(storage) == sorted([level1, *level0, "_version_", *manifests])
    history = History(storage)
    assert [f.name for f in history.snapshot.files] == [level1]
    assert history.instants() == [completed(n) for n in range(20)]
    assert history.entry(t(13)) == entry(13)
    # Two archivals later no kept manifest names them: the cleaning deletes them.
    for n in (20, 21):
        writer.append([entry(n)])
        writer.compact()
    later = [f"{t(n)}_{t(n)}_0.parquet" for n in (20, 21)]
    assert files(storage) == sorted(
        [level1, *later, "_version_", "manifest_11", "manifest_12", "manifest_13"]
    )
    assert History(storage).instants() == [completed(n) for n in range(22)]


def test_compaction_cascades_through_the_levels(storage: CountingStorage) -> None:
    writer = HistoryWriter(storage, batch=2)
    for n in range(4):
        writer.append([entry(n)])
        writer.compact()
    assert [f.name for f in History(storage).snapshot.files] == [f"{t(0)}_{t(3)}_2.parquet"]
    assert History(storage).instants() == [completed(n) for n in range(4)]


def test_compaction_stops_taking_files_past_the_size_limit(storage: CountingStorage) -> None:
    writer = HistoryWriter(storage, batch=4)
    for n in range(4):
        writer.append([entry(n)])
    sizes = [f.size for f in History(storage).snapshot.by_level(0)]
    # Files are taken while the total taken so far is at most the limit: three here.
    limited = HistoryWriter(storage, batch=4, max_compaction_bytes=sizes[0] + sizes[1])
    assert limited.compact().written == (f"{t(0)}_{t(2)}_1.parquet",)
    assert sorted(f.name for f in History(storage).snapshot.files) == [
        f"{t(0)}_{t(2)}_1.parquet",
        f"{t(3)}_{t(3)}_0.parquet",
    ]
    # One file alone over the limit: nothing to compact.
    for n in range(4, 8):
        writer.append([entry(n)])
    assert HistoryWriter(storage, batch=4, max_compaction_bytes=0).compact().written == ()


def test_cleaning_deletes_parquet_files_no_kept_manifest_names(storage: CountingStorage) -> None:
    writer = HistoryWriter(storage)
    storage.write(f"{H}/{t(90)}_{t(91)}_0.parquet", b"left by a crashed archival")
    storage.write(f"{H}/notes.txt", b"not ours")
    for n in range(4):
        writer.append([entry(n)])
    deleted = writer.clean()
    assert deleted == ["manifest_1", f"{t(90)}_{t(91)}_0.parquet"]
    assert "notes.txt" in files(storage)
    assert History(storage).instants() == [completed(n) for n in range(4)]


def test_a_manifest_that_is_not_json_is_named_in_the_error(storage: CountingStorage) -> None:
    HistoryWriter(storage).append([entry(1)])
    storage.write(f"{H}/manifest_1", b"{not json")
    with pytest.raises(CorruptTimelineFileError, match=r"history/manifest_1: not an LSM timeline manifest"):
        History(storage).instants()


def test_a_version_naming_a_missing_manifest_is_named_in_the_error(storage: CountingStorage) -> None:
    HistoryWriter(storage).append([entry(1)])
    storage.write(f"{H}/_version_", b"7")
    with pytest.raises(CorruptTimelineFileError, match=r"history/manifest_7: .* names snapshot 7"):
        History(storage).instants()


def test_a_damaged_parquet_file_is_named_in_the_error(storage: CountingStorage) -> None:
    name = HistoryWriter(storage).append([entry(1)])
    storage.write(f"{H}/{name}", b"garbage")
    with pytest.raises(CorruptTimelineFileError, match=rf"{name}: not a readable LSM timeline file"):
        History(storage).instants()
    storage.delete(f"{H}/{name}")
    with pytest.raises(CorruptTimelineFileError, match=rf"{name}: named by LSM timeline snapshot 1"):
        History(storage).instants()


def test_an_instant_found_in_two_files_counts_once(storage: CountingStorage) -> None:
    writer = HistoryWriter(storage)
    writer.append([entry(1), entry(2)])
    writer.append([entry(2), entry(3)])  # a retried archival that had already published entry 2
    history = History(storage)
    assert history.instants() == [completed(1), completed(2), completed(3)]
    assert history.entries(t(2)) == [entry(2)]


def test_the_history_works_through_an_s3_storage(s3_bucket: str) -> None:
    from airflow_lake_provider.lake.storage.s3 import S3Storage

    storage = S3Storage(f"s3://{s3_bucket}/t")
    writer = HistoryWriter(storage, batch=3)
    for n in range(4):
        writer.append([entry(2 * n), entry(2 * n + 1, "clean")])
        writer.compact()
    history = History(storage)
    assert sorted(f.name for f in history.snapshot.files) == [
        f"{t(0)}_{t(5)}_1.parquet",
        f"{t(6)}_{t(7)}_0.parquet",
    ]
    assert history.instants(t(3), t(6)) == [
        completed(3, "clean"),
        completed(4),
        completed(5, "clean"),
        completed(6),
    ]
    assert history.entry(t(5)) == entry(5, "clean")
