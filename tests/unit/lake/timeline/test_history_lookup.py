"""What reads ask of the LSM history (``History.entries_between``, ``ArchivedLookup``): read when
first asked, only the files whose name range can hold the times asked for, and kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_lake_provider.lake.timeline.history.lookup import ArchivedLookup, completed_instant
from airflow_lake_provider.lake.timeline.history.reader import History
from airflow_lake_provider.lake.timeline.history.records import ArchivedEntry, ArchivedInstant
from airflow_lake_provider.lake.timeline.history.writer import HistoryWriter
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from tests.unit.lake.timeline.test_history import CountingStorage, entry, t


def done(n: int) -> str:
    """The completion time of instant ``n`` in these tests (500 ms after its request)."""
    return t(n + 500)


def delta(n: int) -> ArchivedEntry:
    return ArchivedEntry(ArchivedInstant(t(n), done(n), "deltacommit"), b"meta-%d" % n)


@pytest.fixture
def storage(tmp_path: Path) -> CountingStorage:
    storage = CountingStorage(tmp_path)
    writer = HistoryWriter(storage)
    for first in (0, 10, 20):
        writer.append([delta(first + i) for i in range(5)])
    storage.reads.clear()
    return storage


def _parquet(storage: CountingStorage) -> list[str]:
    return [r.rsplit("/", 1)[-1] for r in storage.reads if r.endswith(".parquet")]


def test_entries_between_is_inclusive_and_reads_only_overlapping_files(storage: CountingStorage) -> None:
    assert History(storage).entries_between(t(3), t(11)) == [delta(n) for n in (3, 4, 10, 11)]
    assert _parquet(storage) == [f"{t(0)}_{t(4)}_0.parquet", f"{t(10)}_{t(14)}_0.parquet"]
    assert History(storage).entries_between(None, t(1)) == [delta(0), delta(1)]
    assert History(storage).entries_between(t(24), None) == [delta(24)]


def test_completion_times_are_read_downward_from_the_first_miss_and_kept(storage: CountingStorage) -> None:
    lookup = ArchivedLookup(storage, before=t(30))
    assert storage.reads == []  # opening it reads nothing
    assert lookup.completion_time(t(21)) == done(21)
    assert _parquet(storage) == [f"{t(20)}_{t(24)}_0.parquet"]
    storage.reads.clear()
    assert lookup.completion_time(t(23)) == done(23)  # already read: nothing more
    assert lookup.completion_time(t(7)) is None  # never archived (no such instant)
    # [t(7), t(21)] (the history's ranges are inclusive: the file holding t(21) again)
    assert _parquet(storage) == [f"{t(10)}_{t(14)}_0.parquet", f"{t(20)}_{t(24)}_0.parquet"]
    storage.reads.clear()
    assert lookup.completion_time(t(3)) == done(3)
    assert _parquet(storage) == [f"{t(0)}_{t(4)}_0.parquet"]  # [t(3), t(7)]
    storage.reads.clear()
    assert lookup.completion_time(t(30)) is None  # the active timeline's: the history is not asked
    assert storage.reads == []


def test_entries_until_and_the_instants_they_record(storage: CountingStorage) -> None:
    lookup = ArchivedLookup(storage, before=t(22))
    assert lookup.entries_until(t(2)) == [delta(0), delta(1), delta(2)]
    assert [e.instant.instant_time for e in lookup.entries_until(t(30))] == [
        t(n) for n in (0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 20, 21)
    ]  # what is older than the active timeline only
    assert [i.timestamp for i in lookup.instants()][-2:] == [t(20), t(21)]
    assert completed_instant(delta(3).instant) == Instant(t(3), State.COMPLETED, Action.DELTACOMMIT)
    assert completed_instant(delta(3).instant).completion_time == done(3)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("action", "expected"),
    [("compaction", Action.COMMIT), ("clustering", Action.REPLACECOMMIT), ("bogus", None)],
)
def test_an_archived_pending_action_name_is_the_action_it_completed_as(
    action: str, expected: Action | None
) -> None:
    found = completed_instant(ArchivedInstant(t(1), t(2), action))
    assert (found.action if found else None) is expected


def test_the_history_folder_is_the_one_given(tmp_path: Path) -> None:
    storage = CountingStorage(tmp_path)
    HistoryWriter(storage, "elsewhere").append([entry(1)])
    assert ArchivedLookup(storage, None, "elsewhere").instants()[0].timestamp == t(1)
    assert ArchivedLookup(storage, None).instants() == []


def test_a_lookup_pickles_as_its_location_and_answers_on_the_other_side(tmp_path: Path) -> None:
    """A v8 write's plan ships the timeline (and so its lookup) to Spark tasks: the lock in it
    failed the Spark write job with "cannot pickle '_thread.lock' object"."""
    import pickle

    from airflow_lake_provider.lake.storage import LocalStorage

    storage = LocalStorage(tmp_path)
    HistoryWriter(storage).append([delta(i) for i in range(3)])
    lookup = ArchivedLookup(storage, before=t(30))
    assert lookup.completion_time(t(1)) == done(1)  # its caches filled: they do not travel
    copy = pickle.loads(pickle.dumps(lookup))
    assert (copy.storage.root, copy.folder, copy.before) == (storage.root, lookup.folder, t(30))
    assert copy.completion_time(t(2)) == done(2)
