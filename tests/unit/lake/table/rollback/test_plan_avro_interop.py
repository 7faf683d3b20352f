"""Java interop of rollback and restore timeline files, checked against Hudi's own Avro schemas:
every ``.rollback.requested``, ``.rollback``, ``.restore.requested`` and ``.restore`` file we write is
read back with Hudi's schemas as reader schemas (Avro schema resolution, as Java reads them) and
holds what we meant to write. The schemas are the package's verbatim copies of Hudi's (the tests
reach nothing outside the repository)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest
from crash_support import crashing

from airflow_lake_provider.lake.services.restore import restore
from airflow_lake_provider.lake.services.savepoint import create_savepoint
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.rollback.executor import rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

REPO = Path(__file__).resolve().parents[5]
SHIPPED = REPO / "airflow_lake_provider" / "lake" / "format" / "schemas"


def _load(path: Path) -> dict[str, Any]:
    return json.loads(re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.DOTALL))


@pytest.fixture(scope="module")
def schemas() -> dict[str, Any]:
    named: dict[str, Any] = {}
    out = {}
    for name in ("HoodieInstantInfo", "HoodieRollbackPlan", "HoodieRollbackMetadata"):
        out[name] = fastavro.parse_schema(_load(SHIPPED / f"{name}.avsc"), named)
    for name in ("HoodieRestorePlan", "HoodieRestoreMetadata"):
        out[name] = fastavro.parse_schema(_load(SHIPPED / f"{name}.avsc"), named)
    return out


def _read(path: Path, schema: Any) -> dict[str, Any]:
    [record] = list(fastavro.reader(io.BytesIO(path.read_bytes()), reader_schema=schema))
    return record


def _batch(ids: list[int], ts: int) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "p": pa.array(["a" if i % 2 else "b" for i in ids]),
        }
    )


def test_rollback_and_restore_files_read_with_hudis_schemas(tmp_path: Path, schemas: dict[str, Any]) -> None:
    path = tmp_path / "t"
    table = LakeTable.create(
        path,
        name="t",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
    )
    first = write(table, _batch([1, 2, 3], 1), "insert").instant
    create_savepoint(table, first)
    write(table, _batch([1, 2], 2), "upsert")

    def die_before_commit(point: str) -> None:
        if point == "commit":
            raise SimulatedCrash("killed")

    with pytest.raises(SimulatedCrash):
        write(table, _batch([1, 4], 3), "upsert", fault=die_before_commit)
    [failed] = table.timeline().pending
    with pytest.raises(SimulatedCrash):  # leave a requested and an inflight rollback
        rollback(crashing(table, 2))
    hoodie = path / ".hoodie"
    [pending_plan] = hoodie.glob("*.rollback.requested")
    plan = _read(pending_plan, schemas["HoodieRollbackPlan"])
    assert plan["instantToRollback"] == {"commitTime": failed.timestamp, "action": "deltacommit"}
    assert plan["RollbackRequests"] and all(
        r["partitionPath"] in ("a", "b") for r in plan["RollbackRequests"]
    )
    [done] = rollback(table)
    meta = _read(hoodie / f"{done.instant}.rollback", schemas["HoodieRollbackMetadata"])
    assert meta["commitsRollback"] == [failed.timestamp]
    assert meta["instantsRollback"] == [{"commitTime": failed.timestamp, "action": "deltacommit"}]
    files = sorted(f for p in meta["partitionMetadata"].values() for f in p["successDeleteFiles"])
    assert files == sorted(table.storage.uri(f) for f in done.deleted) and files
    assert all(not p["failedDeleteFiles"] for p in meta["partitionMetadata"].values())

    result = restore(table, first)
    [restore_plan] = hoodie.glob("*.restore.requested")
    plan = _read(restore_plan, schemas["HoodieRestorePlan"])
    rolled = [i["commitTime"] for i in plan["instantsToRollback"]]
    assert rolled and all(t > first for t in rolled)
    meta = _read(hoodie / f"{restore_plan.name.split('.')[0]}.restore", schemas["HoodieRestoreMetadata"])
    assert sorted(meta["instantsToRollback"]) == sorted(rolled)
    nested = [m for ms in meta["hoodieRestoreMetadata"].values() for m in ms]
    assert sorted(c for m in nested for c in m["commitsRollback"]) == sorted(rolled)
    assert result is not None
