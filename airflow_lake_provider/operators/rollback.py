"""Failed writes from a DAG: ``RollbackFailedWritesOperator`` and ``LakeWriteOperator``.

Module import stays light (no pyarrow, polars or table core): the core is imported in ``execute``,
so DAG parsing does not pay for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_lake_provider.assets import emit_table_event, with_table_outlet
from airflow_lake_provider.operators.summary import rollback_table

if TYPE_CHECKING:
    from airflow.sdk import Context

# Extra metadata keys of a write's instant naming the task attempt that started it.
META_DAG, META_TASK, META_RUN, META_TRY = (
    "lake.airflow.dag_id",
    "lake.airflow.task_id",
    "lake.airflow.run_id",
    "lake.airflow.try_number",
)


def _open(table_path: str, lake_conn_id: str | None) -> Any:
    from airflow_lake_provider.hooks.lake import LakeHook

    return LakeHook(lake_conn_id=lake_conn_id).open_table(table_path)


class RollbackFailedWritesOperator(BaseOperator):
    """Roll back failed writes of a Hudi table (``lake rollback``): every one the table's
    failed-writes policy allows, or ``instant``. Nothing to roll back is a success (``NO_WORK``).

    The task log shows one table row per rollback (its instant, the instant rolled back, files
    deleted).

    XCom: the return value is ``{"outcome": "ROLLED_BACK" | "NO_WORK", "rollbacks": [{"instant",
    "rolled_back", "action", "deleted", "marked", "resumed"}, ...]}``.

    Assets: the table's Asset is an outlet when ``table_path`` is a literal absolute path or URI
    (else pass ``outlets``); its event's extra is ``{"table", "instant" (the last rollback),
    "outcome", "rolled_back"}``.

    :param table_path: base path of the table, or relative to the lake connection's ``base_path``. (templated)
    :param instant: one instant to roll back instead. (templated)
    :param force: allow rolling back the latest completed commit (with ``instant``).
    :param options: options over the table's (``hoodie.cleaner.policy.failed.writes``, ...). (templated)
    :param lake_conn_id: optional ``lake`` connection. (templated)
    """

    template_fields: Sequence[str] = ("table_path", "instant", "options", "lake_conn_id")
    ui_color = "#f8cecc"

    def __init__(
        self,
        *,
        table_path: str,
        instant: str | None = None,
        force: bool = False,
        options: Mapping[str, str] | None = None,
        lake_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs["outlets"] = with_table_outlet(table_path, kwargs.get("outlets"))
        super().__init__(**kwargs)
        self.table_path = table_path
        self.instant = instant
        self.force = force
        self.options = dict(options or {})
        self.lake_conn_id = lake_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_lake_provider.lake.services.rollback import rollback

        table = _open(self.table_path, self.lake_conn_id)
        results = rollback(table, self.instant or None, force=self.force, options=self.options)
        rollbacks = [r.to_dict() for r in results]
        if rollbacks:
            self.log.info("rolled back in %s:\n%s", table.uri, rollback_table(rollbacks))
        else:
            self.log.info("no failed writes to roll back in %s", table.uri)
        outcome = "ROLLED_BACK" if results else "NO_WORK"
        emit_table_event(
            context,
            self.outlets,
            (table.uri,),
            {
                "table": table.uri,
                "instant": results[-1].instant if results else None,
                "outcome": outcome,
                "rolled_back": [r.target for r in results],
            },
        )
        return {"outcome": outcome, "rollbacks": rollbacks}


class LakeWriteOperator(BaseOperator):
    """Write a parquet file into a Hudi table as one instant (``lake write``).

    The instant's commit metadata names the DAG, task and run that started it. A retry first rolls
    back the instants an earlier attempt of the same task and run left pending (whatever the table's
    failed-writes policy), then writes again, so a killed attempt never leaves its files behind or
    blocks the table.

    XCom: the return value is ``{"instant", "rolled_back", "inserted", "updated", "deleted"}``.

    Assets: the table's Asset is an outlet when ``table_path`` is a literal absolute path or URI
    (else pass ``outlets``); its event's extra is ``{"table", "instant", "outcome": "COMMITTED"}``.

    :param table_path: base path of the table, or relative to the lake connection's ``base_path``. (templated)
    :param input_path: the parquet file to write. (templated)
    :param operation: ``insert``, ``upsert`` or ``delete``. (templated)
    :param options: write options over the table's. (templated)
    :param lake_conn_id: optional ``lake`` connection. (templated)
    """

    template_fields: Sequence[str] = ("table_path", "input_path", "operation", "options", "lake_conn_id")
    ui_color = "#dae8fc"

    def __init__(
        self,
        *,
        table_path: str,
        input_path: str,
        operation: str = "upsert",
        options: Mapping[str, str] | None = None,
        lake_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs["outlets"] = with_table_outlet(table_path, kwargs.get("outlets"))
        super().__init__(**kwargs)
        self.table_path = table_path
        self.input_path = input_path
        self.operation = operation
        self.options = dict(options or {})
        self.lake_conn_id = lake_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        import pyarrow.parquet as pq

        from airflow_lake_provider.lake.services.rollback import rollback
        from airflow_lake_provider.lake.table.writer import write

        ti = context["ti"]
        me = {META_DAG: ti.dag_id, META_TASK: ti.task_id, META_RUN: ti.run_id}
        table = _open(self.table_path, self.lake_conn_id)
        rolled_back = []
        for instant in earlier_attempts(table, me):
            self.log.info("rolling back %s, left pending by an earlier attempt of this task", instant)
            rolled_back += [r.target for r in rollback(table, instant)]
        batch = pq.read_table(self.input_path)
        result = write(
            table,
            batch,
            self.operation,
            options=self.options,
            extra_metadata={**me, META_TRY: str(ti.try_number)},
        )
        self.log.info("wrote %s to %s: %s", self.input_path, table.uri, result.instant)
        emit_table_event(
            context,
            self.outlets,
            (table.uri,),
            {"table": table.uri, "instant": result.instant, "outcome": "COMMITTED"},
        )
        return {
            "instant": result.instant,
            "rolled_back": rolled_back,
            "inserted": result.inserted,
            "updated": result.updated,
            "deleted": result.deleted,
        }


def earlier_attempts(table: Any, me: Mapping[str, str]) -> list[str]:
    """Pending writes whose inflight metadata names this DAG, task and run."""
    from airflow_lake_provider.lake.errors import LakeError
    from airflow_lake_provider.lake.format.commit_metadata import CommitMetadata
    from airflow_lake_provider.lake.format.instant import Action

    timeline = table.timeline()
    found = []
    for instant in timeline.pending:
        if instant.action not in (Action.COMMIT, Action.DELTACOMMIT) or not instant.is_inflight:
            continue
        try:
            meta = CommitMetadata.from_json_bytes(timeline.read_bytes(instant), timeline.path_of(instant))
        except LakeError:
            continue  # not ours to judge: the failed-writes policy handles it
        extra = meta.extra_metadata or {}
        if all(extra.get(k) == v for k, v in me.items()):
            found.append(instant.timestamp)
    return found
