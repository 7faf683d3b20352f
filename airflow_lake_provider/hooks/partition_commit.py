"""Partition commit from Airflow: one function the sensor, the trigger and the operator share.

Importing this module loads no table-core code (no pyarrow, polars or fastavro): the core is
imported when a commit or a check runs, so DAG files that use the sensor parse fast.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_lake_provider.hooks.errors import LakeConfigError, LakeHookError, as_bool

log = logging.getLogger(__name__)

POLICY_KIND_KEY = "sink.partition-commit.policy.kind"
TRIGGER_KEY = "sink.partition-commit.trigger"
DELAY_KEY = "sink.partition-commit.delay"


def as_partitions(value: str | Sequence[str]) -> list[str]:
    """One partition path, or a list of them (a rendered template may give either)."""
    items = [value] if isinstance(value, str) else list(value or [])
    partitions = [str(p).strip() for p in items if str(p).strip()]
    if not partitions:
        raise LakeConfigError("partitions is empty: name at least one partition path")
    return partitions


def commit_options(
    options: Mapping[str, Any] | None,
    policies: str | Sequence[str] | None = None,
    trigger: str | None = None,
    delay: str | None = None,
) -> dict[str, str]:
    """The options of one commit: ``options``, then the explicit arguments over them."""
    merged = {str(k): str(v) for k, v in (options or {}).items() if v is not None}
    if policies:
        merged[POLICY_KIND_KEY] = policies if isinstance(policies, str) else ",".join(policies)
    if trigger:
        merged[TRIGGER_KEY] = str(trigger)
    if delay is not None and str(delay) != "":
        merged[DELAY_KEY] = str(delay)
    return merged


def run_partition_commit(
    table_path: str,
    partitions: Sequence[str],
    options: Mapping[str, str],
    *,
    watermark: Any = None,
    dry_run: bool | str = False,
    force: bool = False,
    require_existing: bool = True,
    custom_policy: Callable[..., Any] | None = None,
    spark_master: str = "local[2]",
    metastore_dir: str | None = None,
    lake_conn_id: str | None = None,
) -> dict[str, Any]:
    """Plan (``dry_run``) or commit partitions of an absolute ``table_path``; returns the JSON summary.

    ``lake_conn_id``: the ``lake`` connection whose storage settings (an ``s3://`` table's
    credentials and endpoint) open the table; without one, the process' own ``AWS_*`` variables.

    With the ``metastore`` policy the commit runs in ``spark_jobs/partition_commit.py`` (Spark SQL with
    Hive support), submitted to ``spark_master``; everything else runs in this process.
    """
    from airflow_lake_provider.lake import spark_submit
    from airflow_lake_provider.lake.errors import LakeError
    from airflow_lake_provider.lake.services.partition_commit.config import PolicyKind
    from airflow_lake_provider.lake.services.partition_commit.executor import commit_config, commit_partitions
    from airflow_lake_provider.lake.table.table import LakeTable

    dry = as_bool(dry_run, "dry_run")
    watermark = None if watermark in (None, "", "None") else watermark
    try:
        if lake_conn_id:
            from airflow_lake_provider.hooks.lake import LakeHook

            table = LakeHook(lake_conn_id=lake_conn_id).open_table(table_path)
        else:
            table = LakeTable.open(table_path)
        config = commit_config(table, options)
        if PolicyKind.METASTORE in config.policies and not dry:
            args = ["--table", table.uri] + [a for p in partitions for a in ("--partition", p)]
            args += [a for k, v in options.items() for a in ("--option", f"{k}={v}")]
            if watermark is not None:
                args += ["--watermark", str(watermark)]
            if metastore_dir:
                args += ["--metastore-dir", metastore_dir]
            if not require_existing:
                args.append("--allow-missing")
            if force:
                raise LakeConfigError("force with the metastore policy is not supported; commit on schedule")
            result = spark_submit.submit("partition_commit.py", args, master=spark_master)
            if result.get("outcome") == "FAILED":
                raise LakeHookError(
                    f"partition commit of {table_path} failed on Spark: {result.get('error')}"
                )
        else:
            result = commit_partitions(
                table,
                partitions,
                options,
                watermark=watermark,
                custom_policy=custom_policy,
                require_existing=require_existing,
                dry_run=dry,
                force=force,
                # the metastore policy only matters when committing, and then it goes to Spark above
                metastore=(lambda _context: None) if dry else None,
            ).to_dict()
    except ValueError as exc:  # bad input: options, partitions, watermark (LakeError subclasses too)
        raise LakeConfigError(f"partition commit of {table_path}: {exc}") from exc
    except LakeError as exc:
        raise LakeHookError(f"partition commit of {table_path} failed: {exc}") from exc
    result["table_path"] = table_path
    return result


def log_result(log: logging.Logger, table_path: str, result: Mapping[str, Any]) -> None:
    """One line of what a commit did, and a warning for data that arrived in committed partitions."""
    log.info(
        "partition commit of %s: %s, committed %s, already committed %s, waiting %s",
        table_path,
        result["outcome"],
        result["committed"],
        result["already_committed"],
        result.get("waiting"),
    )
    if result.get("late_data"):
        log.warning("late data in committed partitions: %s", result["late_data"])


def ready(summary: Mapping[str, Any]) -> bool:
    """True when no asked partition waits for its trigger or its first write."""
    return not summary.get("waiting") and not summary.get("missing")
