"""Partition commit from Airflow: one function the sensor, the trigger and the operator share.

Importing this module loads no table-core code (no pyarrow, polars or fastavro): the core is
imported when a commit or a check runs, so DAG files that use the sensor parse fast.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from airflow_lake_provider.hooks.errors import (
    LakeConfigError,
    LakeHookError,
    as_bool,
    as_strings,
    check_options,
    core_errors,
    opening_errors,
)
from airflow_lake_provider.hooks.results import dropped_summary
from airflow_lake_provider.lake.config.registry import PC_DELAY, PC_POLICY_KIND, PC_TRIGGER

log = logging.getLogger(__name__)

POLICY_KIND_KEY = PC_POLICY_KIND.key
TRIGGER_KEY = PC_TRIGGER.key
DELAY_KEY = PC_DELAY.key


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
    """The options of one commit: ``options``, and the explicit arguments. An argument and an
    option that set the same thing to different values are refused (which one was meant?)."""
    merged = as_strings(options, "partition commit")
    joined = policies if isinstance(policies, str) else ",".join(policies or ())
    arguments = (
        (PC_POLICY_KIND, "policies", joined),
        (PC_TRIGGER, "trigger", trigger),
        (PC_DELAY, "delay", delay),
    )
    for option, argument, value in arguments:
        if value is None or str(value).strip() == "":
            continue
        with core_errors("partition commit"):
            given = option.find(merged)
            if given is not None and not option.same(given, (option.key, str(value))):
                raise LakeConfigError(
                    f"partition commit: {argument}={value!r} and option {given[0]}={given[1]!r} "
                    "disagree: give one of them"
                )
        for name in option.names:
            merged.pop(name, None)
        merged[option.key] = str(value)
    return merged


def run_partition_commit(
    table_path: str,
    partitions: Sequence[str],
    options: Mapping[str, str],
    *,
    watermark: Any = None,
    dry_run: bool | str = False,
    force: bool | str = False,
    require_existing: bool = True,
    custom_policy: Callable[..., Any] | None = None,
    spark_master: str = "local[2]",
    metastore_dir: str | None = None,
    lake_conn_id: str | None = None,
) -> dict[str, Any]:
    """Plan (``dry_run``) or commit partitions of an absolute ``table_path``; returns the JSON summary.

    ``lake_conn_id``: the ``lake`` connection whose storage settings (an ``s3://`` table's
    credentials and endpoint) open the table; without one, the process' own ``AWS_*`` variables.
    A location without ``.hoodie/`` is a plain parquet directory (``commit_plain_partitions``).

    With the ``metastore`` policy the commit runs in ``spark_jobs/partition_commit.py`` (Spark SQL with
    Hive support), submitted to ``spark_master``; everything else runs in this process.
    """
    from airflow_lake_provider.lake.services.partition_commit.config import (
        PolicyKind,
        check_metastore_location,
    )
    from airflow_lake_provider.lake.services.partition_commit.executor import (
        commit_config,
        commit_partitions,
        commit_plain_partitions,
    )

    dry = as_bool(dry_run, "dry_run")
    force = as_bool(force, "force")
    watermark = None if watermark in (None, "", "None") else watermark
    options = check_options(options, f"partition commit of {table_path}")
    with core_errors(f"partition commit of {table_path}"):
        storage, table, storage_env, options = _open_target(table_path, options, lake_conn_id)
        if table is None:
            # No .hoodie/: a parquet directory written by another engine (no metastore policy there).
            kwargs = {"watermark": watermark, "custom_policy": custom_policy, "dry_run": dry, "force": force}
            plain = commit_plain_partitions(
                storage, partitions, options, require_existing=require_existing, **kwargs
            )
            return {**plain.to_dict(), "table_path": table_path}
        config = commit_config(table, options)
        if PolicyKind.METASTORE in config.policies:
            check_metastore_location(table.uri)  # an s3:// table: refused before Spark starts (dry runs too)
        if PolicyKind.METASTORE in config.policies and not dry:
            if force:
                raise LakeConfigError("force with the metastore policy is not supported; commit on schedule")
            submission = metastore_submission(
                table.uri,
                partitions,
                options,
                watermark=watermark,
                metastore_dir=metastore_dir,
                require_existing=require_existing,
                storage_env=storage_env,
            )
            result = _submit(table_path, *submission, spark_master)
        else:
            committed = commit_partitions(
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
            )
            result = {**committed.to_dict(), **dropped_summary(table)}
    result["table_path"] = table_path
    return result


def _open_target(
    table_path: str, options: Mapping[str, str], lake_conn_id: str | None
) -> tuple[Any, Any, dict[str, str], Mapping[str, str]]:
    """:func:`_open_location`, and the table there (``None``: a plain parquet directory), opened as
    every hook opens one: what a retry cannot change (a refused key, a broken table) fails at once."""
    from airflow_lake_provider.lake.services.partition_commit.plain import is_plain_directory
    from airflow_lake_provider.lake.table.table import LakeTable

    with opening_errors():
        storage, storage_env, options = _open_location(table_path, options, lake_conn_id)
        return storage, None if is_plain_directory(storage) else LakeTable.open(storage), storage_env, options


def _open_location(
    table_path: str, options: Mapping[str, str], lake_conn_id: str | None
) -> tuple[Any, dict[str, str], Mapping[str, str]]:
    """The table's storage, the environment its Spark job needs, and the options: through the
    ``lake`` connection (its storage settings and ``hoodie.metadata.enable`` under the task's own
    options) or, without one, the process' own ``AWS_*`` variables."""
    from airflow_lake_provider.lake.storage import open_storage

    if not lake_conn_id:
        return open_storage(table_path), {}, options
    from airflow_lake_provider.hooks.lake import LakeHook

    hook = LakeHook(lake_conn_id=lake_conn_id)
    # The connection's hoodie.metadata.enable, under the task's own options (Spark job too).
    return (
        hook.open_location(table_path),
        hook.storage_env(),
        {**hook.connection_options(), **(options or {})},
    )


def _submit(table_path: str, args: list[str], env: dict[str, str], spark_master: str) -> dict[str, Any]:
    """Run ``spark_jobs/partition_commit.py``; its JSON summary, or ``LakeHookError`` if it failed."""
    from airflow_lake_provider.lake import spark_submit

    result = spark_submit.submit("partition_commit.py", args, master=spark_master, env=env)
    if result.get("outcome") == "FAILED":
        raise LakeHookError(f"partition commit of {table_path} failed on Spark: {result.get('error')}")
    return result


def metastore_submission(
    table_uri: str,
    partitions: Sequence[str],
    options: Mapping[str, str],
    *,
    watermark: Any = None,
    metastore_dir: str | None = None,
    require_existing: bool = True,
    storage_env: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """Arguments and environment of ``spark_jobs/partition_commit.py`` (the ``metastore`` policy).

    The lake connection's storage settings (``storage_env``) go into ``spark-submit``'s environment,
    as for the other Spark jobs, never onto the command line (``ps`` shows it). The table is local:
    ``run_partition_commit`` refuses the policy on ``s3://`` before this is called.
    """
    args = ["--table", table_uri] + [a for p in partitions for a in ("--partition", p)]
    args += [a for k, v in options.items() for a in ("--option", f"{k}={v}")]
    if watermark is not None:
        args += ["--watermark", str(watermark)]
    if metastore_dir:
        args += ["--metastore-dir", metastore_dir]
    if not require_existing:
        args.append("--allow-missing")
    return args, dict(storage_env or {})


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
