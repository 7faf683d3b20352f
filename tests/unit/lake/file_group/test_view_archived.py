"""``missing_slices`` as of an instant only the LSM history holds (layout 2): it decodes only the
archived commits that can have written a slice a clean took (a read as of the newest of 10,000
archived instants decoded every one of them), and finds exactly what decoding every commit finds.

Tables written here (version 8, copy-on-write, one partition per key), their oldest instants archived
as Hudi's archiver does (``tests/history_support.py``).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.errors import SnapshotCleanedError
from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import Instant, InstantClock
from tests.history_support import archive_oldest

START = dt.datetime(2025, 3, 1, tzinfo=dt.timezone.utc)


def _table(path: Path) -> LakeTable:
    ticks = iter(range(10**6))
    return LakeTable.create(
        path,
        table_version=8,
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        clock=InstantClock(now=lambda: START + dt.timedelta(seconds=next(ticks))),
    )


def _write(table: LakeTable, key: str, ts: int, op: str = "upsert") -> str:
    batch = pa.table({"id": [key], "ts": pa.array([ts], pa.int64()), "p": [key]})
    return write(table, batch, op).instant


def _decoding(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The times of the commits whose metadata is decoded from now on."""
    decoded: list[str] = []
    real = Timeline.commit_metadata

    def counted(self: Timeline, instant: Instant):  # noqa: ANN202 - the real method's type
        decoded.append(instant.timestamp)
        return real(self, instant)

    monkeypatch.setattr(Timeline, "commit_metadata", counted)
    return decoded


def _every_group_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """``missing_slices`` as before the bound: every group, every commit up to the instant."""
    monkeypatch.setattr(FileSystemView, "_at_risk", lambda self, instant, only: (None, ""))


def test_as_of_the_newest_archived_instant_no_archived_commit_is_decoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No file group was rewritten after the instant: a clean cannot have taken the slice a read as
    of it needs, which is the one a snapshot read takes. The groups written since are new (their
    commits, on the active timeline, say so)."""
    table = _table(tmp_path / "t")
    times = [_write(table, f"k{n}", n, "insert") for n in range(12)]
    assert archive_oldest(table.base_path, 8) == times[:8]
    newest = times[7]
    timeline = table.timeline().with_history(newest)
    view = table.file_system_view(timeline)
    decoded = _decoding(monkeypatch)
    assert view.missing_slices(newest) == []
    assert [t for t in decoded if t <= newest] == []  # before: all 8
    assert sorted(set(decoded)) == times[8:]  # each group's first commit, active: read once
    assert read_snapshot(table, newest).num_rows == 8


def test_as_of_an_archived_instant_a_cleaned_slice_refuses_the_read_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clean took the slice of k0 that the first commits read: a read as of any of them is
    refused with the message decoding every commit gives; the later ones read."""
    table = _table(tmp_path / "t")
    first = [_write(table, "k0", 1, "insert"), _write(table, "k1", 1, "insert")]
    rewrite = _write(table, "k0", 2)
    one_version = {
        "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
        "hoodie.cleaner.fileversions.retained": "1",
    }
    cleaned = run_clean(table, one_version)
    assert cleaned.deleted_files == 1
    later = [_write(table, f"k{n}", n, "insert") for n in range(2, 6)]
    assert archive_oldest(table.base_path, 7) == [*first, rewrite, cleaned.instant, *later[:3]]
    messages: dict[str, str] = {}
    for instant in [*first, rewrite, *later[:3]]:
        try:
            messages[instant] = f"{read_snapshot(table, instant).num_rows} rows"
        except SnapshotCleanedError as exc:
            messages[instant] = str(exc)
    _every_group_checked(monkeypatch)
    for instant, message in messages.items():
        try:
            expected = f"{read_snapshot(table, instant).num_rows} rows"
        except SnapshotCleanedError as exc:
            expected = str(exc)
        assert message == expected, instant
    (k0,) = [k for k in table.file_system_view().groups if k[0] == "k0"]
    refused = (
        f"{table.uri}: cannot read as of {{}}: a clean removed the file slice {first[0]} of file group "
        f"{k0[1]} in partition k0 (1 slice in all); instants from "
    )
    assert [messages[t][: len(refused) + 15] for t in first] == [refused.format(t) for t in first]
    assert [messages[t] for t in [rewrite, *later[:3]]] == ["2 rows", "3 rows", "4 rows", "5 rows"]
