"""TimelineStore calls the services make: un-completing a write, savepoints, archival, aux files,
heartbeats, Hudi's timeline-server markers, and the exact refusals (each changing nothing)."""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.errors import (
    CommitConflictError,
    InvalidInstantError,
    InvalidStateTransitionError,
    ObjectNotFoundError,
    StorageError,
    UnsafePathError,
)
from airflow_lake_provider.lake.format.properties import format_properties, parse_properties
from airflow_lake_provider.lake.storage import CrashingStorage
from airflow_lake_provider.lake.storage.local import LocalStorage
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import layout
from airflow_lake_provider.lake.timeline.history.reader import History
from airflow_lake_provider.lake.timeline.instant import Action, Instant, InstantClock, State
from airflow_lake_provider.lake.timeline.markers import Marker
from airflow_lake_provider.lake.timeline.store import TimelineStore
from tests.unit.lake.timeline.test_store_v2 import while_the_instant_lock_is_held

T1, T2, T3 = "20250101000000001", "20250101000000002", "20250101000000003"


@pytest.fixture
def store(tmp_path: Path) -> TimelineStore:
    (tmp_path / ".hoodie").mkdir()
    return TimelineStore(tmp_path)


def _hoodie(store: TimelineStore) -> Path:
    return Path(store.base_path) / ".hoodie"


def _files(store: TimelineStore) -> list[str]:
    return sorted(n for n in os.listdir(_hoodie(store)) if (_hoodie(store) / n).is_file())


def _exactly(message: str) -> str:
    return f"^{re.escape(message)}$"


def _completed(store: TimelineStore, t: str, action: Action = Action.COMMIT) -> Instant:
    return store.transition_to_completed(
        store.transition_to_inflight(store.create_requested(t, action)), b"{}"
    )


def test_inflight_refusals_name_the_state_found(store: TimelineStore) -> None:
    inflight = store.transition_to_inflight(store.create_requested(T1, Action.CLEAN))
    with pytest.raises(
        InvalidStateTransitionError, match=_exactly(f"{T1}: cannot move to inflight, it is already inflight")
    ):
        store.transition_to_inflight(inflight.with_state(State.REQUESTED))
    store.transition_to_completed(inflight, b"x")
    with pytest.raises(
        InvalidStateTransitionError, match=_exactly(f"{T1}: cannot move to inflight, it is already completed")
    ):
        store.transition_to_inflight(inflight.with_state(State.REQUESTED))
    with pytest.raises(
        InvalidStateTransitionError, match=_exactly(f"{T2}: no requested clean to move to inflight")
    ):
        store.transition_to_inflight(Instant(T2, State.REQUESTED, Action.CLEAN))
    with pytest.raises(
        CommitConflictError,
        match=_exactly(
            f"instant time {T1} is already used by "
            f"['{T1}.clean', '{T1}.clean.inflight', '{T1}.clean.requested']"
        ),
    ):
        store.create_requested(T1, Action.COMMIT)
    assert _files(store) == [f"{T1}.clean", f"{T1}.clean.inflight", f"{T1}.clean.requested"]


def test_completing_names_what_was_found_and_a_conflict_is_exact(store: TimelineStore) -> None:
    inflight = store.transition_to_inflight(store.create_requested(T1, Action.DELTACOMMIT))
    with pytest.raises(
        InvalidStateTransitionError,
        match=_exactly(
            f"{T1}: no inflight commit to complete "
            f"(found ['{T1}.deltacommit.inflight', '{T1}.deltacommit.requested'])"
        ),
    ):
        store.transition_to_completed(Instant(T1, State.INFLIGHT, Action.COMMIT), b"{}")
    store.transition_to_completed(inflight, b"first")
    with pytest.raises(
        CommitConflictError, match=_exactly(f"{T1}: already completed; a completed instant is final")
    ):
        store.transition_to_completed(inflight, b"second")
    assert (_hoodie(store) / f"{T1}.deltacommit").read_bytes() == b"first"
    # _create's own conflict names the full path.
    path = store.storage.uri(f".hoodie/{T1}.deltacommit")
    with pytest.raises(CommitConflictError, match=_exactly(f"{path} already exists; not overwriting it")):
        store._create(f"{T1}.deltacommit", b"x")


def test_pending_only_refusals_are_exact(store: TimelineStore) -> None:
    done = _completed(store, T1)
    with pytest.raises(
        InvalidStateTransitionError, match=_exactly(f"{T1}: is completed; only pending instants are removed")
    ):
        store.remove_pending(T1)
    with pytest.raises(
        InvalidStateTransitionError, match=_exactly(f"{done}: completed timeline files are never rewritten")
    ):
        store.update_pending(done, b"x")
    # A requested file alone: removed; an inflight file is rewritten in place.
    requested = store.create_requested(T2, Action.DELTACOMMIT, b"plan")
    inflight = store.transition_to_inflight(requested, b"a")
    store.update_pending(inflight, b"b")
    assert (_hoodie(store) / f"{T2}.deltacommit.inflight").read_bytes() == b"b"
    assert (_hoodie(store) / f"{T2}.deltacommit.requested").read_bytes() == b"plan"


@pytest.mark.parametrize("action", [Action.COMMIT, Action.DELTACOMMIT, Action.REPLACECOMMIT])
def test_remove_completed_keeps_the_write_pending(store: TimelineStore, action: Action) -> None:
    done = _completed(store, T1, action)
    inflight = layout.file_name(done.with_state(State.INFLIGHT))
    store.remove_completed(done)
    assert _files(store) == sorted([layout.file_name(done.with_state(State.REQUESTED)), inflight])
    # A completed file alone (its inflight archived or lost): an empty inflight file is made first.
    (_hoodie(store) / layout.file_name(done)).write_bytes(b"{}")
    (_hoodie(store) / inflight).unlink()
    (_hoodie(store) / layout.file_name(done.with_state(State.REQUESTED))).unlink()
    store.remove_completed(done)
    assert _files(store) == [inflight]
    assert (_hoodie(store) / inflight).read_bytes() == b""


@pytest.mark.parametrize(
    "instant",
    [
        Instant(T1, State.INFLIGHT, Action.COMMIT),
        Instant(T1, State.COMPLETED, Action.CLEAN),
        Instant(T1, State.COMPLETED, Action.ROLLBACK),
    ],
)
def test_remove_completed_refuses_anything_but_a_completed_write(
    store: TimelineStore, instant: Instant
) -> None:
    (_hoodie(store) / layout.file_name(instant)).write_bytes(b"{}")
    with pytest.raises(
        InvalidStateTransitionError, match=_exactly(f"{instant}: only a completed write is un-completed")
    ):
        store.remove_completed(instant)
    assert _files(store) == [layout.file_name(instant)]


def test_savepoint_create_finish_refuse_and_remove(store: TimelineStore) -> None:
    _completed(store, T1)
    # A savepoint shares its commit's time: the commit's files do not count as a savepoint.
    assert store.create_savepoint(T1, b"sp") == Instant(T1, State.COMPLETED, Action.SAVEPOINT)
    assert (_hoodie(store) / f"{T1}.savepoint").read_bytes() == b"sp"
    assert (_hoodie(store) / f"{T1}.savepoint.inflight").read_bytes() == b""
    with pytest.raises(CommitConflictError, match=_exactly(f"{T1}: a savepoint already exists")):
        store.create_savepoint(T1, b"again")
    store.remove_savepoint(T1)
    assert _files(store) == [f"{T1}.commit", f"{T1}.commit.requested", f"{T1}.inflight"]
    with pytest.raises(
        InvalidStateTransitionError, match=_exactly(f"{T1}: there is no savepoint at this instant")
    ):
        store.remove_savepoint(T1)
    # An interrupted create (inflight only) is finished.
    (_hoodie(store) / f"{T1}.savepoint.inflight").write_bytes(b"")
    store.create_savepoint(T1, b"sp2")
    assert (_hoodie(store) / f"{T1}.savepoint").read_bytes() == b"sp2"
    # Removing a half-made savepoint (inflight only) works too.
    (_hoodie(store) / f"{T1}.savepoint").unlink()
    store.remove_savepoint(T1)
    assert _files(store) == [f"{T1}.commit", f"{T1}.commit.requested", f"{T1}.inflight"]


def test_archive_files_are_checked_and_created_once(store: TimelineStore) -> None:
    (_hoodie(store) / "archived").mkdir()
    name = ".commits_.archive.1_1-0-1"
    store.write_archive(name, b"log")
    assert (_hoodie(store) / "archived" / name).read_bytes() == b"log"
    with pytest.raises(CommitConflictError):
        store.write_archive(name, b"other")
    bad_names = [
        "sub/.commits_.archive.2_1-0-1",
        ".commits_.archive.2_1-0-1/x",  # the right prefix, but a folder
        "commits_.archive.2_1-0-1",
        "x.commits_.archive.2",
    ]
    for bad in bad_names:
        with pytest.raises(
            UnsafePathError,
            match=_exactly(f"archive file name {bad!r} is not an archived-timeline file name"),
        ):
            store.write_archive(bad, b"x")
    assert os.listdir(_hoodie(store) / "archived") == [name]


def test_remove_archived_deletes_pending_files_first_and_keeps_savepoints(store: TimelineStore) -> None:
    _completed(store, T2, Action.DELTACOMMIT)
    _completed(store, T1, Action.CLEAN)
    store.create_savepoint(T2, b"sp")
    # Oldest first whatever the order given; per instant its requested and inflight files (in
    # listing order) before the completed one, so a crash between two deletes never leaves an
    # instant looking pending.
    probe = CrashingStorage(store.storage)
    removed = TimelineStore(probe).remove_archived([T2, T1])
    assert probe.steps == [f"delete .hoodie/{n}" for n in removed]
    assert sorted(removed[:2]) == [f"{T1}.clean.inflight", f"{T1}.clean.requested"]
    assert removed[2] == f"{T1}.clean"
    assert sorted(removed[3:5]) == [f"{T2}.deltacommit.inflight", f"{T2}.deltacommit.requested"]
    assert removed[5:] == [f"{T2}.deltacommit"]
    assert _files(store) == [f"{T2}.savepoint", f"{T2}.savepoint.inflight"]


def test_remove_archived_refuses_a_pending_instant_before_deleting_it(store: TimelineStore) -> None:
    store.transition_to_inflight(store.create_requested(T1, Action.COMMIT))
    with pytest.raises(
        InvalidStateTransitionError, match=_exactly(f"{T1}: only completed instants are archived")
    ):
        store.remove_archived([T1])
    # A savepoint alone does not make its time a completed instant.
    (_hoodie(store) / f"{T3}.savepoint").write_bytes(b"")
    with pytest.raises(
        InvalidStateTransitionError, match=_exactly(f"{T3}: only completed instants are archived")
    ):
        store.remove_archived([T3])
    assert _files(store) == [f"{T1}.commit.requested", f"{T1}.inflight", f"{T3}.savepoint"]


def test_aux_files_plain_names_only_optionally_in_one_folder(store: TimelineStore) -> None:
    probe = CrashingStorage(store.storage)
    TimelineStore(probe).write_aux("state.json", b"1")
    TimelineStore(probe).write_aux("state.json", b"2")  # replaced
    TimelineStore(probe).write_aux("p1", b"x", folder="partition-commit")
    # The exact keys written (an object store would take ".aux//state.json" as another key).
    assert probe.steps == [
        "write .hoodie/.aux/state.json",
        "write .hoodie/.aux/state.json",
        "write .hoodie/.aux/partition-commit/p1",
    ]
    aux = _hoodie(store) / ".aux"
    assert (aux / "state.json").read_bytes() == b"2"
    assert (aux / "partition-commit" / "p1").read_bytes() == b"x"
    for name, folder, bad in [
        ("a/b", "", "a/b"),
        (".hidden", "", ".hidden"),
        ("", "", ""),
        ("a\x00", "", "a\x00"),
        ("ok", "f/g", "f/g"),
        ("ok", ".f", ".f"),
        ("ok", "f\x00", "f\x00"),
        ("a/b", "f", "a/b"),
    ]:
        with pytest.raises(
            UnsafePathError, match=_exactly(f"aux file name {bad!r} must be a plain, visible file name")
        ):
            store.write_aux(name, b"no", folder=folder)
    assert sorted(p.relative_to(aux).as_posix() for p in aux.rglob("*")) == [
        "partition-commit",
        "partition-commit/p1",
        "state.json",
    ]


def test_properties_update_replaces_the_file(store: TimelineStore) -> None:
    store.initialize({"hoodie.table.name": "a"})
    store.update_properties({"hoodie.table.name": "b"})
    text = (_hoodie(store) / "hoodie.properties").read_text()
    assert parse_properties(text) == parse_properties(format_properties({"hoodie.table.name": "b"}))
    assert parse_properties(text)["hoodie.table.name"] == "b"


def test_heartbeat_holds_the_time_and_is_deleted(store: TimelineStore) -> None:
    assert store.heartbeats.path(T1) == f".hoodie/.heartbeat/{T1}"
    store.heartbeats.beat(T1, 1234)
    store.heartbeats.beat(T1, 5678)
    assert (_hoodie(store) / ".heartbeat" / T1).read_bytes() == b"5678"
    with pytest.raises(InvalidInstantError):
        store.heartbeats.beat("../x", 1)
    store.heartbeats.delete(T1)
    assert os.listdir(_hoodie(store) / ".heartbeat") == []


def test_timeline_server_markers_are_read_from_numbered_files_only(store: TimelineStore) -> None:
    temp = _hoodie(store) / ".temp" / T1
    (temp / "p").mkdir(parents=True)
    (temp / "MARKERS.type").write_text("TIMELINE_SERVER_BASED")
    (temp / "MARKERS0").write_text(
        "not-a-marker-line\n"
        "\n"
        "p/a_1-0-1_20250101000000001.parquet.marker.CREATE\n"
        "  q/r/.b_20250101000000001.log.1_1-0-1.marker.APPEND  \n"
        "v=a.marker.b/e_1-0-1_20250101000000001.parquet.marker.CREATE\n"  # a partition value may hold it
    )
    (temp / "MARKERS12").write_text("c_1-0-1_20250101000000001.parquet.marker.MERGE\n")
    (temp / "MARKERSX").write_text("p/x_1-0-1_20250101000000001.parquet.marker.CREATE\n")  # not numbered
    (temp / "p" / "MARKERS1").write_text(
        "p/y_1-0-1_20250101000000001.parquet.marker.CREATE\n"
    )  # not at the top
    (temp / "p" / "d_1-0-1_20250101000000001.parquet.marker.CREATE").write_bytes(b"")
    assert store.markers.read(T1) == [
        Marker(T1, "", "c_1-0-1_20250101000000001.parquet", "MERGE"),
        Marker(T1, "p", "a_1-0-1_20250101000000001.parquet", "CREATE"),
        Marker(T1, "p", "d_1-0-1_20250101000000001.parquet", "CREATE"),
        Marker(T1, "q/r", ".b_20250101000000001.log.1_1-0-1", "APPEND"),
        Marker(T1, "v=a.marker.b", "e_1-0-1_20250101000000001.parquet", "CREATE"),
    ]
    assert store.markers.folder(T1) == f".hoodie/.temp/{T1}"


def test_markers_round_trip_names_holding_the_marker_word_and_undecodable_bytes(store: TimelineStore) -> None:
    # create_marker takes any file name; reading splits at the last ".marker.".
    made = store.markers.create(T1, "p", "odd.marker.name_1-0-1_20250101000000001.parquet", "CREATE")
    temp = _hoodie(store) / ".temp" / T1
    # A MARKERS file with bytes that are not UTF-8: the readable lines still count.
    (temp / "MARKERS0").write_bytes(b"\xff\xfe\n" + b"q/c_1-0-1_20250101000000001.parquet.marker.MERGE\n")
    assert store.markers.read(T1) == [made, Marker(T1, "q", "c_1-0-1_20250101000000001.parquet", "MERGE")]


def test_markers_are_made_at_the_exact_keys(store: TimelineStore) -> None:
    name = "f_1-0-1_20250101000000001.parquet"
    probe = CrashingStorage(store.storage)
    markers = TimelineStore(probe).markers
    markers.create(T1, "", name, "CREATE")  # unpartitioned: right under the instant's folder
    markers.create(T1, "a/b", name, "MERGE")
    assert probe.steps == [
        f"create .hoodie/.temp/{T1}/{name}.marker.CREATE",
        f"create .hoodie/.temp/{T1}/a/b/{name}.marker.MERGE",
    ]


def test_pending_files_are_empty_by_default_and_unsafe_partition_named(store: TimelineStore) -> None:
    store.transition_to_inflight(store.create_requested(T1, Action.DELTACOMMIT))
    assert (_hoodie(store) / f"{T1}.deltacommit.requested").read_bytes() == b""
    assert (_hoodie(store) / f"{T1}.deltacommit.inflight").read_bytes() == b""
    with pytest.raises(UnsafePathError, match=_exactly("partition '../x' leaves the table base path")):
        store.markers.create(T1, "../x", "f_1-0-1_20250101000000001.parquet", "CREATE")


def test_starting_an_instant_waits_for_the_instant_lock(store: TimelineStore) -> None:
    # The lock file is the protocol between processes: its name is fixed, and a start waits for it.
    def meanwhile() -> None:  # waiting, nothing created
        assert _files(store) == []

    outcome = while_the_instant_lock_is_held(
        store, lambda: store.create_requested(T1, Action.COMMIT), meanwhile
    )
    assert outcome == [Instant(T1, State.REQUESTED, Action.COMMIT)]
    assert _files(store) == [f"{T1}.commit.requested"]


def test_layout_1_has_no_lsm_history_to_append_to_or_compact(store: TimelineStore) -> None:
    where = store.storage.uri(".hoodie")
    for call in (lambda: store.append_history([]), store.compact_history):
        with pytest.raises(
            InvalidStateTransitionError, match=_exactly(f"{where}: timeline layout 1 has no LSM history")
        ):
            call()
    assert _files(store) == []


def test_the_lsm_history_is_appended_to_and_compacted_where_the_table_properties_put_it(
    tmp_path: Path,
) -> None:
    """``hoodie.timeline.history.path`` names the history's folder inside the timeline's: the
    store's appends (an instant the history holds is not added again) and its compaction (at 10
    level-0 files) go there, none to the default ``history``."""
    path = tmp_path / "t"
    ticks = iter(range(10**6))
    start = dt.datetime(2025, 3, 1, tzinfo=dt.timezone.utc)
    clock = InstantClock(now=lambda: start + dt.timedelta(seconds=next(ticks)))
    LakeTable.create(
        path,
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        table_version=8,
        clock=clock,
    )
    properties = path / ".hoodie" / "hoodie.properties"
    properties.write_text(properties.read_text() + "hoodie.timeline.history.path=lsm\n")
    table = LakeTable.open(path, clock=clock)
    for ts in range(11):
        write(table, pa.table({"id": ["a"], "ts": pa.array([ts], pa.int64())}), "upsert")
    done = table.timeline().completed_commits
    appended = [table.store.append_history(done[:2])]
    appended += [table.store.append_history(done[i - 1 : i + 1]) for i in range(2, 11)]  # one held, one new
    assert appended == [f"{done[0].timestamp}_{done[1].timestamp}_0.parquet"] + [
        f"{c.timestamp}_{c.timestamp}_0.parquet" for c in done[2:]
    ]
    table.store.compact_history()
    lsm = path / ".hoodie" / "timeline" / "lsm"
    assert [p.name for p in lsm.glob("*_1.parquet")] == [
        f"{done[0].timestamp}_{done[-1].timestamp}_1.parquet"
    ]
    assert list((path / ".hoodie" / "timeline" / "history").iterdir()) == []
    held = History(table.storage, ".hoodie/timeline/lsm").instants(done[0].timestamp, done[-1].timestamp)
    assert [(i.instant_time, i.action) for i in held] == [(c.timestamp, c.action.value) for c in done]


def test_un_completing_again_after_it_ran_changes_nothing(store: TimelineStore) -> None:
    """A forced rollback interrupted after the completed file went runs the step again: the
    missing completed file is not an error and the instant stays pending."""
    done = _completed(store, T1, Action.DELTACOMMIT)
    store.remove_completed(done)
    after = _files(store)
    store.remove_completed(done)
    assert _files(store) == after == [f"{T1}.deltacommit.inflight", f"{T1}.deltacommit.requested"]


def test_properties_recovery_follows_hudis_backup_protocol(store: TimelineStore) -> None:
    current, backup = _hoodie(store) / "hoodie.properties", _hoodie(store) / "hoodie.properties.backup"
    # No backup: nothing was interrupted.
    current.write_bytes(b"a=1\n")
    assert store.recover_properties() is False
    assert (current.read_bytes(), backup.exists()) == (b"a=1\n", False)
    # Interrupted after the backup was made: the current file is complete, the backup goes.
    backup.write_bytes(b"a=0\n")
    assert store.recover_properties() is True
    assert (current.read_bytes(), backup.exists()) == (b"a=1\n", False)
    # Interrupted with the current file gone: the backup is copied back, then goes.
    current.unlink()
    backup.write_bytes(b"a=0\n")
    assert store.recover_properties() is True
    assert (current.read_bytes(), backup.exists()) == (b"a=0\n", False)


def test_properties_are_read_from_the_backup_and_neither_file_names_the_current_one(
    store: TimelineStore,
) -> None:
    current, backup = _hoodie(store) / "hoodie.properties", _hoodie(store) / "hoodie.properties.backup"
    current.write_bytes("a=\u00e9\n".encode())
    assert store.read_properties_text() == "a=\u00e9\n"
    current.unlink()
    backup.write_bytes(b"a=0\n")  # an update interrupted after its delete, as Hudi's readers fall back
    assert store.read_properties_text() == "a=0\n"
    backup.unlink()
    with pytest.raises(ObjectNotFoundError) as caught:
        store.read_properties_text()
    assert str(caught.value) == store.storage.uri(".hoodie/hoodie.properties") == str(current)


def test_metadata_table_files_are_listed_deepest_folders_first(store: TimelineStore) -> None:
    """A drop deletes file by file, deepest first, so a crash leaves the outer folders readable."""
    mdt = _hoodie(store) / "metadata"
    for rel in ("b", "a/x", ".hoodie/z", "files/.f.log.1_0-1-0", "files/a/b/deep", "c/ab"):
        (mdt / rel).parent.mkdir(parents=True, exist_ok=True)
        (mdt / rel).write_bytes(b"1")
    assert store.metadata_table_files() == [
        ".hoodie/metadata/files/a/b/deep",
        ".hoodie/metadata/.hoodie/z",
        ".hoodie/metadata/a/x",
        ".hoodie/metadata/c/ab",
        ".hoodie/metadata/files/.f.log.1_0-1-0",
        ".hoodie/metadata/b",
    ]


def test_a_linked_metadata_table_lists_no_files_and_only_the_link_is_dropped(
    store: TimelineStore, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "files").mkdir()
    (elsewhere / "files" / "kept").write_bytes(b"1")
    (_hoodie(store) / "metadata").symlink_to(elsewhere, target_is_directory=True)
    assert store.metadata_table_files() == []
    store.delete_metadata_table()
    assert not (_hoodie(store) / "metadata").exists()
    assert (elsewhere / "files" / "kept").read_bytes() == b"1"


def test_a_drop_that_leaves_the_metadata_folder_behind_is_an_error(store: TimelineStore) -> None:
    class Lingering(LocalStorage):
        def delete_tree(self, rel: str) -> None:  # a store that does not remove the folder
            pass

    (_hoodie(store) / "metadata" / "files").mkdir(parents=True)
    (_hoodie(store) / "metadata" / "files" / "f").write_bytes(b"1")
    lingering = TimelineStore(Lingering(store.base_path))
    where = lingering.storage.uri(".hoodie/metadata")
    with pytest.raises(StorageError, match=_exactly(f"{where} is still there after deleting it")):
        lingering.delete_metadata_table()
    assert not (_hoodie(store) / "metadata" / "files" / "f").exists()
