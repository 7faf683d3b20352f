"""``LakeWriteOperator``: one write (instant) into a Hudi table from a DAG.

Module import stays light (no pyarrow, polars or table core): the core is imported in ``execute``,
so DAG parsing does not pay for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_lake_provider.assets import emit_table_event, with_table_outlet
from airflow_lake_provider.hooks.write import (
    DEFAULT_WRITE_SPARK_THRESHOLD,
    META_DAG,
    META_MAP_INDEX,
    META_RUN,
    META_TASK,
    META_TRY,
    WRITE_OPERATIONS,
)
from airflow_lake_provider.operators.xcom import xcom_summary

if TYPE_CHECKING:
    from airflow.sdk import Context


class LakeWriteOperator(BaseOperator):
    """Write a parquet file, or a folder of parquet files, into a Hudi table as one instant.

    Inputs of at most ``spark_threshold`` rows (from the parquet footers) are written in the worker;
    larger ones by ``spark_jobs/write.py`` through ``SparkSubmitHook`` (file groups written in Spark
    tasks). The instant's commit metadata names the DAG, task, run and try that started it. A retry
    first rolls back the instants an earlier try of the same task and run left pending (whatever
    the table's failed-writes policy, and wherever that try ran), then writes again, so a killed
    attempt never leaves its files behind or blocks the table.

    XCom: the return value is ``{"outcome": "COMMITTED", "instant", "rolled_back", "inserted",
    "updated", "deleted"}``.

    Assets: the table's Asset is an outlet when ``table_path`` is a literal absolute path or URI
    (else pass ``outlets``); its event's extra is ``{"table", "instant", "outcome": "COMMITTED"}``.

    :param table_path: base path of the table, or relative to the lake connection's ``base_path``. (templated)
    :param input_path: a parquet file or a folder of them, local or ``s3://``. (templated)
    :param operation: ``insert``, ``upsert`` or ``delete``. (templated)
    :param options: write options over the table's. (templated)
    :param lake_conn_id: optional ``lake`` connection. (templated)
    :param spark_threshold: the most input rows written in the worker. (templated)
    :param spark_conn_id: the Spark connection for large inputs.
    :param spark_conf: extra ``--conf`` values for ``spark-submit``. (templated)
    :param spark_env: extra environment variables for ``spark-submit``.
    """

    template_fields: Sequence[str] = (
        "table_path",
        "input_path",
        "operation",
        "options",
        "lake_conn_id",
        "spark_threshold",
        "spark_conf",
    )
    ui_color = "#dae8fc"

    def __init__(
        self,
        *,
        table_path: str,
        input_path: str,
        operation: str = "upsert",
        options: Mapping[str, str] | None = None,
        lake_conn_id: str | None = None,
        spark_threshold: int | str = DEFAULT_WRITE_SPARK_THRESHOLD,
        spark_conn_id: str = "spark_default",
        spark_conf: Mapping[str, Any] | None = None,
        spark_env: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs["outlets"] = with_table_outlet(table_path, kwargs.get("outlets"))
        # Refused when the DAG is parsed, not when the task runs (a template is checked then).
        if not isinstance(operation, str) or ("{{" not in operation and operation not in WRITE_OPERATIONS):
            raise ValueError(f"operation={operation!r} is not one of {', '.join(WRITE_OPERATIONS)}")
        super().__init__(**kwargs)
        self.table_path = table_path
        self.input_path = input_path
        self.operation = operation
        self.options = dict(options or {})
        self.lake_conn_id = lake_conn_id
        self.spark_threshold = spark_threshold
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.spark_env = dict(spark_env or {})
        self._hook: Any = None

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_lake_provider.hooks.lake import LakeHook

        ti = context["ti"]
        attempt = {
            META_DAG: ti.dag_id,
            META_TASK: ti.task_id,
            META_RUN: ti.run_id,
            META_TRY: str(ti.try_number),
        }
        map_index = getattr(ti, "map_index", -1)
        if map_index is not None and map_index >= 0:  # a mapped instance: its own earlier tries only
            attempt[META_MAP_INDEX] = str(map_index)
        self._hook = LakeHook(lake_conn_id=self.lake_conn_id)
        result = self._hook.write(
            self.table_path,
            self.input_path,
            self.operation,
            self.options,
            attempt=attempt,
            spark_threshold=self.spark_threshold,
            spark_conn_id=self.spark_conn_id,
            spark_conf=self.spark_conf,
            spark_env=self.spark_env,
        )
        self.log.info("wrote %s: %s (%s)", self.input_path, result["instant"], result["executor"])
        uri = self._hook.resolve_table_path(self.table_path)
        emit_table_event(
            self,
            context,
            (uri,),
            {"table": uri, "instant": result["instant"], "outcome": "COMMITTED"},
            changed=True,  # every write is a completed instant
        )
        summary = {k: result[k] for k in ("instant", "rolled_back", "inserted", "updated", "deleted")}
        return xcom_summary({"outcome": "COMMITTED", **summary})

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()


__all__ = ["LakeWriteOperator"]
