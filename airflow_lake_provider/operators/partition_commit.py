"""``PartitionCommitOperator``: commit given partitions at once (backfills, manual re-runs)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_lake_provider.assets import emit_table_event, with_table_outlet
from airflow_lake_provider.hooks.errors import explain_missing_interval
from airflow_lake_provider.hooks.partition_commit import (
    as_partitions,
    commit_options,
    log_result,
    run_partition_commit,
)
from airflow_lake_provider.operators.summary import partition_commit_table
from airflow_lake_provider.operators.xcom import xcom_summary

if TYPE_CHECKING:
    from airflow.sdk import Context


class PartitionCommitOperator(BaseOperator):
    """Applies the commit policies to ``partitions`` now, whatever the trigger says (``force``).

    A partition committed before is not committed again (re-running the task repeats no policy); a
    partition without a completed write fails the task, naming it, before anything is committed.
    The task log shows each partition's status as a table.

    XCom: the return value is the JSON summary (``outcome`` ``COMMITTED``/``NO_WORK``, ``committed``,
    ``already_committed``, ``waiting``, ``missing``, ``late_data``, ``policies``, ``partitions``
    with decision, partition time and writes each, ``table_path``). Lists and maps of partitions hold
    at most 10 entries, then ``"... and N more"`` (``operators.xcom``).

    Assets: the table's Asset is an outlet when ``table_path`` is a literal absolute path or URI
    (else pass ``outlets``). A run that committed a partition emits an event with the extra
    ``{"table", "instant": None, "outcome", "partitions"}`` (the partitions committed by this run);
    ``NO_WORK`` (all committed before) emits none.

    :param table_path: base path of the table, or relative to the lake connection's ``base_path``.
        (templated)
    :param partitions: a partition path or a list of them. (templated)
    :param options: partition commit options over the table's own. (templated)
    :param policies: ``success-file``, ``metastore``, ``custom`` (list or comma-separated). (templated)
    :param force: commit even if the trigger would still wait (default ``True``: backfills).
    :param custom_policy: a callable (or object with ``commit(context)``) for the ``custom`` policy.
    :param spark_master: Spark master of the job that runs the ``metastore`` policy.
    :param metastore_dir: folder of the embedded Derby metastore for that job.
    :param lake_conn_id: optional ``lake`` connection. (templated)
    """

    template_fields: Sequence[str] = ("table_path", "partitions", "options", "policies", "lake_conn_id")
    template_fields_renderers = {"options": "json"}
    ui_color = "#e1d5e7"

    def __init__(
        self,
        *,
        table_path: str,
        partitions: str | Sequence[str],
        options: Mapping[str, Any] | None = None,
        policies: str | Sequence[str] | None = None,
        force: bool = True,
        custom_policy: Callable[..., Any] | None = None,
        spark_master: str = "local[2]",
        metastore_dir: str | None = None,
        lake_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs["outlets"] = with_table_outlet(table_path, kwargs.get("outlets"))
        super().__init__(**kwargs)
        self.table_path = table_path
        self.partitions = partitions
        self.options = dict(options or {})
        self.policies = policies
        self.force = force
        self.custom_policy = custom_policy
        self.spark_master = spark_master
        self.metastore_dir = metastore_dir
        self.lake_conn_id = lake_conn_id

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        with explain_missing_interval(context, self.task_id):
            super().render_template_fields(context, jinja_env)

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_lake_provider.hooks.lake import LakeHook  # the table core loads here, not at parse

        table_path = LakeHook(lake_conn_id=self.lake_conn_id).resolve_table_path(self.table_path)
        result = run_partition_commit(
            table_path,
            as_partitions(self.partitions),
            commit_options(self.options, self.policies),
            force=self.force,
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


def committed(result: Mapping[str, Any]) -> bool:
    """Whether a partition commit changed the table: it committed at least one partition."""
    return bool(result.get("committed"))


def commit_event_extra(table_path: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """The extra of a partition commit's Asset event (no instant: a commit marks partitions)."""
    return {
        "table": table_path,
        "instant": None,
        "outcome": result["outcome"],
        "partitions": list(result.get("committed") or ()),
    }
