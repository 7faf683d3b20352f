"""TimelineStore transitions and refusals, markers, Avro timeline files, and Timeline.load on real tables."""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import time
import zipfile
from pathlib import Path

import fastavro
import pytest

from airflow_lake_provider.lake.errors import (
    CommitConflictError,
    CorruptTimelineFileError,
    InvalidInstantError,
    InvalidStateTransitionError,
    ObjectExistsError,
    UnsafePathError,
)
from airflow_lake_provider.lake.format.table_config import TableConfig, TableType
from airflow_lake_provider.lake.storage import LocalStorage
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline import layout
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat
from airflow_lake_provider.lake.timeline.instant import Action, Instant, State
from airflow_lake_provider.lake.timeline.markers import IOType, Marker
from airflow_lake_provider.lake.timeline.store import TimelineStore

HUDI_TABLES = Path(__file__).resolve().parents[3] / "data" / "hudi-tables"  # see tests/data/README.md


T1 = "20250101000000001"
T2 = "20250101000000002"
T3 = "20250101000000003"
INIT_ENTRIES = [".aux", ".schema", ".temp", "archived", "hoodie.properties"]


@pytest.fixture
def store(tmp_path: Path) -> TimelineStore:
    s = TimelineStore(tmp_path / "tbl")
    s.initialize(
        TableConfig.new_properties(
            name="tbl", table_type=TableType.MERGE_ON_READ, record_key_fields=("id",), precombine_field="ts"
        )
    )
    return s


def _hoodie(store: TimelineStore) -> Path:
    return Path(store.base_path) / ".hoodie"


def _listing(store: TimelineStore) -> list[str]:
    return sorted(os.listdir(_hoodie(store)))


def _tree(root: Path) -> dict[str, int]:
    """Every file under ``root`` (relative path -> size), directories as -1; lock files (empty,
    created on first use, no table state) left out."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for d in dirs:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = -1
        for f in files:
            if f.startswith(".lake-") and f.endswith(".lock"):
                continue
            p = os.path.join(dirpath, f)
            out[os.path.relpath(p, root)] = os.path.getsize(p)
    return out


def _commit_json() -> bytes:
    return CommitMetadata(
        operation_type="UPSERT",
        partition_to_write_stats={"": (WriteStat("fid-0", "", "fid-0_1-1-0_20250101000000001.parquet"),)},
        extra_metadata={"schema": '{"type":"record","name":"r","fields":[]}'},
    ).to_json_bytes()


def _no_temp_files(store: TimelineStore) -> bool:
    return not [n for n in _tree(_hoodie(store)) if n.endswith(".tmp")]


# -- initialize -----------------------------------------------------------------------------------
def test_store_initialize_creates_java_folders_and_properties(store: TimelineStore) -> None:
    assert _listing(store) == INIT_ENTRIES
    assert sorted(k for k, v in _tree(_hoodie(store)).items() if v == -1) == [
        ".aux",
        ".aux/.bootstrap",
        ".aux/.bootstrap/.fileids",
        ".aux/.bootstrap/.partitions",
        ".schema",
        ".temp",
        "archived",
    ]
    text = (_hoodie(store) / "hoodie.properties").read_text()
    assert text.splitlines()[-1] == "hoodie.table.checksum=564061131"  # crc32(".tbl")
    with pytest.raises(CommitConflictError, match="hoodie.properties already exists"):
        store.initialize({"hoodie.table.name": "other"})
    assert (_hoodie(store) / "hoodie.properties").read_text() == text


# -- happy paths ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("action", "files"),
    [
        (Action.COMMIT, [f"{T1}.commit.requested", f"{T1}.inflight", f"{T1}.commit"]),
        (
            Action.DELTACOMMIT,
            [f"{T1}.deltacommit.requested", f"{T1}.deltacommit.inflight", f"{T1}.deltacommit"],
        ),
        (
            Action.REPLACECOMMIT,
            [f"{T1}.replacecommit.requested", f"{T1}.replacecommit.inflight", f"{T1}.replacecommit"],
        ),
        (Action.COMPACTION, [f"{T1}.compaction.requested", f"{T1}.compaction.inflight", f"{T1}.commit"]),
        (Action.CLEAN, [f"{T1}.clean.requested", f"{T1}.clean.inflight", f"{T1}.clean"]),
        (Action.ROLLBACK, [f"{T1}.rollback.requested", f"{T1}.rollback.inflight", f"{T1}.rollback"]),
    ],
)
def test_store_requested_inflight_completed_exact_files(
    store: TimelineStore, action: Action, files: list[str]
) -> None:
    requested = store.create_requested(T1, action, b"plan")
    assert requested == Instant(T1, State.REQUESTED, action)
    assert _listing(store) == sorted(INIT_ENTRIES + files[:1])
    inflight = store.transition_to_inflight(requested, b"inflight-body")
    assert inflight == Instant(T1, State.INFLIGHT, action)
    assert _listing(store) == sorted(INIT_ENTRIES + files[:2])
    completed = store.transition_to_completed(inflight, b"done")
    assert layout.file_name(completed) == files[2]
    assert completed.state is State.COMPLETED
    assert _listing(store) == sorted(INIT_ENTRIES + files)
    assert [(_hoodie(store) / f).read_bytes() for f in files] == [b"plan", b"inflight-body", b"done"]
    assert _no_temp_files(store)

    timeline = Timeline.load(store.base_path)
    assert timeline.instants == (completed,)
    assert timeline.is_compaction(completed) is (action is Action.COMPACTION)
    assert timeline.pending == []


def test_store_compaction_completed_is_commit_on_timeline(store: TimelineStore) -> None:
    store.transition_to_completed(
        store.transition_to_inflight(store.create_requested(T1, Action.DELTACOMMIT)), _commit_json()
    )
    store.transition_to_inflight(store.create_requested(T2, Action.COMPACTION))
    timeline = Timeline.load(store.base_path)
    assert [str(i) for i in timeline.instants] == [
        f"{T1}__deltacommit__COMPLETED",
        f"{T2}__compaction__INFLIGHT",
    ]
    assert timeline.pending_compactions() == [Instant(T2, State.INFLIGHT, Action.COMPACTION)]
    assert [i.timestamp for i in timeline.completed_commits] == [T1]
    store.transition_to_completed(Instant(T2, State.INFLIGHT, Action.COMPACTION), _commit_json())
    timeline = Timeline.load(store.base_path)
    assert [str(i) for i in timeline.instants] == [
        f"{T1}__deltacommit__COMPLETED",
        f"{T2}__commit__COMPLETED",
    ]
    assert timeline.compaction_times == frozenset({T2})
    assert timeline.pending_compactions() == []
    assert timeline.is_committed(T2)
    assert timeline.latest_time == T2
    assert timeline.commit_metadata(timeline.instants[1]).operation_type == "UPSERT"


# -- refusals -------------------------------------------------------------------------------------
def test_store_inflight_without_requested_refused_listing_unchanged(store: TimelineStore) -> None:
    before = _tree(_hoodie(store))
    with pytest.raises(InvalidStateTransitionError, match=f"{T1}: no requested commit"):
        store.transition_to_inflight(Instant(T1, State.REQUESTED, Action.COMMIT))
    assert _tree(_hoodie(store)) == before


def test_store_inflight_with_other_action_requested_refused(store: TimelineStore) -> None:
    store.create_requested(T1, Action.CLEAN)
    before = _tree(_hoodie(store))
    with pytest.raises(InvalidStateTransitionError, match="no requested commit"):
        store.transition_to_inflight(Instant(T1, State.REQUESTED, Action.COMMIT))
    assert _tree(_hoodie(store)) == before


def test_store_inflight_twice_refused_listing_unchanged(store: TimelineStore) -> None:
    inflight = store.transition_to_inflight(store.create_requested(T1, Action.COMMIT), b"first")
    before = _tree(_hoodie(store))
    with pytest.raises(InvalidStateTransitionError, match="already inflight"):
        store.transition_to_inflight(Instant(T1, State.REQUESTED, Action.COMMIT), b"second")
    assert _tree(_hoodie(store)) == before
    assert (_hoodie(store) / layout.file_name(inflight)).read_bytes() == b"first"


def test_store_complete_twice_conflict_listing_unchanged(store: TimelineStore) -> None:
    inflight = store.transition_to_inflight(store.create_requested(T1, Action.DELTACOMMIT))
    store.transition_to_completed(inflight, b'{"first": 1}')
    before = _tree(_hoodie(store))
    with pytest.raises(CommitConflictError, match=f"{T1}: already completed"):
        store.transition_to_completed(inflight, b'{"second": 2}')
    assert _tree(_hoodie(store)) == before
    assert (_hoodie(store) / f"{T1}.deltacommit").read_bytes() == b'{"first": 1}'
    with pytest.raises(InvalidStateTransitionError):
        store.transition_to_inflight(Instant(T1, State.REQUESTED, Action.DELTACOMMIT))
    assert _tree(_hoodie(store)) == before
    assert _no_temp_files(store)


def test_store_compaction_complete_twice_conflict(store: TimelineStore) -> None:
    inflight = store.transition_to_inflight(store.create_requested(T1, Action.COMPACTION))
    store.transition_to_completed(inflight, b"{}")
    before = _tree(_hoodie(store))
    with pytest.raises(CommitConflictError):
        store.transition_to_completed(inflight, b"{}")
    assert _tree(_hoodie(store)) == before


@pytest.mark.parametrize(
    "first",
    [
        Action.COMMIT,
        Action.DELTACOMMIT,
        Action.CLEAN,
        Action.ROLLBACK,
        Action.COMPACTION,
        Action.REPLACECOMMIT,
    ],
)
@pytest.mark.parametrize("second", [Action.COMMIT, Action.CLEAN, Action.COMPACTION])
def test_store_create_requested_time_already_used_conflict(
    store: TimelineStore, first: Action, second: Action
) -> None:
    store.create_requested(T1, first)
    before = _tree(_hoodie(store))
    with pytest.raises(CommitConflictError, match=f"instant time {T1} is already used"):
        store.create_requested(T1, second)
    assert _tree(_hoodie(store)) == before


def test_store_start_creates_requested_and_inflight_and_refuses_a_used_time(store: TimelineStore) -> None:
    inflight = store.start(T1, Action.DELTACOMMIT, b"inflight-body")
    assert inflight == Instant(T1, State.INFLIGHT, Action.DELTACOMMIT)
    files = [f"{T1}.deltacommit.inflight", f"{T1}.deltacommit.requested"]
    assert _listing(store) == sorted(INIT_ENTRIES + files)
    assert [(_hoodie(store) / f).read_bytes() for f in files] == [b"inflight-body", b""]
    completed = store.transition_to_completed(inflight, b"done")
    assert Timeline.load(store.base_path).instants == (completed,)
    before = _tree(_hoodie(store))
    with pytest.raises(CommitConflictError, match=f"instant time {T1} is already used by .*{T1}.deltacommit"):
        store.start(T1, Action.COMMIT)
    with pytest.raises(InvalidInstantError):
        store.start("2024-01-01", Action.DELTACOMMIT)
    assert _tree(_hoodie(store)) == before and _no_temp_files(store)
    store.start(T2, Action.DELTACOMMIT)  # no content given: an empty inflight file
    assert (_hoodie(store) / f"{T2}.deltacommit.inflight").read_bytes() == b""


def test_store_start_loses_to_a_writer_that_took_the_time_after_its_check(
    store: TimelineStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process (not taking the instant lock: a Java writer) creates the inflight file
    # between the check and the links: the start fails as a conflict, its requested file kept.
    check = store._refuse_used

    def racing(timestamp: str) -> None:
        check(timestamp)
        (_hoodie(store) / f"{timestamp}.deltacommit.inflight").write_bytes(b"theirs")

    monkeypatch.setattr(store, "_refuse_used", racing)
    with pytest.raises(
        CommitConflictError, match=f"instant time {T1} is already used: .*{T1}.deltacommit.inflight"
    ):
        store.start(T1, Action.DELTACOMMIT, b"ours")
    assert (_hoodie(store) / f"{T1}.deltacommit.inflight").read_bytes() == b"theirs"
    assert _no_temp_files(store)


def _hold_instant_lock(base: str, held: str, seconds: float) -> None:
    with TimelineStore(base).exclusive("instant"):
        Path(held).touch()
        time.sleep(seconds)


def test_store_start_waits_for_the_instant_lock_another_process_holds(
    store: TimelineStore, tmp_path: Path
) -> None:
    """The check and the links happen under the instant lock that ``create_requested`` takes too:
    a start while another process holds it waits for it (as long as a Java-sized commit may take),
    then starts."""
    held = tmp_path / "held"
    ctx = multiprocessing.get_context("spawn")
    holder = ctx.Process(target=_hold_instant_lock, args=(store.base_path, str(held), 1.0))
    holder.start()
    try:
        while not held.exists():
            time.sleep(0.01)
        began = time.monotonic()
        inflight = store.start(T1, Action.DELTACOMMIT, b"ours")
        waited = time.monotonic() - began
    finally:
        holder.join()
    assert inflight == Instant(T1, State.INFLIGHT, Action.DELTACOMMIT)
    assert 0.5 < waited < 5, waited


def test_store_create_requested_time_used_by_completed_only_conflict(store: TimelineStore) -> None:
    (_hoodie(store) / f"{T1}.commit").write_bytes(_commit_json())  # a completed file alone (archived history)
    before = _tree(_hoodie(store))
    with pytest.raises(CommitConflictError, match=f"{T1}.commit"):
        store.create_requested(T1, Action.DELTACOMMIT)
    assert _tree(_hoodie(store)) == before


def test_store_create_requested_invalid_time_raises(store: TimelineStore) -> None:
    before = _tree(_hoodie(store))
    with pytest.raises(InvalidInstantError):
        store.create_requested("2025010100000000", Action.COMMIT)
    assert _tree(_hoodie(store)) == before


def test_store_complete_without_inflight_refused_listing_unchanged(store: TimelineStore) -> None:
    before = _tree(_hoodie(store))
    with pytest.raises(InvalidStateTransitionError, match=f"{T1}: no inflight commit to complete"):
        store.transition_to_completed(Instant(T1, State.INFLIGHT, Action.COMMIT), b"{}")
    assert _tree(_hoodie(store)) == before
    requested = store.create_requested(T1, Action.COMMIT)
    before = _tree(_hoodie(store))
    with pytest.raises(InvalidStateTransitionError, match=rf"found \['{T1}.commit.requested'\]"):
        store.transition_to_completed(requested, b"{}")
    assert _tree(_hoodie(store)) == before


def test_store_complete_other_action_refused(store: TimelineStore) -> None:
    store.transition_to_inflight(store.create_requested(T1, Action.COMMIT))
    before = _tree(_hoodie(store))
    with pytest.raises(InvalidStateTransitionError, match="no inflight deltacommit"):
        store.transition_to_completed(Instant(T1, State.INFLIGHT, Action.DELTACOMMIT), b"{}")
    assert _tree(_hoodie(store)) == before


def test_storage_create_existing_target_conflict_no_temp_left(store: TimelineStore) -> None:
    target = _hoodie(store) / f"{T1}.commit"
    target.write_bytes(b"original")
    before = _tree(_hoodie(store))
    with pytest.raises(ObjectExistsError, match="already exists; not overwriting it"):
        store.storage.create(f".hoodie/{T1}.commit", b"new")
    assert _tree(_hoodie(store)) == before
    assert target.read_bytes() == b"original"
    store.storage.write(f".hoodie/{T1}.commit", b"replaced")
    assert target.read_bytes() == b"replaced"
    assert _tree(_hoodie(store)) == {**before, f"{T1}.commit": 8}


# -- pending instants -----------------------------------------------------------------------------
def test_store_remove_pending_deletes_requested_and_inflight(store: TimelineStore) -> None:
    store.transition_to_inflight(store.create_requested(T1, Action.DELTACOMMIT))
    store.create_requested(T2, Action.CLEAN)
    assert store.remove_pending(T1) == [f"{T1}.deltacommit.inflight", f"{T1}.deltacommit.requested"]
    assert store.remove_pending(T2) == [f"{T2}.clean.requested"]
    assert store.remove_pending(T3) == []
    assert _listing(store) == INIT_ENTRIES


def test_store_remove_pending_refuses_completed(store: TimelineStore) -> None:
    store.transition_to_completed(
        store.transition_to_inflight(store.create_requested(T1, Action.COMMIT)), _commit_json()
    )
    before = _tree(_hoodie(store))
    with pytest.raises(InvalidStateTransitionError, match=f"{T1}: is completed"):
        store.remove_pending(T1)
    assert _tree(_hoodie(store)) == before


def test_store_reverts_a_pending_instant_to_requested_and_refuses_one_without_a_plan(
    store: TimelineStore,
) -> None:
    store.transition_to_inflight(store.create_requested(T1, Action.COMPACTION, b"plan"))
    store.create_requested(T2, Action.COMPACTION, b"plan2")
    assert store.revert_to_requested(T1) == Instant(T1, State.REQUESTED, Action.COMPACTION)
    assert store.revert_to_requested(T2) == Instant(T2, State.REQUESTED, Action.COMPACTION)
    assert _listing(store) == sorted(
        [*INIT_ENTRIES, f"{T1}.compaction.requested", f"{T2}.compaction.requested"]
    )
    assert (_hoodie(store) / f"{T1}.compaction.requested").read_bytes() == b"plan"
    store.transition_to_inflight(store.create_requested(T3, Action.DELTACOMMIT))  # no plan
    store.transition_to_completed(
        store.transition_to_inflight(Instant(T2, State.REQUESTED, Action.COMPACTION)), b"{}"
    )
    before = _tree(_hoodie(store))
    for t, why in (
        (T3, "has no requested plan"),
        (T2, "is completed"),
        ("20250101000000004", "has no requested"),
    ):
        with pytest.raises(InvalidStateTransitionError, match=f"{t}: {why}"):
            store.revert_to_requested(t)
    assert _tree(_hoodie(store)) == before


def test_store_update_pending_rewrites_and_refuses_completed(store: TimelineStore) -> None:
    requested = store.create_requested(T1, Action.COMPACTION, b"v1")
    store.update_pending(requested, b"v2")
    assert (_hoodie(store) / f"{T1}.compaction.requested").read_bytes() == b"v2"
    completed = Instant(T1, State.COMPLETED, Action.COMMIT)
    with pytest.raises(InvalidStateTransitionError, match="never rewritten"):
        store.update_pending(completed, b"x")
    assert not (_hoodie(store) / f"{T1}.commit").exists()
    assert _no_temp_files(store)


# -- markers --------------------------------------------------------------------------------------
def test_store_markers_create_read_delete(store: TimelineStore) -> None:
    base = "fid-1-0_1-1-0_20250101000000001.parquet"
    log = ".fid-2-0_20241231000000000.log.2_2-1-0"
    m1 = store.markers.create(T1, "city=a/day=1", base, IOType.CREATE)
    m2 = store.markers.create(T1, "", log, IOType.APPEND)
    m3 = store.markers.create(T1, "city=b", "fid-3-0_3-1-0_20250101000000001.parquet", IOType.MERGE)
    store.markers.create(T1, "city=b", "fid-3-0_3-1-0_20250101000000001.parquet", IOType.MERGE)  # idempotent
    assert m1 == Marker(T1, "city=a/day=1", base, "CREATE")
    assert m1.relative_path == f"city=a/day=1/{base}"
    assert m2.relative_path == log
    assert sorted(
        n for n, size in _tree(Path(store.base_path) / store.markers.folder(T1)).items() if size >= 0
    ) == [
        f"{log}.marker.APPEND",
        f"city=a/day=1/{base}.marker.CREATE",
        "city=b/fid-3-0_3-1-0_20250101000000001.parquet.marker.MERGE",
    ]
    assert store.markers.read(T1) == [m2, m1, m3]
    assert store.markers.read(T2) == []
    store.markers.delete(T1)
    assert not (Path(store.base_path) / store.markers.folder(T1)).exists()
    assert store.markers.read(T1) == []
    assert _listing(store) == INIT_ENTRIES
    assert os.listdir(_hoodie(store) / ".temp") == []


@pytest.mark.parametrize("partition", ["../escape", "a/../../b", "/abs"])
def test_store_marker_unsafe_partition_refused(store: TimelineStore, partition: str) -> None:
    before = _tree(store.base_path)
    with pytest.raises(UnsafePathError):
        store.markers.create(T1, partition, "f_1-1-0_20250101000000001.parquet", IOType.CREATE)
    assert _tree(store.base_path) == before


# -- Avro timeline files --------------------------------------------------------------------------
CLEANER_PLAN = {
    "earliestInstantToRetain": {"timestamp": T1, "action": "commit", "state": "COMPLETED"},
    "lastCompletedCommitTimestamp": T2,
    "policy": "KEEP_LATEST_COMMITS",
    "filesToBeDeletedPerPartition": {"city=a": ["city=a/fid-1-0_0-1-0_20241231000000000.parquet"]},
    "version": 2,
    "filePathsToBeDeletedPerPartition": {
        "city=a": [
            {
                "filePath": "file:/t/city=a/fid-1-0_0-1-0_20241231000000000.parquet",
                "isBootstrapBaseFile": False,
            }
        ]
    },
    "partitionsToBeDeleted": [],
    "extraMetadata": None,
}
COMPACTION_PLAN = {
    "operations": [
        {
            "baseInstantTime": T1,
            "deltaFilePaths": [
                ".fid-1-0_20250101000000001.log.1_0-1-0",
                ".fid-1-0_20250101000000001.log.2_1-1-0",
            ],
            "dataFilePath": "fid-1-0_0-1-0_20250101000000001.parquet",
            "fileId": "fid-1-0",
            "partitionPath": "city=a",
            "metrics": {"TOTAL_LOG_FILES": 2.0, "TOTAL_LOG_FILES_SIZE": 4096.0},
            "bootstrapFilePath": None,
        }
    ],
    "extraMetadata": None,
    "version": 2,
}
ROLLBACK_METADATA = {
    "startRollbackTime": T3,
    "timeTakenInMillis": 195,
    "totalFilesDeleted": 1,
    "commitsRollback": [T2],
    "partitionMetadata": {
        "": {
            "partitionPath": "",
            "successDeleteFiles": ["file:/t/fid-9-0_1-33-44_20250101000000002.parquet"],
            "failedDeleteFiles": [],
            "rollbackLogFiles": {"file:/t/.fid-1-0_20250101000000001.log.2_1-0-1": 105},
        }
    },
    "version": 1,
    "instantsRollback": [{"commitTime": T2, "action": "deltacommit"}],
}
SAVEPOINT_METADATA = {
    "savepointedBy": "airflow",
    "savepointedAt": 1735689600,
    "comments": "before backfill",
    "partitionMetadata": {
        "city=a": {
            "partitionPath": "city=a",
            "savepointDataFile": ["fid-1-0_0-1-0_20250101000000001.parquet"],
        }
    },
    "version": 1,
}
AVRO_CASES = [
    (timeline_avro.CLEANER_PLAN, CLEANER_PLAN, Action.CLEAN, State.REQUESTED),
    (timeline_avro.COMPACTION_PLAN, COMPACTION_PLAN, Action.COMPACTION, State.REQUESTED),
    (timeline_avro.ROLLBACK_METADATA, ROLLBACK_METADATA, Action.ROLLBACK, State.COMPLETED),
    (timeline_avro.SAVEPOINT_METADATA, SAVEPOINT_METADATA, Action.SAVEPOINT, State.COMPLETED),
]


@pytest.mark.parametrize(
    ("full_name", "record", "action", "state"), AVRO_CASES, ids=[c[0].rsplit(".", 1)[1] for c in AVRO_CASES]
)
def test_write_avro_plain_fastavro_reads_hudi_schema_name(
    full_name: str, record: dict, action: Action, state: State
) -> None:
    data = timeline_avro.write_avro(full_name, record)
    assert data[:4] == b"Obj\x01"
    reader = fastavro.reader(io.BytesIO(data))
    assert reader.writer_schema["name"] == full_name
    assert reader.metadata["avro.codec"] == "null"
    header_schema = json.loads(reader.metadata["avro.schema"])
    assert header_schema["name"] in (full_name, full_name.rsplit(".", 1)[1])
    records = list(reader)
    assert records == [record]
    assert timeline_avro.read_avro(data, "x") == record


@pytest.mark.parametrize(
    ("full_name", "record", "action", "state"), AVRO_CASES, ids=[c[0].rsplit(".", 1)[1] for c in AVRO_CASES]
)
def test_timeline_avro_record_via_store_file(
    tmp_path: Path, full_name: str, record: dict, action: Action, state: State
) -> None:
    hoodie = tmp_path / ".hoodie"
    hoodie.mkdir()
    instant = Instant(T1, state, action)
    LocalStorage(hoodie).create(layout.file_name(instant), timeline_avro.write_avro(full_name, record))
    timeline = Timeline.load(tmp_path)
    assert timeline.instants == (instant,)
    assert timeline.avro_record(instant) == record
    if action is Action.COMPACTION:
        assert timeline.compaction_plan(T1) == record


def test_write_avro_missing_required_field_raises() -> None:
    bad = {k: v for k, v in ROLLBACK_METADATA.items() if k != "startRollbackTime"}
    with pytest.raises(ValueError, match="no value and no default for startRollbackTime"):
        timeline_avro.write_avro(timeline_avro.ROLLBACK_METADATA, bad)


@pytest.mark.parametrize(
    "content",
    [b"", b"not avro at all", b"Obj\x01\x00garbage", b'{"json": true}'],
    ids=["empty", "text", "truncated-header", "json"],
)
def test_timeline_corrupt_avro_raises_naming_path(tmp_path: Path, content: bytes) -> None:
    hoodie = tmp_path / ".hoodie"
    hoodie.mkdir()
    path = hoodie / f"{T1}.clean.requested"
    path.write_bytes(content)
    timeline = Timeline.load(tmp_path)
    with pytest.raises(CorruptTimelineFileError, match=str(path)):
        timeline.avro_record(Instant(T1, State.REQUESTED, Action.CLEAN))


def test_timeline_truncated_avro_raises_naming_path(tmp_path: Path) -> None:
    hoodie = tmp_path / ".hoodie"
    hoodie.mkdir()
    data = timeline_avro.write_avro(timeline_avro.CLEANER_PLAN, CLEANER_PLAN)
    path = hoodie / f"{T1}.clean.requested"
    path.write_bytes(data[: len(data) - 20])
    with pytest.raises(CorruptTimelineFileError, match=str(path)):
        Timeline.load(tmp_path).avro_record(Instant(T1, State.REQUESTED, Action.CLEAN))


def test_timeline_two_avro_records_raises(tmp_path: Path) -> None:
    hoodie = tmp_path / ".hoodie"
    hoodie.mkdir()
    buf = io.BytesIO()
    fastavro.writer(buf, timeline_avro.schema(timeline_avro.CLEANER_PLAN), [CLEANER_PLAN, CLEANER_PLAN])
    path = hoodie / f"{T1}.clean.requested"
    path.write_bytes(buf.getvalue())
    with pytest.raises(CorruptTimelineFileError, match="expected one Avro record, found 2"):
        Timeline.load(tmp_path).avro_record(Instant(T1, State.REQUESTED, Action.CLEAN))


def test_timeline_corrupt_commit_json_raises_naming_path(tmp_path: Path) -> None:
    hoodie = tmp_path / ".hoodie"
    hoodie.mkdir()
    path = hoodie / f"{T1}.commit"
    path.write_bytes(b"{not json")
    timeline = Timeline.load(tmp_path)
    with pytest.raises(CorruptTimelineFileError, match=str(path)):
        timeline.commit_metadata(timeline.instants[0])
    with pytest.raises(InvalidInstantError):
        timeline.commit_metadata(Instant(T1, State.INFLIGHT, Action.COMMIT))


# -- Timeline.load on real tables -----------------------------------------------------------------
def _extract(name: str, dest: Path) -> Path:
    with zipfile.ZipFile(HUDI_TABLES / f"{name}.zip") as zf:
        members = [m for m in zf.namelist() if not m.startswith("__MACOSX")]
        zf.extractall(dest, members)
    (top,) = [p for p in dest.iterdir() if p.is_dir()]
    return top


def test_timeline_load_real_rollback_table(tmp_path: Path) -> None:
    base = _extract("morparquet_v6_nonpartitioned_rollback", tmp_path)
    timeline = Timeline.load(base)
    assert [str(i) for i in timeline.instants] == [
        "20250126040823628__deltacommit__COMPLETED",
        "20250126040936578__rollback__COMPLETED",
        "20250126060846931__deltacommit__COMPLETED",
    ]
    assert [i.timestamp for i in timeline.completed_commits] == ["20250126040823628", "20250126060846931"]
    assert timeline.is_committed("20250126040823628") is True
    assert timeline.is_committed("20250126060846931") is True
    assert timeline.is_committed("20250126040826878") is False  # rolled back: a gap between active instants
    assert timeline.is_committed("20250126040936578") is False  # a rollback is not a write
    assert timeline.is_committed("20250101000000000") is True  # older than the active timeline: archived
    assert timeline.is_committed("20250126070000000") is False
    assert timeline.latest_time == "20250126060846931"
    assert timeline.last_completed_commit == Instant("20250126060846931", State.COMPLETED, Action.DELTACOMMIT)
    assert timeline.pending == []
    rollback = timeline.avro_record(timeline.instants[1])
    assert rollback["commitsRollback"] == ["20250126040826878"]
    assert rollback["instantsRollback"] == [{"commitTime": "20250126040826878", "action": "deltacommit"}]
    assert rollback["totalFilesDeleted"] == 1
    plan = timeline.avro_record(Instant("20250126040936578", State.REQUESTED, Action.ROLLBACK))
    assert plan["instantToRollback"] == {"commitTime": "20250126040826878", "action": "deltacommit"}
    meta = timeline.commit_metadata(timeline.instants[2])
    assert meta.schema is not None and json.loads(meta.schema)["type"] == "record"


def test_timeline_load_real_overwritetable_replacecommit(tmp_path: Path) -> None:
    base = _extract("cow_v6_simplekeygen_nonhivestyle_overwritetable", tmp_path)
    timeline = Timeline.load(base)
    assert [str(i) for i in timeline.instants] == [
        "20240707001301554__commit__COMPLETED",
        "20240707001302376__commit__COMPLETED",
        "20240707001303088__replacecommit__COMPLETED",
    ]
    replace = timeline.commit_metadata(timeline.instants[2])
    assert replace.operation_type == "INSERT_OVERWRITE_TABLE"
    assert replace.partition_to_replace_file_ids == {
        "10": ("4f2685a3-614f-49ca-9b2b-e1cb9fb61f27-0",),
        "20": ("88163884-fef0-4aab-865d-c72327a8a1d5-0",),
        "30": ("d398fae1-c0e6-4098-8124-f55f7098bdba-0",),
    }
    assert [(s.partition_path, s.file_id) for s in replace.write_stats()] == [
        ("30", "ebcb261d-62d3-4895-90ec-5b3c9622dff4-0")
    ]
    assert replace.partitions == {"10", "20", "30"}
    # Every replaced group was written by one of the two commits before.
    written = {
        (s.partition_path, s.file_id)
        for i in timeline.instants[:2]
        for s in timeline.commit_metadata(i).write_stats()
    }
    assert {(p, f) for p, ids in replace.partition_to_replace_file_ids.items() for f in ids} <= written
    requested = timeline.avro_record(Instant("20240707001303088", State.REQUESTED, Action.REPLACECOMMIT))
    assert requested == {
        "operationType": None,
        "clusteringPlan": None,
        "extraMetadata": None,
        "version": None,
    }


def test_timeline_load_ignores_non_instant_files_and_temp_names(tmp_path: Path) -> None:
    hoodie = tmp_path / ".hoodie"
    (hoodie / "archived").mkdir(parents=True)
    for name in (
        "hoodie.properties",
        f"{T1}.commit.crc",
        f".{T1}.commit.abc.tmp",
        f"{T2}.compaction",
        f"{T2}.compaction.requested",
        f"{T3}.commit.requested",
        f"{T3}.inflight",
    ):
        (hoodie / name).write_bytes(b"")
    (hoodie / f"{T1}.commit").write_bytes(_commit_json())
    timeline = Timeline.load(tmp_path)
    assert [str(i) for i in timeline.instants] == [
        f"{T1}__commit__COMPLETED",
        f"{T2}__compaction__REQUESTED",
        f"{T3}__commit__INFLIGHT",
    ]
    assert [i.timestamp for i in timeline.pending] == [T2, T3]
    assert timeline.is_committed(T3) is False
    assert timeline.latest_time == T3


def _start_at(args: tuple[str, str, str, float]) -> str:
    base, timestamp, action, go = args
    while time.time() < go:  # both processes leave the barrier in the same moment
        pass
    try:
        TimelineStore(base).create_requested(timestamp, Action(action))
    except CommitConflictError:
        return "lost"
    return "won"


def test_two_processes_never_start_different_actions_at_one_instant_time(store: TimelineStore) -> None:
    # spawn, not fork: a forked child can inherit a lock one of this process' threads held, and hang.
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        for n in range(30):
            t = f"2024010100{n:04d}000"
            go = time.time() + 0.1
            results = pool.map(
                _start_at, [(store.base_path, t, "commit", go), (store.base_path, t, "clean", go)]
            )
            assert sorted(results) == ["lost", "won"], (t, results)
            assert len([f for f in _listing(store) if f.startswith(t)]) == 1


def test_a_state_change_parses_only_its_own_instants_files(
    store: TimelineStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Starting, moving and completing an instant reads the names of that instant only: parsing every
    file of the timeline for each step made writing a long history quadratic (10,000 instants)."""
    for n in range(1, 31):
        t = f"2025010100000{n:04d}"
        store.transition_to_completed(
            store.transition_to_inflight(store.create_requested(t, Action.DELTACOMMIT)), b"{}"
        )
    parsed: list[str] = []
    parse = type(store.layout).parse_file_name

    def counting(self: object, name: str) -> Instant | None:
        parsed.append(name)
        return parse(self, name)

    monkeypatch.setattr(type(store.layout), "parse_file_name", counting)
    t = "20250101000000100"
    requested = store.create_requested(t, Action.COMMIT)
    assert parsed == []
    store.transition_to_completed(store.transition_to_inflight(requested), b"{}")
    assert sorted(parsed) == sorted([f"{t}.commit.requested", f"{t}.commit.requested", f"{t}.inflight"])
