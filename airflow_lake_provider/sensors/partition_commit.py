"""``PartitionCommitSensor``: waits until partitions are committable, then commits them once."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowSensorTimeout, AirflowSkipException

from airflow_lake_provider.assets import emit_table_event, with_table_outlet
from airflow_lake_provider.hooks.errors import (
    LakeConfigError,
    LakeHookError,
    as_bool,
    explain_missing_interval,
)
from airflow_lake_provider.hooks.partition_commit import (
    as_partitions,
    commit_options,
    log_result,
    ready,
    run_partition_commit,
)
from airflow_lake_provider.operators.partition_commit import commit_event_extra, committed
from airflow_lake_provider.operators.summary import partition_commit_table
from airflow_lake_provider.operators.xcom import xcom_summary
from airflow_lake_provider.triggers import trigger_poll_interval
from airflow_lake_provider.triggers.partition_commit import PartitionCommitTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


class PartitionCommitSensor(BaseSensorOperator):
    """Waits until every partition in ``partitions`` is committable, applies the commit policies
    once, and returns the summary (``committed``: the partitions it committed) as its XCom value.

    Committable follows Flink's ``sink.partition-commit.trigger``: ``process-time`` (first write +
    delay <= now) or ``partition-time`` (watermark > partition time + delay; the watermark is
    ``watermark`` if given, else the table's recorded event times). For the end of the run's data
    interval pass ``"{{ data_interval_end | default(dag_run.run_after) }}"``: a manual run (no
    logical date) has no ``data_interval_end``, and the time it was triggered stands in.
    Partitions not written yet are waited for. Partitions committed before are not committed again
    (late data in them is reported). ``deferrable=True`` waits in the triggerer. The task log
    shows each partition's status as a table.

    XCom: the return value is the JSON summary, as ``PartitionCommitOperator``'s (with
    ``commit=False``: the plan, outcome ``NO_WORK``, nothing committed).

    Assets: the table's Asset is an outlet when ``table_path`` is a literal absolute path or URI
    (else pass ``outlets``); when it commits a partition, its event's extra is ``{"table",
    "instant": None, "outcome", "partitions"}``; ``NO_WORK`` (all committed before) emits none.

    :param table_path: base path of the table, or a path relative to the lake connection's
        ``base_path``. (templated)
    :param partitions: a partition path or a list of them, e.g.
        ``"year={{ data_interval_start.strftime('%Y') }}/..."``. (templated)
    :param options: ``sink.partition-commit.*`` / ``partition.time-extractor.*`` options over the
        table's own. (templated)
    :param policies: ``success-file``, ``metastore``, ``custom`` (list or comma-separated). (templated)
    :param trigger: ``process-time`` or ``partition-time``. (templated)
    :param delay: commit delay, e.g. ``"1 h"``. (templated)
    :param watermark: the watermark for ``partition-time`` (ISO 8601 or epoch ms). (templated)
    :param custom_policy: a callable (or object with ``commit(context)``) for the ``custom`` policy.
    :param spark_master: Spark master of the job that runs the ``metastore`` policy.
    :param metastore_dir: folder of the embedded Derby metastore for that job (``None``: Spark's).
    :param lake_conn_id: optional ``lake`` connection. (templated)
    :param commit: apply the policies when ready (default); ``False`` only waits and returns the plan
        (a downstream ``PartitionCommitOperator`` then commits).
    :param deferrable: wait in the triggerer instead of a worker slot.
    """

    template_fields: Sequence[str] = (
        "table_path",
        "partitions",
        "options",
        "policies",
        "trigger",
        "delay",
        "watermark",
        "lake_conn_id",
    )
    template_fields_renderers = {"options": "json"}
    ui_color = "#e1d5e7"

    def __init__(
        self,
        *,
        table_path: str,
        partitions: str | Sequence[str],
        options: Mapping[str, Any] | None = None,
        policies: str | Sequence[str] | None = None,
        trigger: str | None = None,
        delay: str | None = None,
        watermark: str | None = None,
        custom_policy: Callable[..., Any] | None = None,
        spark_master: str = "local[2]",
        metastore_dir: str | None = None,
        lake_conn_id: str | None = None,
        commit: bool = True,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        commit = as_bool(commit, "commit")  # "false" from a config file is false, not a truthy string
        if commit:
            kwargs["outlets"] = with_table_outlet(table_path, kwargs.get("outlets"))
        super().__init__(**kwargs)
        self.table_path = table_path
        self.partitions = partitions
        self.options = dict(options or {})
        self.policies = policies
        self.trigger = trigger
        self.delay = delay
        self.watermark = watermark
        self.custom_policy = custom_policy
        self.spark_master = spark_master
        self.metastore_dir = metastore_dir
        self.lake_conn_id = lake_conn_id
        self.commit = commit
        self.deferrable = deferrable

    def _table_path(self) -> str:
        from airflow_lake_provider.hooks.lake import LakeHook  # the table core loads here, not at parse

        return LakeHook(lake_conn_id=self.lake_conn_id).resolve_table_path(self.table_path)

    def _options(self) -> dict[str, str]:
        return commit_options(self.options, self.policies, self.trigger, self.delay)

    def _check(self, table_path: str) -> dict[str, Any]:
        return run_partition_commit(
            table_path,
            as_partitions(self.partitions),
            self._options(),
            watermark=self.watermark,
            dry_run=True,
            require_existing=False,
            lake_conn_id=self.lake_conn_id,
        )

    def _commit(
        self, context: Context, table_path: str, summary: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        if not self.commit:
            return xcom_summary(summary if summary is not None else self._check(table_path))
        result = run_partition_commit(
            table_path,
            as_partitions(self.partitions),
            self._options(),
            watermark=self.watermark,
            require_existing=False,
            custom_policy=self.custom_policy,
            spark_master=self.spark_master,
            metastore_dir=self.metastore_dir,
            lake_conn_id=self.lake_conn_id,
        )
        log_result(self.log, table_path, result)
        if result.get("partitions"):
            self.log.info("partition commit of %s:\n%s", table_path, partition_commit_table(result))
        emit_table_event(
            self, context, (table_path,), commit_event_extra(table_path, result), changed=committed(result)
        )
        return xcom_summary(result)

    def poke(self, context: Context) -> PokeReturnValue:
        table_path = self._table_path()
        summary = self._check(table_path)
        if not ready(summary):
            self.log.info("waiting: %s; not written yet: %s", summary["waiting"], summary["missing"])
            return PokeReturnValue(is_done=False)
        return PokeReturnValue(is_done=True, xcom_value=self._commit(context, table_path, summary))

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        with explain_missing_interval(context, self.task_id):
            super().render_template_fields(context, jinja_env)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        table_path = self._table_path()
        summary = self._check(table_path)
        if ready(summary):  # no need to hand over to the triggerer
            return self._commit(context, table_path, summary)
        self.defer(
            trigger=PartitionCommitTrigger(
                table_path=table_path,
                partitions=as_partitions(self.partitions),
                options=self._options(),
                watermark=None if self.watermark is None else str(self.watermark),
                poll_interval=trigger_poll_interval(self.poke_interval),
                timeout_at=time.time() + self.timeout,
                lake_conn_id=self.lake_conn_id,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout + trigger_poll_interval(self.poke_interval) * 2),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        status = event.get("status")
        if status == "ready":
            return self._commit(context, self._table_path(), event.get("summary"))
        if status == "timeout":
            message = (
                f"partitions {self.partitions} of {self.table_path} not committable within {self.timeout} s"
            )
            if self.soft_fail:
                raise AirflowSkipException(message)
            raise AirflowSensorTimeout(message)
        error = LakeConfigError if event.get("fail_now") else LakeHookError
        raise error(f"waiting for partitions of {self.table_path} failed: {event.get('message')}")
