"""Failed writes from a DAG: ``RollbackFailedWritesOperator``.

``LakeWriteOperator`` lives in :mod:`airflow_lake_provider.operators.write`; importing it from here
keeps working (DAGs written before it moved).

Module import stays light (no pyarrow, polars or table core): the core is imported in ``execute``,
so DAG parsing does not pay for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from airflow_lake_provider.assets import emit_table_event, with_table_outlet
from airflow_lake_provider.hooks.write import earlier_attempts
from airflow_lake_provider.operators.summary import rollback_table
from airflow_lake_provider.operators.write import LakeWriteOperator
from airflow_lake_provider.operators.xcom import xcom_summary

if TYPE_CHECKING:
    from airflow.sdk import Context


def _open(table_path: str, lake_conn_id: str | None) -> Any:
    from airflow_lake_provider.hooks.lake import LakeHook

    return LakeHook(lake_conn_id=lake_conn_id).open_table(table_path)


class RollbackFailedWritesOperator(BaseOperator):
    """Roll back failed writes of a Hudi table (``lake rollback``): every one the table's
    failed-writes policy allows, or ``instant``. Nothing to roll back is a success (``NO_WORK``).

    The task log shows one table row per rollback (its instant, the instant rolled back, files
    deleted).

    XCom: the return value is ``{"outcome": "ROLLED_BACK" | "NO_WORK", "instant" (the last
    rollback's, or ``None``), "rollbacks": [{"instant", "rolled_back", "action", "deleted",
    "marked", "resumed"}, ...]}``, bounded (``operators.xcom``): at most 10 rollbacks and 3 file
    names per list, then ``"... and N more"``.

    Assets: the table's Asset is an outlet when ``table_path`` is a literal absolute path or URI
    (else pass ``outlets``). A run that rolled back emits an event with the extra ``{"table",
    "instant" (the last rollback), "outcome", "rolled_back"}``; ``NO_WORK`` emits none.

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
        from airflow_lake_provider.hooks.errors import as_bool, check_options, core_errors
        from airflow_lake_provider.lake.services.rollback import rollback

        table = _open(self.table_path, self.lake_conn_id)
        what = f"rollback of failed writes in {table.uri}"
        options = check_options(self.options, what)
        with core_errors(what):
            force = as_bool(self.force, "force")  # a string "false" is not a request to force
            results = rollback(table, self.instant or None, force=force, options=options)
        rollbacks = [r.to_dict() for r in results]
        if rollbacks:
            self.log.info("rolled back in %s:\n%s", table.uri, rollback_table(rollbacks))
        else:
            self.log.info("no failed writes to roll back in %s", table.uri)
        outcome = "ROLLED_BACK" if results else "NO_WORK"
        emit_table_event(
            self,
            context,
            (table.uri,),
            {
                "table": table.uri,
                "instant": results[-1].instant if results else None,
                "outcome": outcome,
                "rolled_back": [r.target for r in results],
            },
            changed=bool(results),
        )
        # "instant": the last rollback's, as in the Asset event (every operator's XCom has both keys).
        last = results[-1].instant if results else None
        return xcom_summary({"outcome": outcome, "instant": last, "rollbacks": rollbacks})


__all__ = ["LakeWriteOperator", "RollbackFailedWritesOperator", "earlier_attempts"]
