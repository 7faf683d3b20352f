"""Rollback and restore as table services (the CLI, Spark jobs and Airflow call these).

The rollback mechanics live in ``lake/table/rollback/`` (planner, plan, executor, policy): the writer
itself rolls back, and the table layer may not import services. Restore (``restore.py``) builds on it.
"""

from airflow_lake_provider.lake.table.rollback.executor import RollbackResult, describe_rollbacks, rollback

__all__ = ["RollbackResult", "describe_rollbacks", "rollback"]
