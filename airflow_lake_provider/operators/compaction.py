"""``ScheduleCompactionOperator`` and ``RunCompactionOperator``: the compaction service from a DAG."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_lake_provider.assets import emit_table_event, with_table_outlet
from airflow_lake_provider.hooks.compaction import DEFAULT_COMPACTION_SPARK_THRESHOLD_MB
from airflow_lake_provider.hooks.lake import LakeHook
from airflow_lake_provider.operators.summary import compaction_files_table, compaction_plan_table
from airflow_lake_provider.operators.xcom import compaction_plan_summary, xcom_summary

if TYPE_CHECKING:
    from airflow.sdk import Context

XCOM_COMPACTION_INSTANT = "compaction_instant"


class ScheduleCompactionOperator(BaseOperator):
    """Evaluate the compaction trigger and strategy and write the plan (``<c>.compaction.requested``).

    Nothing due is a success with outcome ``NO_WORK``. Runs in the worker (no Spark). The task log
    shows the plan as a table (``partition | file groups | log files | IO MB``). Writing a plan
    changes no data, so the operator emits no Asset event.

    XCom: the return value is the JSON summary (``outcome`` ``SCHEDULED``/``NO_WORK``/``PLANNED`` (a
    dry run), ``instant``, ``reason``, ``plan``, ``operations``, ``total_io_mb``, ``partitions`` with
    file groups, log files and IO MB each, ``table_path``); key ``compaction_instant``: the plan's
    instant (``None`` when no plan was written: ``NO_WORK`` or a dry run). Bounded
    (``operators.xcom``): ``plan`` holds counts and the file groups as ``partition/file id``
    names, at most 10 then ``"... and N more"``, as ``partitions``; the whole plan stays on the
    timeline.

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
        self.log.info(
            "compaction scheduling of %s: %s, instant %s, %s file groups, %s MB IO%s",
            result["table_path"],
            result["outcome"],
            result["instant"],
            result["operations"],
            result["total_io_mb"],
            f" ({result['reason']})" if result.get("reason") else "",
        )
        if result["partitions"]:
            self.log.info(
                "compaction plan %s of %s:\n%s",
                result["instant"],
                result["table_path"],
                compaction_plan_table(result["partitions"]),
            )
        # A dry run's instant is a plan never written: nothing downstream may wait for or run it.
        written = result["instant"] if result["outcome"] == "SCHEDULED" else None
        context["ti"].xcom_push(key=XCOM_COMPACTION_INSTANT, value=written)
        plan = compaction_plan_summary(result.get("plan"))
        return {**xcom_summary({k: v for k, v in result.items() if k != "plan"}), "plan": plan}


class RunCompactionOperator(BaseOperator):
    """Execute a compaction plan: small plans in the worker, larger ones on Spark.

    Which instant runs: ``instant`` if set (usually templated from the sensor's XCom); else the
    instant the task ``instant_task_id`` returned (a ``CompactionPlanSensor``) or pushed as
    ``compaction_instant`` (a ``ScheduleCompactionOperator``); else a crashed (inflight) compaction
    first, then the earliest requested plan. A plan reading at most ``spark_threshold_mb`` MB is
    merged in the worker (a Spark start costs 10-17 s); a larger one runs ``spark_jobs/compact.py``
    through ``SparkSubmitHook``; the log says which and why. A missing or invalid Spark set-up fails
    at once (``LakeConfigError``, no retry). Success is read from the timeline. A failed run leaves
    the instant inflight; the task's retry removes the partial output and runs it again. The task
    log shows the base files written per partition as a table.

    XCom: the return value is the JSON summary (``outcome`` ``COMPLETED``/``ALREADY_COMPLETED``/
    ``NO_WORK``, ``instant``, ``executor`` ``local``/``spark``, ``total_io_mb``, ``operations``,
    ``records_written``, ``log_records_merged``, ``records_updated``, ``bytes_written``, ``files``,
    ``duration_seconds``, ``table_path``); key ``compaction_instant``: the instant executed.
    ``files`` lists at most 10 names, then ``"... and N more"`` (``operators.xcom``).

    Assets: the table's Asset is an outlet when ``table_path`` is a literal absolute path or URI
    (else pass ``outlets=[table_asset(...)]``). A run that compacted (outcome ``COMPLETED``) emits
    an event with the extra ``{"table", "instant", "outcome", "executor", "operations"}``;
    ``NO_WORK`` and ``ALREADY_COMPLETED`` emit none.

    :param table_path: base path of the table, or relative to the lake connection. (templated)
    :param instant: the compaction instant to execute, or empty. (templated)
    :param instant_task_id: upstream task whose XCom names the instant when ``instant`` is empty.
        (templated)
    :param options: compaction options passed to the job, validated first. (templated)
    :param spark_threshold_mb: the largest plan (MB of base and log files read) merged in the worker;
        default 256. ``0`` sends every plan to Spark. (templated)
    :param spark_conn_id: the Spark connection. (templated)
    :param spark_conf: extra ``spark-submit --conf`` values. (templated)
    :param lake_conn_id: optional ``lake`` connection. (templated)
    """

    template_fields: Sequence[str] = (
        "table_path",
        "instant",
        "instant_task_id",
        "options",
        "spark_threshold_mb",
        "spark_conn_id",
        "spark_conf",
        "lake_conn_id",
    )
    template_fields_renderers = {"options": "json", "spark_conf": "json"}
    ui_color = "#f8cecc"

    def __init__(
        self,
        *,
        table_path: str,
        instant: str | None = None,
        instant_task_id: str | None = None,
        options: Mapping[str, Any] | None = None,
        spark_threshold_mb: float | str = DEFAULT_COMPACTION_SPARK_THRESHOLD_MB,
        spark_conn_id: str = "spark_default",
        spark_conf: Mapping[str, Any] | None = None,
        lake_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs["outlets"] = with_table_outlet(table_path, kwargs.get("outlets"))
        super().__init__(**kwargs)
        self.table_path = table_path
        self.spark_threshold_mb = spark_threshold_mb
        self.instant = instant
        self.instant_task_id = instant_task_id
        self.options = dict(options or {})
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.lake_conn_id = lake_conn_id
        self._hook: LakeHook | None = None

    def execute(self, context: Context) -> dict[str, Any]:
        self._hook = LakeHook(lake_conn_id=self.lake_conn_id)
        instant = _instant_of(self.instant)
        if instant is None and self.instant_task_id:
            instant = self._upstream_instant(context)
        result = self._hook.run_compaction(
            self.table_path,
            instant,
            self.options,
            spark_threshold_mb=self.spark_threshold_mb,
            spark_conn_id=self.spark_conn_id,
            spark_conf=self.spark_conf,
        )
        self.log.info(
            "compaction %sof %s: %s (executor %s), %s file groups, %s records written, "
            "%s log records merged, %s bytes",
            f"{result['instant']} " if result["instant"] else "",
            result["table_path"],
            result["outcome"],
            result.get("executor", "none"),
            result.get("operations", 0),
            result.get("records_written", 0),
            result.get("log_records_merged", 0),
            result.get("bytes_written", 0),
        )
        if result.get("files"):
            self.log.info(
                "compaction %s wrote:\n%s", result["instant"], compaction_files_table(result["files"])
            )
        context["ti"].xcom_push(key=XCOM_COMPACTION_INSTANT, value=result["instant"])
        emit_table_event(
            self,
            context,
            (result["table_path"], self._hook.resolve_table_path(self.table_path)),
            {
                "table": result["table_path"],
                "instant": result["instant"],
                "outcome": result["outcome"],
                "executor": result.get("executor", "none"),
                "operations": result.get("operations", 0),
            },
            changed=result["outcome"] == "COMPLETED",
        )
        return xcom_summary(result)

    def _upstream_instant(self, context: Context) -> str | None:
        """The instant ``instant_task_id`` published: its return value, else its ``compaction_instant``."""
        ti = context["ti"]
        value = ti.xcom_pull(task_ids=self.instant_task_id)
        if isinstance(value, Mapping):  # a ScheduleCompactionOperator's summary
            # A dry run's (PLANNED) instant names a plan that was never written.
            value = value.get("instant") if value.get("outcome") != "PLANNED" else None
        instant = _instant_of(value)
        if instant is None:
            instant = _instant_of(ti.xcom_pull(task_ids=self.instant_task_id, key=XCOM_COMPACTION_INSTANT))
        self.log.info("instant from task %s: %s", self.instant_task_id, instant or "none (next pending)")
        return instant

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()


def _instant_of(value: Any) -> str | None:
    """An instant from a rendered template or an XCom value; empty, ``"None"`` and ``None`` mean none.

    XCom may hand back a 17-digit instant as an ``int`` (JSON numbers), so the value is turned back
    into text.
    """
    if value is None:
        return None
    text = str(value).strip()
    return None if text in ("", "None") else text
