"""XCom carries a bounded summary, not a whole plan: counts, instant and outcome as they are, lists and
maps of names cut to 10 with "... and N more". The full plan stays on the timeline."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pendulum
import pyarrow as pa
import pytest
from dag_helpers import sync_dags_folder, task_states, xcom_value

from airflow_lake_provider.lake.services.compaction.operation import load_plan
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.operators.xcom import capped, compaction_plan_summary, xcom_summary

pytestmark = pytest.mark.airflow

DAG_ID = "lake_big_plan"
GROUPS, PARTITIONS = 60, 15
# The bound: a summary of a plan of any size (the unbounded one of this table was over 60 KB).
MAX_XCOM_BYTES = 4096


def test_lists_and_maps_of_names_are_cut_with_how_many_more() -> None:
    names = [f"f{i:03d}" for i in range(25)]
    assert capped(names) == [*names[:10], "... and 15 more"]
    assert capped(names[:10]) == names[:10]  # at the limit: nothing cut
    parts = {f"p{i:02d}": {"files": i, "bytes": 10 * i} for i in range(12)}
    assert capped(parts) == {
        **{f"p{i:02d}": {"files": i, "bytes": 10 * i} for i in range(10)},
        "...": "... and 2 more",
    }
    # Records inside a list keep every field; their own lists are cut to 3.
    rollbacks = [{"instant": "2", "deleted": names, "resumed": False}]
    assert capped(rollbacks) == [
        {"instant": "2", "deleted": ["f000", "f001", "f002", "... and 22 more"], "resumed": False}
    ]
    summary = {"outcome": "CLEANED", "instant": "20240101000000000", "deleted_files": 480, "held_back_by": []}
    assert xcom_summary(summary) == summary  # scalars and short lists as they are
    assert compaction_plan_summary(None) is None


def _big_table(path: Path) -> LakeTable:
    """A MOR table of 60 file groups in 15 partitions (one row per file), each with one log file."""
    table = LakeTable.create(
        path,
        name="big",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
    )
    ids = [f"k{i:03d}" for i in range(GROUPS)]
    parts = [f"p{i % PARTITIONS:02d}" for i in range(GROUPS)]
    for ts in (0, 1):
        batch = {"id": ids, "ts": pa.array([ts] * GROUPS, pa.int64()), "p": parts, "v": [ts] * GROUPS}
        write(table, pa.table(batch), "insert" if ts == 0 else "upsert", max_rows_per_file=1)
    return table


def test_a_big_plan_pushes_a_bounded_summary_and_stays_whole_on_the_timeline(
    airflow_db: Path, tmp_path: Path
) -> None:
    table = _big_table(tmp_path / "big")
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "big.py").write_text(
        textwrap.dedent(
            f"""
            import pendulum
            from airflow.sdk import DAG

            from airflow_lake_provider.operators.clean import ScheduleCleanOperator
            from airflow_lake_provider.operators.compaction import (
                RunCompactionOperator,
                ScheduleCompactionOperator,
            )

            TABLE = {str(table.base_path)!r}
            with DAG("{DAG_ID}", schedule=None, start_date=pendulum.datetime(2024, 1, 1, tz="UTC")):
                due = {{"hoodie.compact.inline.max.delta.commits": "1"}}
                plan = ScheduleCompactionOperator(task_id="plan", table_path=TABLE, options=due)
                run = RunCompactionOperator(task_id="compact", table_path=TABLE, instant_task_id="plan")
                clean = ScheduleCleanOperator(
                    task_id="clean",
                    table_path=TABLE,
                    options={{
                        "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
                        "hoodie.cleaner.fileversions.retained": "1",
                    }},
                )
                plan >> run >> clean
            """
        )
    )
    dag = sync_dags_folder(folder).dags[DAG_ID]
    dr = dag.test(logical_date=pendulum.datetime(2024, 1, 5, tz="UTC"))
    assert task_states(DAG_ID, dr.run_id) == {"plan": "success", "compact": "success", "clean": "success"}
    plan, compact, clean = (xcom_value(DAG_ID, dr.run_id, t) for t in ("plan", "compact", "clean"))
    for value in (plan, compact, clean):
        assert len(json.dumps(value)) < MAX_XCOM_BYTES, value

    c = plan["instant"]
    assert (plan["outcome"], plan["operations"]) == ("SCHEDULED", GROUPS)
    assert (plan["plan"]["operations"], plan["plan"]["log_files"]) == (GROUPS, GROUPS)
    groups = plan["plan"]["file_groups"]
    assert len(groups) == 11 and groups[-1] == f"... and {GROUPS - 10} more"
    assert all(g.startswith("p") and "/" in g for g in groups[:10])
    assert list(plan["partitions"])[:10] == [f"p{i:02d}" for i in range(10)]
    p00 = plan["partitions"]["p00"]
    assert (p00["file_groups"], p00["log_files"]) == (4, 4) and p00["io_mb"] > 0
    assert plan["partitions"]["..."] == f"... and {PARTITIONS - 10} more"
    # The whole plan stays on the timeline.
    timeline = table.timeline()
    whole = load_plan(timeline, c)
    assert len(whole.operations) == GROUPS
    assert {f"{op.partition}/{op.file_id}" for op in whole.operations} >= set(groups[:10])

    assert (compact["outcome"], compact["instant"], compact["operations"]) == ("COMPLETED", c, GROUPS)
    assert compact["records_written"] == GROUPS
    assert len(compact["files"]) == 11 and compact["files"][-1] == f"... and {GROUPS - 10} more"

    assert (clean["outcome"], clean["files_planned"], clean["deleted_files"]) == (
        "CLEANED",
        2 * GROUPS,
        2 * GROUPS,
    )
    assert len(clean["partitions"]) == 11 and clean["partitions"]["..."] == f"... and {PARTITIONS - 10} more"
    assert clean["partitions"]["p00"]["files"] == 8  # 4 groups: a base and a log file each
