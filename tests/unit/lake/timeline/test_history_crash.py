"""Crashes while the LSM history is written: readers see the old or the new instants, never a mix,
and the archiver's retry completes the change."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from crash_support import crashing, steps_of
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_lake_provider.lake.storage import CrashInjector, LocalStorage, SimulatedCrash, Storage
from airflow_lake_provider.lake.timeline.history.layout import HISTORY_DIR, parse_data_file
from airflow_lake_provider.lake.timeline.history.reader import History
from airflow_lake_provider.lake.timeline.history.records import ArchivedEntry, ArchivedInstant
from airflow_lake_provider.lake.timeline.history.writer import HistoryWriter


def t(n: int) -> str:
    return f"20250101{n:09d}"


def entries(first: int, count: int) -> list[ArchivedEntry]:
    return [
        ArchivedEntry(ArchivedInstant(t(n), t(n), "deltacommit"), b"meta-%d" % n, None)
        for n in range(first, first + count)
    ]


class Archiver:
    """The history side of Hudi's archival, in its order: append the instants, delete them from
    the active timeline (here: forget them), then compact and clean. A run after a crash appends
    only the instants still on the active timeline."""

    def __init__(self, storage: Storage, batch: int = 10) -> None:
        self.writer = HistoryWriter(storage, batch=batch)
        self.active: list[ArchivedEntry] = []

    def run(self, batch: list[ArchivedEntry] | None = None) -> None:
        if batch is not None:
            self.active = batch
        if self.active:
            self.writer.append(self.active)
            self.active = []
        self.writer.compact()


def archive(storage: Storage, batch: list[ArchivedEntry]) -> Archiver:
    archiver = Archiver(storage)
    archiver.run(batch)
    return archiver


def readable(storage: LocalStorage) -> list[str]:
    return [i.instant_time for i in History(storage).instants()]


def _no_instant_twice(storage: LocalStorage) -> bool:
    history = History(storage)
    rows = [i for f in history.snapshot.files for i in history.read_file(f).column("instantTime").to_pylist()]
    return len(rows) == len(set(rows))


def unreferenced_parquet(storage: LocalStorage) -> set[str]:
    named = {f.name for f in History(storage).snapshot.files}
    return {n for n in storage.list_names(HISTORY_DIR) if parse_data_file(n) and n not in named}


def test_a_crash_at_each_durable_step_of_an_archival_leaves_the_old_or_the_new_instants(
    tmp_path: Path,
) -> None:
    # Nine level-0 files: the tenth archival also compacts level 0 into level 1 and cleans.
    base = LocalStorage(tmp_path / "base")
    for n in range(9):
        archive(base, entries(3 * n, 3))
    old = readable(base)
    new = old + [t(n) for n in range(27, 30)]
    shutil.copytree(tmp_path / "base", tmp_path / "probe")
    probe = crashing(LocalStorage(tmp_path / "probe"))
    archive(probe, entries(27, 3))
    steps = steps_of(probe)
    assert steps[:3] == [
        f"create {HISTORY_DIR}/{t(27)}_{t(29)}_0.parquet",
        f"create {HISTORY_DIR}/manifest_10",
        f"write {HISTORY_DIR}/_version_",
    ]
    assert f"create {HISTORY_DIR}/{t(0)}_{t(29)}_1.parquet" in steps
    seen = []
    for k in range(1, len(steps) + 1):
        shutil.copytree(tmp_path / "base", tmp_path / f"crash{k}")
        storage = LocalStorage(tmp_path / f"crash{k}")
        archiver = Archiver(crashing(storage, k))  # a retry runs past step k: no second crash
        with pytest.raises(SimulatedCrash):
            archiver.run(entries(27, 3))
        after_crash = readable(storage)
        assert after_crash in (old, new), steps[k - 1]
        seen.append(after_crash == new)
        archiver.run()  # the next archival run
        assert _no_instant_twice(storage), steps[k - 1]
        assert readable(storage) == new, steps[k - 1]
        assert [f.level for f in History(storage).snapshot.files] == [1]
    # Crashes before the version switch leave the old instants, every later one the new.
    assert seen == [False, False] + [True] * (len(steps) - 2)


def test_a_crash_during_a_compaction_changes_no_instant(tmp_path: Path) -> None:
    base = LocalStorage(tmp_path / "base")
    for n in range(4):
        HistoryWriter(base, batch=4).append(entries(2 * n, 2))  # four level-0 files
    old = readable(base)
    shutil.copytree(tmp_path / "base", tmp_path / "probe")
    probe = crashing(LocalStorage(tmp_path / "probe"))
    HistoryWriter(probe, batch=4).compact()
    probe_steps = steps_of(probe)
    for k in range(1, len(probe_steps) + 1):
        shutil.copytree(tmp_path / "base", tmp_path / f"crash{k}")
        storage = LocalStorage(tmp_path / f"crash{k}")
        with pytest.raises(SimulatedCrash):
            HistoryWriter(crashing(storage, k), batch=4).compact()
        assert readable(storage) == old, probe_steps[k - 1]
        HistoryWriter(storage, batch=4).compact()
        assert readable(storage) == old
        assert [f.name for f in History(storage).snapshot.files] == [f"{t(0)}_{t(7)}_1.parquet"]


# One step of a history's life: archive ``count`` new instants, or compact; either may crash after
# its k-th durable step (then the archiver retries it, as Hudi's does on its next run).
_STEP = st.one_of(
    st.tuples(st.just("archive"), st.integers(1, 4), st.none() | st.integers(1, 12)),
    st.tuples(st.just("compact"), st.just(0), st.none() | st.integers(1, 12)),
)


@settings(max_examples=40, deadline=None)
@given(steps=st.lists(_STEP, min_size=1, max_size=14), batch=st.integers(2, 4))
def test_the_readable_instants_are_always_exactly_the_archived_ones(
    steps: list[tuple[str, int, int | None]], batch: int
) -> None:
    with tempfile.TemporaryDirectory() as root:
        storage = LocalStorage(root)
        injector = CrashInjector()  # one count over the whole history; each step may crash anew
        archiver = Archiver(injector.wrap(storage), batch=batch)
        archived: list[str] = []
        for kind, count, crash_at in steps:
            todo = entries(len(archived), count) if kind == "archive" else None
            new = archived + [e.instant.instant_time for e in todo or ()]
            injector.after = len(injector.steps) + crash_at if crash_at else None
            try:
                archiver.run(todo)
            except SimulatedCrash:
                assert readable(storage) in (archived, new)
                archiver.run()  # the next run finishes the job
            archived = new
            assert readable(storage) == archived
            assert _no_instant_twice(storage)
        # Cleaning down to the latest snapshot leaves no parquet file that it does not name.
        writer = archiver.writer
        injector.after = None
        assert readable(storage) == archived
        writer.clean()
        writer.retained = 1
        writer.clean()
        assert unreferenced_parquet(storage) == set()
        assert readable(storage) == archived


def test_clean_after_a_crashed_cascade_keeps_the_manifest_in_force(tmp_path: Path) -> None:
    """A crash after a level-1 compaction wrote ``manifest_14`` but before ``_version_`` named it:
    the retry does not redo it (level 0 no longer fills up), so the unpublished manifest stays.
    Cleaning must not count it among the newest manifests and delete ``manifest_13``, the one in
    force (found by the property test above)."""
    storage = LocalStorage(tmp_path)
    injector = CrashInjector()
    archiver = Archiver(injector.wrap(storage), batch=2)
    for n in range(7):
        archiver.run(entries(n, 1))
    injector.after = len(injector.steps) + 8  # the 8th durable step of the next run
    with pytest.raises(SimulatedCrash):
        archiver.run(entries(7, 1))
    injector.after = None
    folder = tmp_path / HISTORY_DIR
    assert (folder / "_version_").read_text() == "13" and (folder / "manifest_14").exists()
    archiver.run()
    assert (folder / "_version_").read_text() == "13"
    archiver.writer.retained = 1
    archiver.writer.clean()
    assert sorted(p.name for p in folder.iterdir() if not p.name.endswith(".parquet")) == [
        "_version_",
        "manifest_13",
    ]
    assert readable(storage) == [t(n) for n in range(8)]
    assert unreferenced_parquet(storage) == set()
