"""``CompactionPlanSensor``: waits for a compaction plan (ours or an external writer's) on a table."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, PokeReturnValue, conf
from airflow.sdk.exceptions import AirflowSensorTimeout, AirflowSkipException

from airflow_lake_provider.hooks.errors import LakeConfigError, LakeHookError
from airflow_lake_provider.hooks.lake import LakeHook
from airflow_lake_provider.triggers import trigger_poll_interval
from airflow_lake_provider.triggers.compaction import CompactionPlanTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

# ScheduleCompactionOperator outcomes that wrote no plan (DRY_RUN: what a dry run returned before).
NOTHING_SCHEDULED = ("NO_WORK", "PLANNED", "DRY_RUN")


class CompactionPlanSensor(BaseSensorOperator):
    """Succeeds when a requested compaction plan exists on the table; its instant is the XCom value.

    Plans written by this provider's ``ScheduleCompactionOperator`` and by external writers (Spark or
    Flink Hudi jobs scheduling inline) count alike. ``deferrable=True`` frees the worker slot and
    polls from the triggerer. ``timeout`` and ``soft_fail`` behave as for any sensor (in deferrable
    mode too: a soft-failing sensor is skipped when the time is up). Waiting for a plan changes no
    data, so the sensor emits no Asset event.

    With ``schedule_task_id`` naming the upstream ``ScheduleCompactionOperator``, the sensor skips at
    once (``AirflowSkipException``) when that task wrote no plan (outcome ``NO_WORK``, or ``PLANNED``
    for a dry run) and none is requested on the table: an hourly chain then ends in seconds when
    nothing is due, instead of waiting ``timeout`` (7 days by default) for another writer's plan.
    Tasks after it that must still run (a clean) need ``trigger_rule="none_failed"``. Without
    ``schedule_task_id`` it waits for any writer's plan, as before.

    XCom: the return value is the requested plan's instant (a string), e.g. for
    ``RunCompactionOperator(instant_task_id=...)``.

    :param table_path: base path of the table, or a path relative to the lake connection's
        ``base_path``. (templated)
    :param lake_conn_id: optional ``lake`` connection. (templated)
    :param schedule_task_id: the upstream ``ScheduleCompactionOperator``'s task id: skip at once when
        it wrote no plan and none is requested. (templated)
    :param deferrable: wait in the triggerer instead of a worker slot (default: Airflow's
        ``[operators] default_deferrable``).
    """

    template_fields: Sequence[str] = ("table_path", "lake_conn_id", "schedule_task_id")
    ui_color = "#dae8fc"

    def __init__(
        self,
        *,
        table_path: str,
        lake_conn_id: str | None = None,
        schedule_task_id: str | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.table_path = table_path
        self.lake_conn_id = lake_conn_id
        self.schedule_task_id = schedule_task_id
        self.deferrable = deferrable

    def _hook(self) -> LakeHook:
        return LakeHook(lake_conn_id=self.lake_conn_id)

    def poke(self, context: Context) -> PokeReturnValue:
        instant = self._hook().find_requested_compaction(self.table_path)
        if instant is not None:
            self.log.info("compaction plan %s is requested on %s", instant, self.table_path)
        return PokeReturnValue(is_done=instant is not None, xcom_value=instant)

    def _skip_if_nothing_scheduled(self, context: Context, hook: LakeHook) -> str | None:
        """The requested plan's instant; raises ``AirflowSkipException`` when there is none and the
        ``schedule_task_id`` task wrote none either (nothing is coming: waiting would only time out)."""
        instant = hook.find_requested_compaction(self.table_path)
        if instant is not None or not self.schedule_task_id:
            return instant
        summary = context["ti"].xcom_pull(task_ids=self.schedule_task_id)
        outcome = summary.get("outcome") if isinstance(summary, Mapping) else None
        if outcome in NOTHING_SCHEDULED:
            raise AirflowSkipException(
                f"no compaction plan on {self.table_path}: {self.schedule_task_id} wrote none "
                f"(outcome {outcome}"
                + (f": {summary['reason']}" if summary.get("reason") else "")
                + ") and none is requested"
            )
        return None

    def execute(self, context: Context) -> Any:
        hook = self._hook()
        instant = self._skip_if_nothing_scheduled(context, hook)
        if instant is not None:  # no need to poke or hand over to the triggerer
            self.log.info("compaction plan %s is requested on %s", instant, self.table_path)
            return instant
        if not self.deferrable:
            return super().execute(context)
        self.defer(
            trigger=CompactionPlanTrigger(
                table_path=hook.resolve_table_path(self.table_path),
                poll_interval=trigger_poll_interval(self.poke_interval),
                timeout_at=time.time() + self.timeout,
                lake_conn_id=self.lake_conn_id,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout + trigger_poll_interval(self.poke_interval) * 2),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> str:
        status = event.get("status")
        if status == "success":
            self.log.info("compaction plan %s is requested on %s", event["instant"], self.table_path)
            return str(event["instant"])
        if status == "timeout":
            message = f"no compaction plan on {self.table_path} within {self.timeout} s"
            if self.soft_fail:
                raise AirflowSkipException(message)
            raise AirflowSensorTimeout(message)
        error = LakeConfigError if event.get("fail_now") else LakeHookError
        raise error(f"waiting for a compaction plan on {self.table_path} failed: {event.get('message')}")
