"""The timeline store on timeline layout 2 (table versions 8 and 9): file names per state as Hudi 1.x
writes them, completion times from the instant clock later than every time on the timeline, and
Avro commit metadata that decodes under the shipped 1.x schema exactly as Spark's files of the
same action do (``tests/data/hudi-tables-1x``)."""

from __future__ import annotations

import datetime as dt
import io
import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fastavro
import pytest

from airflow_lake_provider.lake.errors import CommitConflictError, InvalidStateTransitionError
from airflow_lake_provider.lake.format.table_config import TableConfig, TableType
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline import layout_v2
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat
from airflow_lake_provider.lake.timeline.instant import Action, Instant, InstantClock, State
from airflow_lake_provider.lake.timeline.layouts import TimelineLayout
from airflow_lake_provider.lake.timeline.store import TimelineStore

T1 = "20250101000000001"
T2 = "20250101000000002"
# A clock that stands still in 2024: every time it gives comes from the timeline's floor.
PAST = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)


def _store(tmp_path: Path, version: int, now: dt.datetime = PAST) -> TimelineStore:
    props = TableConfig.new_properties(
        name="tbl",
        table_type=TableType.MERGE_ON_READ,
        record_key_fields=("id",),
        precombine_field="ts",
        table_version=version,
    )
    store = TimelineStore(tmp_path / "tbl", TimelineLayout.from_properties(props), InstantClock(lambda: now))
    store.initialize(props)
    return store


def _names(store: TimelineStore) -> list[str]:
    return sorted(store.storage.list_names(".hoodie/timeline"))


@pytest.mark.parametrize("version", [8, 9])
def test_states_are_named_as_hudi_1x_names_them_and_completion_is_after_every_time(
    version: int, tmp_path: Path
) -> None:
    store = _store(tmp_path, version)
    delta = store.create_requested(T1, Action.DELTACOMMIT)
    commit = store.create_requested(T2, Action.COMMIT)
    assert _names(store) == [f"{T1}.deltacommit.requested", f"{T2}.commit.requested"]
    body = CommitMetadata("UPSERT", extra_metadata={"schema": "{}"}).to_avro_bytes()
    inflight = store.transition_to_inflight(delta, body)
    store.transition_to_inflight(commit, body)
    assert (tmp_path / "tbl/.hoodie/timeline" / f"{T1}.deltacommit.inflight").read_bytes() == body
    assert (tmp_path / "tbl/.hoodie/timeline" / f"{T2}.inflight").read_bytes() == body
    # The clock is in 2024: the completion time still comes after T2, a later requested time.
    done = store.transition_to_completed(inflight, body)
    assert done.completion_time == "20250101000000003"
    assert f"{T1}_20250101000000003.deltacommit" in _names(store)
    done2 = store.transition_to_completed(commit.with_state(State.INFLIGHT), body)
    assert done2.completion_time == "20250101000000004"  # after the other completion time too
    assert not (
        tmp_path / "tbl/.hoodie" / f"{T1}.deltacommit.requested"
    ).exists()  # nothing in layout 1's place
    timeline = Timeline.load(store.storage, store.layout)
    assert [(i.timestamp, i.completion_time) for i in timeline.completed_commits] == [
        (T1, "20250101000000003"),
        (T2, "20250101000000004"),
    ]
    assert timeline.commit_metadata(timeline.completed_commits[0]).extra_metadata == {"schema": "{}"}
    with pytest.raises(CommitConflictError, match="already completed"):
        store.transition_to_completed(inflight, body)
    with pytest.raises(CommitConflictError, match="already used"):
        store.create_requested(T1, Action.DELTACOMMIT)
    with pytest.raises(InvalidStateTransitionError, match="is completed"):
        store.remove_pending(T2)  # the completed file (with its completion time) is found


def test_completion_time_follows_the_clock_when_it_is_ahead(tmp_path: Path) -> None:
    store = _store(tmp_path, 8, now=dt.datetime(2026, 5, 1, 12, 0, 0, 123000, tzinfo=dt.timezone.utc))
    inflight = store.transition_to_inflight(store.create_requested(T1, Action.COMMIT), b"")
    assert store.transition_to_completed(inflight, b"").completion_time == "20260501120000123"


def test_a_requested_instant_cannot_complete_without_inflight(tmp_path: Path) -> None:
    store = _store(tmp_path, 8)
    requested = store.create_requested(T1, Action.COMMIT)
    with pytest.raises(InvalidStateTransitionError, match="no inflight commit"):
        store.transition_to_completed(requested.with_state(State.INFLIGHT), b"")
    assert _names(store) == [f"{T1}.commit.requested"]


def _record(data: bytes) -> tuple[dict, dict]:
    reader = fastavro.reader(io.BytesIO(data))
    writer_schema = reader.writer_schema
    records = list(
        fastavro.reader(
            io.BytesIO(data), reader_schema=timeline_avro.schema_1x(timeline_avro.COMMIT_METADATA)
        )
    )
    assert len(records) == 1
    return writer_schema, records[0]


def _shape(value: object) -> object:
    """A value's type, recursively (what field-by-field comparison of two records checks)."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__


# Fields of a write stat we leave null where Spark fills them: the previous base file's name and
# Spark's per-task timings (hudi-rs and Java's readers do not need them).
LEFT_NULL = {"prevBaseFile", "runtimeStats"}


@pytest.mark.parametrize(
    ("table", "completed", "inflight", "log"),
    [
        (
            "cow_v9_txns_simple_nometa",
            "20260307135700696_20260307135701669.commit",
            "20260307135700696.inflight",
            False,
        ),
        (
            "mor_avro_v9_txns_simple_nometa",
            "20260307135830801_20260307135831753.deltacommit",
            "20260307135830801.deltacommit.inflight",
            True,
        ),
    ],
)
def test_commit_metadata_decodes_like_sparks_field_by_field(
    table: str, completed: str, inflight: str, log: bool, hudi_table_zip: Callable[[str], Path]
) -> None:
    timeline = hudi_table_zip(table) / ".hoodie" / "timeline"
    theirs_schema, theirs = _record((timeline / completed).read_bytes())
    name = "f1-0_0-1-1_20250101000000001.parquet" if not log else ".f1-0_20250101000000001.log.1_0-1-1"
    stat = WriteStat(
        file_id="f1-0",
        partition_path="region=us",
        path=f"region=us/{name}",
        prev_commit="20250101000000000",
        num_writes=3,
        num_update_writes=1,
        total_write_bytes=100,
        file_size_in_bytes=100,
        **({"base_file": "", "log_files": (name,), "log_version": 1, "log_offset": 0} if log else {}),
    )
    ours_bytes = CommitMetadata("UPSERT", {"region=us": (stat,)}, {"schema": "{}"}).to_avro_bytes()
    ours_schema, ours = _record(ours_bytes)
    assert ours_schema == theirs_schema  # the writer schema in the file header: Hudi 1.x's own
    assert list(ours) == list(theirs)
    ours_stat, theirs_stat = (
        ours["partitionToWriteStats"]["region=us"][0],
        theirs["partitionToWriteStats"]["region=us"][0],
    )
    assert list(ours_stat) == list(theirs_stat)
    differ = {k for k in ours_stat if _shape(ours_stat[k]) != _shape(theirs_stat[k])}
    assert differ == (LEFT_NULL if not log else {"runtimeStats"})  # Spark's log stats: no prevBaseFile
    theirs["extraMetadata"].pop("_hoodie.spark.sql.writes.prepped")  # Spark SQL's own marker
    assert {k: _shape(v) for k, v in ours.items() if k != "partitionToWriteStats"} == {
        k: _shape(v) for k, v in theirs.items() if k != "partitionToWriteStats"
    }
    # The inflight file: the same record type (Spark adds a workload profile, we the operation only).
    inflight_schema, _ = _record((timeline / inflight).read_bytes())
    body = CommitMetadata("UPSERT", extra_metadata={}).to_avro_bytes()
    assert _record(body)[0] == inflight_schema


def test_java_avro_reads_our_commit_files_under_hudi_1x_schema(tmp_path: Path, spark: Any) -> None:
    """Java's Avro (in Spark's JVM) opens each commit file of a real v8 MOR write, resolving it to the
    shipped Hudi 1.x schema, and reads the fields we wrote."""
    import pyarrow as pa

    from airflow_lake_provider.lake.table.table import LakeTable
    from airflow_lake_provider.lake.table.write import write

    path = tmp_path / "t"
    table = LakeTable.create(
        path, name="t", table_type="mor", record_key_fields=("id",), precombine_field="ts", table_version=8
    )
    write(table, pa.table({"id": ["a", "b"], "ts": [1, 1]}), "insert")
    done = write(table, pa.table({"id": ["a"], "ts": [2]}), "upsert")
    timeline = LakeTable.open(path).timeline()
    completed = timeline.get(done.instant)
    assert completed is not None and completed.completion_time is not None
    files = {
        "completed": path / ".hoodie/timeline" / f"{done.instant}_{completed.completion_time}.deltacommit",
        "inflight": path / ".hoodie/timeline" / f"{done.instant}.deltacommit.inflight",
    }
    jvm = spark.sparkContext._jvm
    shipped = jvm.org.apache.avro.Schema.Parser().parse(
        json.dumps(timeline_avro.load_schema_text("HoodieCommitMetadata.1x"))
    )
    read: dict[str, Any] = {}
    for what, file in files.items():
        reader = jvm.org.apache.avro.file.DataFileReader(
            jvm.java.io.File(str(file)), jvm.org.apache.avro.generic.GenericDatumReader(None, shipped)
        )
        record = reader.next()
        assert not reader.hasNext()
        reader.close()
        read[what] = json.loads(record.toString())
    assert read["inflight"]["operationType"] == "UPSERT"
    assert read["inflight"]["partitionToWriteStats"] == {}
    ours = timeline.commit_metadata(completed)
    (stat,) = ours.write_stats()
    (java_stat,) = read["completed"]["partitionToWriteStats"][""]
    assert read["completed"]["operationType"] == "UPSERT"
    assert read["completed"]["extraMetadata"]["schema"] == ours.extra_metadata["schema"]
    assert (java_stat["fileId"], java_stat["path"], java_stat["logFiles"]) == (
        stat.file_id,
        stat.path,
        [f".{stat.file_id}_{done.instant}.log.1_{stat.path.rsplit('_', 1)[1]}"],
    )
    assert (java_stat["numUpdateWrites"], java_stat["prevCommit"]) == (1, done.instant)


def test_a_savepoint_completes_under_the_instant_lock_and_refuses_one_made_while_it_waited(
    tmp_path: Path,
) -> None:
    """Layout 2 takes a completion time for the savepoint under the instant lock (the lock the
    starts of instants take, so no time is handed out twice); a savepoint another process completed
    while this one waited for the lock is found then, and nothing more is written."""
    store = _store(tmp_path, 8)
    store.transition_to_completed(
        store.transition_to_inflight(store.create_requested(T1, Action.COMMIT)), b""
    )
    theirs = f"{T1}_20250101000000009.savepoint"

    def meanwhile() -> None:  # waiting, only its inflight file made
        assert f"{T1}.savepoint.inflight" in _names(store)
        store.storage.create(f".hoodie/timeline/{theirs}", b"theirs")

    outcome = while_the_instant_lock_is_held(store, lambda: store.create_savepoint(T1, b"ours"), meanwhile)
    assert len(outcome) == 1 and isinstance(outcome[0], CommitConflictError)
    assert str(outcome[0]) == f"{T1}: a savepoint already exists"
    assert [n for n in _names(store) if "savepoint" in n] == [f"{T1}.savepoint.inflight", theirs]
    assert (tmp_path / "tbl/.hoodie/timeline" / theirs).read_bytes() == b"theirs"


def test_un_completing_finds_the_completed_file_by_its_time_alone(tmp_path: Path) -> None:
    """The completed file of layout 2 carries a completion time the caller may not hold: the store
    deletes the file it finds for the instant's time."""
    store = _store(tmp_path, 8)
    inflight = store.transition_to_inflight(store.create_requested(T1, Action.DELTACOMMIT), b"")
    done = store.transition_to_completed(inflight, b"")
    store.remove_completed(Instant(T1, State.COMPLETED, Action.DELTACOMMIT))
    assert layout_v2.file_name(done) not in _names(store)
    assert _names(store) == [f"{T1}.deltacommit.inflight", f"{T1}.deltacommit.requested"]


def _decoded(data: bytes) -> tuple[dict, list[dict]]:
    """(writer schema, records) of an Avro container (its sync marker is random: bytes differ)."""
    reader = fastavro.reader(io.BytesIO(data))
    return reader.writer_schema, list(reader)


@pytest.mark.parametrize("version", [6, 8])
def test_plans_are_encoded_under_the_schema_of_the_tables_hudi_line(tmp_path: Path, version: int) -> None:
    """Layout 2 writes a plan whose schema changed in Hudi 1.x under the 1.x schema, others (and
    every plan of layout 1) under 0.x's."""
    store = _store(tmp_path, version)
    plan = {"operations": [], "extraMetadata": None, "version": 1}
    schema, records = _decoded(store.encode_plan(timeline_avro.COMPACTION_PLAN, plan))
    assert ("missingSchedulePartitions" in [f["name"] for f in schema["fields"]]) == (version == 8)
    expected = timeline_avro.write_avro_1x if version == 8 else timeline_avro.write_avro
    assert (schema, records) == _decoded(expected(timeline_avro.COMPACTION_PLAN, plan))
    clean = {
        "earliestInstantToRetain": None,
        "policy": "KEEP_LATEST_COMMITS",
        "filesToBeDeletedPerPartition": {},
    }
    assert _decoded(store.encode_plan(timeline_avro.CLEANER_PLAN, clean)) == _decoded(
        timeline_avro.write_avro(timeline_avro.CLEANER_PLAN, clean)
    )


def test_completing_an_instant_waits_for_the_instant_lock(tmp_path: Path) -> None:
    """Layout 2 takes the completion time under the instant lock (its file name is the protocol
    between processes), waiting for it as a start does: nothing is completed while another holds it."""
    store = _store(tmp_path, 8)
    inflight = store.transition_to_inflight(store.create_requested(T1, Action.DELTACOMMIT), b"")

    def meanwhile() -> None:  # waiting, nothing completed
        assert not any(n.endswith(".deltacommit") for n in _names(store))

    outcome = while_the_instant_lock_is_held(
        store, lambda: store.transition_to_completed(inflight, b""), meanwhile
    )
    assert len(outcome) == 1 and isinstance(outcome[0], Instant), outcome
    assert any(n.startswith(f"{T1}_") and n.endswith(".deltacommit") for n in _names(store))


def while_the_instant_lock_is_held(
    store: TimelineStore, call: Callable[[], object], meanwhile: Callable[[], None]
) -> list[object]:
    """Start ``call`` in a thread while the test holds the instant lock: it is still waiting half a
    second later, with nothing returned, when ``meanwhile`` runs; then the lock is let go. What the
    call returned or raised."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except Exception as exc:  # noqa: BLE001 - reported to the main thread
            outcome.append(exc)

    with store.storage.lock(".hoodie/.aux/.lake-instant.lock", "held by the test"):
        runner = threading.Thread(target=run)
        runner.start()
        runner.join(0.5)
        assert runner.is_alive() and outcome == []
        meanwhile()
    runner.join(30)
    return outcome
