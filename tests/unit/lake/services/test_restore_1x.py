"""Restore on table versions 8/9 (Hudi 1.x) picks and orders what it rolls back as Hudi 1.x's restore
planner does: after the savepoint and newest first by COMPLETION time (pending instants newest of
all), except that on a merge-on-read table a compaction compares by requested time. The timelines
here are written by hand (instants whose requested and completion orders differ, as concurrent
writers leave them; the writes carry no files); the plan and metadata decode under Hudi 1.x's
schemas."""

from __future__ import annotations

import io
from pathlib import Path

import fastavro
import pytest

from airflow_lake_provider.lake.services.restore import restore
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata
from airflow_lake_provider.lake.timeline.instant import Action, State

T = "20250601120000"  # + 3 digits of milliseconds


def _t(ms: int) -> str:
    return f"{T}{ms:03d}"


def _make(path: Path, kind: str, instants: list[tuple[str, int, int | None]], savepoint: int) -> LakeTable:
    table = LakeTable.create(
        path, name="r", table_type=kind, record_key_fields=("id",), precombine_field="ts", table_version=8
    )
    folder = path / table.layout.folder
    body = CommitMetadata("UPSERT", {}, {}).to_avro_bytes()
    for action, requested, completed in instants:
        t = _t(requested)
        if action == "compaction":
            (folder / f"{t}.compaction.requested").write_bytes(_compaction_plan())
            (folder / f"{t}.compaction.inflight").write_bytes(b"")
            if completed is not None:
                (folder / f"{t}_{_t(completed)}.commit").write_bytes(body)
            continue
        (folder / f"{t}.{action}.requested").write_bytes(b"")
        inflight = f"{t}.inflight" if action == "commit" else f"{t}.{action}.inflight"
        (folder / inflight).write_bytes(b"")
        if completed is not None:
            (folder / f"{t}_{_t(completed)}.{action}").write_bytes(body)
    record = {"savepointedBy": "t", "savepointedAt": 0, "comments": "", "partitionMetadata": {}, "version": 1}
    point = _t(savepoint)
    (folder / f"{point}.savepoint.inflight").write_bytes(b"")
    (folder / f"{point}_{_t(savepoint + 500)}.savepoint").write_bytes(
        timeline_avro.write_avro(timeline_avro.SAVEPOINT_METADATA, record)
    )
    return LakeTable.open(path)


def _compaction_plan() -> bytes:
    return timeline_avro.write_avro(
        timeline_avro.COMPACTION_PLAN, {"operations": [], "extraMetadata": None, "version": 2}
    )


@pytest.mark.parametrize(
    ("kind", "instants", "savepoint", "expected"),
    [
        # COW: a write requested before the savepoint but completed after it is undone; order by
        # completion time, the pending write first.
        (
            "cow",
            [("commit", 1, 2), ("commit", 3, 7), ("commit", 4, 5), ("commit", 8, 9), ("commit", 10, None)],
            4,
            [10, 8, 3],
        ),
        # MOR: a compaction requested before the savepoint stays although it completed after it (the
        # savepoint's logs belong to its slice); deltacommits go by completion time.
        (
            "mor",
            [
                ("deltacommit", 1, 2),
                ("compaction", 3, 6),
                ("deltacommit", 4, 5),
                ("deltacommit", 7, 11),
                ("compaction", 8, 9),
                ("deltacommit", 12, None),
            ],
            4,
            [12, 7, 8],
        ),
        # MOR: the compaction kept (requested before the savepoint) completed last of all: the
        # deltacommit after the savepoint is still undone (a forced rollback alone would refuse it:
        # it is not the commit completed last).
        (
            "mor",
            [("deltacommit", 1, 2), ("compaction", 3, 8), ("deltacommit", 4, 5), ("deltacommit", 6, 7)],
            4,
            [6],
        ),
    ],
)
def test_restore_rolls_back_in_hudi_1x_order(
    tmp_path: Path, kind: str, instants: list, savepoint: int, expected: list[int]
) -> None:
    table = _make(tmp_path / "t", kind, instants, savepoint)
    result = restore(table, _t(savepoint))
    assert list(result.rolled_back) == [_t(ms) for ms in expected]
    timeline = LakeTable.open(tmp_path / "t").timeline()
    left = sorted(i.timestamp for i in timeline.instants if i.action is not Action.SAVEPOINT)
    kept = sorted(_t(r) for _, r, _ in instants if r not in expected)
    assert [t for t in left if t in kept or t < result.instant] == kept  # (plus rollbacks, the restore)
    assert read_snapshot(table).num_rows == 0
    # The plan (instants newest first) and the metadata decode under Hudi 1.x's schemas.
    (done,) = timeline.filter([Action.RESTORE], [State.COMPLETED])
    folder = tmp_path / "t" / table.layout.folder
    plan = timeline.avro_record(done.with_state(State.REQUESTED))
    assert [i["commitTime"] for i in plan["instantsToRollback"]] == list(result.rolled_back)
    data = (folder / table.layout.file_name(done)).read_bytes()
    schema = timeline_avro.schema_1x(timeline_avro.RESTORE_METADATA)
    (record,) = fastavro.reader(io.BytesIO(data), reader_schema=schema)
    assert record["instantsToRollback"] == list(result.rolled_back)
    for t, rollbacks in record["hoodieRestoreMetadata"].items():
        assert [r["commitsRollback"] for r in rollbacks] == [[t]]
        assert all(
            m["logFilesFromFailedCommit"] == {} for r in rollbacks for m in r["partitionMetadata"].values()
        )
