"""``ScheduleCleanOperator``: plan and run the clean service of a Hudi table from a DAG."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_lake_provider.assets import emit_table_event, with_table_outlet
from airflow_lake_provider.hooks.errors import as_bool
from airflow_lake_provider.hooks.lake import CLEAN_MODES, DEFAULT_SPARK_THRESHOLD, LakeHook
from airflow_lake_provider.operators.summary import archival_line, clean_table
from airflow_lake_provider.operators.xcom import xcom_summary

if TYPE_CHECKING:
    from airflow.sdk import Context

XCOM_CLEAN_INSTANT = "clean_instant"
XCOM_ARCHIVAL = "archival"


def format_plan_table(partitions: Mapping[str, Mapping[str, int]]) -> str:
    """The per-partition plan summary as a text table (``partition | files | bytes``)."""
    return clean_table(partitions)


class ScheduleCleanOperator(BaseOperator):
    """Clean a Hudi table: delete file slices no retained instant needs, as Hudi's cleaner does.

    The plan is computed in the worker. Small plans run there; plans above ``spark_threshold`` files
    are scheduled in the worker and executed on Spark. Nothing to clean is a success (outcome
    ``NO_WORK``). One clean per table runs at a time: a second one fails with
    :class:`~airflow_lake_provider.hooks.lake.LakeServiceBusyError`.

    The task log shows the plan as a table (``partition | files | bytes``).

    XCom: the return value is the JSON summary (``outcome`` ``CLEANED``/``SCHEDULED``/``NO_WORK``/
    ``PLANNED`` (a dry run), ``instant``, ``executor`` ``local``/``spark``/``none``, ``files_planned``,
    ``bytes_planned``, ``partitions`` with files and bytes each, ``deleted_files``, ``failed_files``,
    ``held_back_by``, ``reason``); key ``clean_instant``: the clean's instant (``None`` without one);
    key ``archival``: the archival summary (when ``archive`` ran). Lists and maps of names hold at
    most 10 entries, then ``"... and N more"`` (``operators.xcom``).

    Assets: the table's Asset (``airflow_lake_provider.assets.table_asset``) is an outlet when
    ``table_path`` is a literal absolute path or URI (else pass ``outlets``). A run that cleaned
    (outcome ``CLEANED``) emits an event with the extra ``{"table", "instant", "outcome",
    "deleted_files"}``; ``NO_WORK``, a dry run or a plan only scheduled emit none.

    :param table_path: base path of the table, or a path relative to the lake connection's
        ``base_path``. (templated)
    :param options: cleaner options over the table's own, e.g.
        ``{"hoodie.cleaner.commits.retained": "10"}``. (templated)
    :param mode: ``schedule`` (write the plan only), ``execute`` (finish pending cleans) or
        ``schedule_and_execute``. (templated)
    :param dry_run: report the plan, write and delete nothing. (templated)
    :param spark_threshold: plans with more files than this run on Spark. (templated)
    :param spark_conn_id: Spark connection used for large plans. (templated)
    :param spark_conf: extra ``spark-submit --conf`` values. (templated)
    :param lake_conn_id: optional ``lake`` connection (its ``base_path`` extra). (templated)
    :param archive: after a clean that ran, archive the timeline as Hudi does after cleaning
        (``hoodie.keep.min.commits``/``hoodie.keep.max.commits`` from ``options`` and the table);
        its summary is pushed under the key ``archival``. (templated)
    """

    template_fields: Sequence[str] = (
        "table_path",
        "options",
        "mode",
        "dry_run",
        "spark_threshold",
        "spark_conn_id",
        "spark_conf",
        "lake_conn_id",
        "archive",
    )
    template_fields_renderers = {"options": "json", "spark_conf": "json"}
    ui_color = "#d5e8d4"

    def __init__(
        self,
        *,
        table_path: str,
        options: Mapping[str, Any] | None = None,
        mode: str = "schedule_and_execute",
        dry_run: bool | str = False,
        spark_threshold: int | str = DEFAULT_SPARK_THRESHOLD,
        spark_conn_id: str = "spark_default",
        spark_conf: Mapping[str, Any] | None = None,
        lake_conn_id: str | None = None,
        archive: bool | str = True,
        **kwargs: Any,
    ) -> None:
        kwargs["outlets"] = with_table_outlet(table_path, kwargs.get("outlets"))
        super().__init__(**kwargs)
        if "{{" not in mode and mode not in CLEAN_MODES:
            raise ValueError(f"mode={mode!r} is not one of {', '.join(CLEAN_MODES)}")
        self.table_path = table_path
        self.options = dict(options or {})
        self.mode = mode
        self.dry_run = dry_run
        self.spark_threshold = spark_threshold
        self.spark_conn_id = spark_conn_id
        self.spark_conf = dict(spark_conf or {})
        self.lake_conn_id = lake_conn_id
        self.archive = archive
        self._hook: LakeHook | None = None

    def execute(self, context: Context) -> dict[str, Any]:
        self._hook = LakeHook(lake_conn_id=self.lake_conn_id)
        archive = as_bool(self.archive, "archive") and not as_bool(self.dry_run, "dry_run")
        archive = archive and self.mode != "schedule"
        if archive:  # bad archival settings fail the task before the clean deletes anything
            self._hook.check_archival(self.table_path, self.options)
        result = self._hook.clean(
            self.table_path,
            self.options,
            mode=self.mode,
            dry_run=self.dry_run,
            spark_threshold=self.spark_threshold,
            spark_conn_id=self.spark_conn_id,
            spark_conf=self.spark_conf,
        )
        self.log.info(
            "clean of %s: outcome %s, instant %s, executor %s, %d files planned, %d deleted%s",
            result["table_path"],
            result["outcome"],
            result["instant"],
            result["executor"],
            result["files_planned"],
            result["deleted_files"],
            f" ({result['reason']})" if result.get("reason") else "",
        )
        if result["partitions"]:
            self.log.info("clean plan of %s:\n%s", result["table_path"], clean_table(result["partitions"]))
        context["ti"].xcom_push(key=XCOM_CLEAN_INSTANT, value=result["instant"])
        emit_table_event(
            self,
            context,
            (result["table_path"], self._hook.resolve_table_path(self.table_path)),
            {
                "table": result["table_path"],
                "instant": result["instant"],
                "outcome": result["outcome"],
                "deleted_files": result["deleted_files"],
            },
            changed=result["outcome"] == "CLEANED",
        )
        if archive:
            self._archive(context, result["table_path"])
        return xcom_summary(result)

    def _archive(self, context: Context, table_path: str) -> None:
        """Archive after the clean, as Hudi does."""
        assert self._hook is not None
        archival = self._hook.archive(self.table_path, self.options)
        self.log.info("archival of %s: %s", table_path, archival_line(archival))
        context["ti"].xcom_push(key=XCOM_ARCHIVAL, value=xcom_summary(archival))

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()
