"""``ScheduleCompactionOperator`` and ``RunCompactionOperator``: the compaction service from a DAG."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_lake_provider.hooks.lake import LakeHook

if TYPE_CHECKING:
    from airflow.sdk import Context

XCOM_COMPACTION_INSTANT = "compaction_instant"


class ScheduleCompactionOperator(BaseOperator):
    """Evaluate the compaction trigger and strategy and write the plan (``<c>.compaction.requested``).

    Nothing due is a success with outcome ``NO_WORK``. The summary (outcome, instant, reason, file
    groups and IO per partition) is the return value; the instant is pushed as ``compaction_instant``.

    :param table_path: base path of the table, or relative to the lake connection. (templated)
    :param options: ``hoodie.compact*``/``hoodie.compaction*`` options over the table's. (templated)
    :param dry_run: compute and report the plan, write nothing. (templated)
    :param lake_conn_id: optional ``lake`` connection. (templated)
    """

    template_fields: Sequence[str] = ("table_path", "options", "dry_run", "lake_conn_id")
    template_fields_renderers = {"options": "json"}
    ui_color = "#fff2cc"

    def __init__(
        self,
        *,
        table_path: str,
        options: Mapping[str, Any] | None = None,
        dry_run: bool | str = False,
        lake_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_path = table_path
        self.options = dict(options or {})
        self.dry_run = dry_run
        self.lake_conn_id = lake_conn_id

    def execute(self, context: Context) -> dict[str, Any]:
        result = LakeHook(lake_conn_id=self.lake_conn_id).schedule_compaction(
            self.table_path, self.options, dry_run=self.dry_run
        )
        plan = result.get("plan") or {}
        self.log.info(
            "compaction scheduling of %s: %s, instant %s, %s file groups, %s MB IO%s",
            result["table_path"],
            result["outcome"],
            result["instant"],
            plan.get("operations", 0),
            plan.get("total_io_mb", 0),
            f" ({result['reason']})" if result.get("reason") else "",
        )
        context["ti"].xcom_push(key=XCOM_COMPACTION_INSTANT, value=result["instant"])
        return result


class RunCompactionOperator(BaseOperator):
    """Execute a compaction plan on Spark (``spark_jobs/compact.py`` through ``SparkSubmitHook``).

    ``instant`` is usually templated from the sensor's XCom; empty means a crashed (inflight)
    compaction first, else the earliest requested plan. Success is read from the timeline. A failed
    run leaves the instant inflight; the task's retry removes the partial output and runs it again.
    Returns metrics: operations, records written, log records merged, bytes written, duration.

    :param table_path: base path of the table, or relative to the lake connection. (templated)
    :param instant: the compaction instant to execute, or empty. (templated)
    :param spark_conn_id: the Spark connection. (templated)
    :param spark_conf: extra ``spark-submit --conf`` values. (templated)
    :param lake_conn_id: optional ``lake`` connection. (templated)
    """

    template_fields: Sequence[str] = ("table_path", "instant", "spark_conn_id", "spark_conf", "lake_conn_id")
    template_fields_renderers = {"spark_conf": "json"}
    ui_color = "#f8cecc"

    def __init__(
        self,
        *,
        table_path: str,
        instant: str | None = None,
        spark_conn_id: str = "spark_default",
        spark_conf: Mapping[str, Any] | None = None,
        lake_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_path = table_path
        self.instant = instant
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.lake_conn_id = lake_conn_id
        self._hook: LakeHook | None = None

    def execute(self, context: Context) -> dict[str, Any]:
        self._hook = LakeHook(lake_conn_id=self.lake_conn_id)
        instant = str(self.instant).strip() if self.instant not in (None, "", "None") else None
        result = self._hook.run_compaction(
            self.table_path, instant, spark_conn_id=self.spark_conn_id, spark_conf=self.spark_conf
        )
        self.log.info(
            "compaction %s of %s: %s, %s file groups, %s records written, %s log records merged, %s bytes",
            result["instant"],
            result["table_path"],
            result["outcome"],
            result.get("operations", 0),
            result.get("records_written", 0),
            result.get("log_records_merged", 0),
            result.get("bytes_written", 0),
        )
        context["ti"].xcom_push(key=XCOM_COMPACTION_INSTANT, value=result["instant"])
        return result

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()
