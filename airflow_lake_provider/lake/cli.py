"""The ``lake`` command line: a stable contract that users and other services script against."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from airflow_lake_provider.lake.cli_arrow import load_arrow
from airflow_lake_provider.lake.cli_parser import _parser
from airflow_lake_provider.lake.config import BY_NAME, check_options
from airflow_lake_provider.lake.config.registry import PC_POLICY_KIND
from airflow_lake_provider.lake.errors import (
    ArchivalConfigError,
    CleanConfigError,
    CompactionConfigError,
    CompactionError,
    ConfigError,
    LakeError,
)
from airflow_lake_provider.lake.storage import Storage, open_storage, resolved_uri

if TYPE_CHECKING:
    from airflow_lake_provider.lake.table.table import LakeTable
    from airflow_lake_provider.lake.timeline.active import Timeline
    from airflow_lake_provider.lake.timeline.instant import Instant

# Each command imports what it uses when it runs: `lake read` no service, `lake timeline` no writer.
log = logging.getLogger("airflow_lake_provider.lake.cli")  # also when run as __main__ (python -m)


def _cmd_rollback(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake.services.rollback import describe_rollbacks, rollback
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(args.path)
    if args.force and not args.instant:
        raise LakeError("--force needs --instant: name the completed commit to roll back")
    results = rollback(table, args.instant, force=args.force, options=_key_values(args.option, ConfigError))
    if not results:
        print("NO_WORK")
        return
    for line in describe_rollbacks(table, results):
        print(line)


def _cmd_restore(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake.services.restore import restore
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(args.path)
    result = restore(table, args.savepoint, _key_values(args.option, ConfigError))
    if not result.rolled_back:
        print(f"NO_WORK: nothing after savepoint {args.savepoint}")
        return
    print(
        f"restored savepoint {args.savepoint} at {result.instant}: rolled back "
        + ", ".join(result.rolled_back)
    )


def _cmd_init(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.create(
        args.path,
        name=args.name,
        table_type=args.table_type,
        record_key_fields=args.record_key,
        precombine_field=args.precombine,
        partition_fields=args.partition_fields,
        hive_style=args.hive_style,
        table_version=args.table_version,
    )
    print(f"created {table.config.table_type.value} table {table.config.name} at {table.uri}")


def _cmd_write(args: argparse.Namespace) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_lake_provider.lake.table.table import LakeTable
    from airflow_lake_provider.lake.table.write import write

    table = LakeTable.open(args.path)
    options = _key_values(args.option, ConfigError)
    folder, name = _split(args.input)
    try:
        with folder.open_input(name) as source:
            batch = pq.read_table(source)
    except FileNotFoundError:
        raise LakeError(f"input file {args.input} does not exist") from None
    except (pa.ArrowException, OSError) as exc:
        raise LakeError(f"input file {args.input} is not a readable parquet file: {exc}") from None
    log.info("read %d rows from %s", batch.num_rows, args.input)
    result = write(table, batch, args.operation, options=options)
    print(result.instant)


def _cmd_read(args: argparse.Namespace) -> None:
    load_arrow()  # first: before anything loads pyarrow
    from airflow_lake_provider.lake.table.export import export_parquet
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(args.path)
    folder, name = _split(args.output)
    _check_outside(table.storage, folder, name)
    rows = export_parquet(table, folder, name, as_of=args.as_of)  # atomic: no half-written output file
    print(f"{rows} rows -> {folder.uri(name)}")


def _check_outside(base: Storage, folder: Storage, name: str) -> None:
    """Refuse an output file at or under the table's base path: it would replace a table file
    (``.hoodie/hoodie.properties``) or drop a foreign parquet file into a partition."""
    table_root, output = resolved_uri(base).rstrip("/"), resolved_uri(folder, name)
    if output == table_root or output.startswith(table_root + "/"):
        raise LakeError(f"output {output} is inside the table {table_root}: write it outside the table")


def _split(location: str) -> tuple[Storage, str]:
    """The storage of a user file's folder, and the file's name in it."""
    folder, _, name = location.rpartition("/")
    scheme, sep, rest = location.partition("://")
    if not name or name in (".", "..") or (sep and "/" not in rest.strip("/")) or "\x00" in location:
        raise LakeError(f"{location!r} does not name a file")
    storage = open_storage(folder or ("/" if location.startswith("/") else "."))
    if storage.exists(name) and name not in storage.list_names():
        raise LakeError(f"{location} is a folder, not a file")
    return storage, name


def _cmd_timeline(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(args.path)
    timeline = table.timeline()
    archived = _archived_instants(table, timeline) if args.archived else []
    if archived and args.verbose:  # their commit metadata, from the history
        timeline = timeline.with_history(archived[-1].timestamp)
    shown = archived + list(timeline.instants[len(timeline.archived) :])
    rows: list[dict[str, object]] = [
        {"time": i.timestamp, "action": i.action.value, "state": i.state.name} for i in shown
    ]
    if timeline.layout.has_completion_times:  # table versions 8 and 9: when each instant completed
        for row, instant in zip(rows, shown, strict=True):
            row["completion_time"] = instant.completion_time
    if args.archived:
        for n, row in enumerate(rows):
            row["archived"] = n < len(archived)
    if args.verbose:
        from airflow_lake_provider.lake.services.inspect import instant_stats, stats_line
    stats = [instant_stats(timeline, i) for i in shown] if args.verbose else []
    if args.json:
        merged = [{**row, **more} for row, more in zip(rows, stats, strict=True)] if stats else rows
        print(json.dumps(merged, indent=2))
        return
    for n, row in enumerate(rows):
        time = row["time"]
        if "completion_time" in row:
            time = f"{time}  {row['completion_time'] or '-':<17}"
        state = "ARCHIVED" if row.get("archived") else row["state"]
        if stats:
            print(f"{time}  {row['action']:<14} {state:<9} {stats_line(stats[n])}")
        else:
            print(f"{time}  {row['action']:<14} {state}")


def _archived_instants(table: LakeTable, timeline: Timeline) -> list[Instant]:
    """The instants of the table's LSM history (table versions 8 and 9), oldest first."""
    if timeline.history is None:
        raise LakeError(
            f"{table.uri}: --archived lists the LSM history of table versions 8 and 9; this table is "
            f"version {table.config.table_version}, whose archived timeline (.hoodie/archived/) is not listed"
        )
    return timeline.history.instants()


def _cmd_show(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake.services.inspect import details_text, instant_details
    from airflow_lake_provider.lake.table.table import LakeTable

    details = instant_details(LakeTable.open(args.path), args.instant)
    if args.json:
        print(json.dumps(details, indent=2))
        return
    print("\n".join(details_text(details)))


def _clean_options(args: argparse.Namespace, properties: Mapping[str, str]) -> dict[str, str]:
    from airflow_lake_provider.lake.services.clean.config import POLICY_KEYS, CleanConfig

    options = _key_values(args.option, CleanConfigError)
    if args.policy:
        _set_flag(options, POLICY_KEYS[0], args.policy, "--policy", CleanConfigError)
    if args.retained is not None:  # the count of the policy in effect, hoodie.properties' included
        retention = CleanConfig.from_options(properties, options).retention_option(args.retained)
        for key, value in retention.items():
            _set_flag(options, key, value, "--retained", CleanConfigError)
    return options


def _set_flag(options: dict[str, str], key: str, value: str, flag: str, error: type[ConfigError]) -> None:
    """Set ``key`` from its own flag; refused when an ``--option`` gave it another value (as an
    ``--option`` given twice is): which one was meant? Values are compared as the option reads them
    (``--retained 3`` agrees with ``--option ...retained=03``)."""
    option = BY_NAME[key]
    for name, given in list(options.items()):  # the key itself or another name of the same option
        if BY_NAME.get(name) is option and not option.same((name, given), (key, str(value))):
            raise error(f"{flag} {value} and --option {name}={given} disagree: give one of them")
    options[key] = str(value)


def _cmd_clean(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake import spark_submit
    from airflow_lake_provider.lake.services.clean.executor import run_clean
    from airflow_lake_provider.lake.table.metadata.policy import guard_mutation
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(args.path)
    options = _clean_options(args, table.config.properties)
    if args.spark and args.list_files:
        raise LakeError("--list-files is not supported with --spark: list the plan with --dry-run first")
    if args.spark:
        # Before Spark starts; under maintain the job's driver writes the MDT deltacommit.
        guard_mutation(table, "clean", options, dry_run=args.dry_run, maintains=True, moves_keys=False)
        job_args = ["--table", table.uri] + [a for k, v in options.items() for a in ("--option", f"{k}={v}")]
        result = spark_submit.submit(
            "clean.py", job_args + (["--dry-run"] if args.dry_run else []), master=args.master
        )
        if result.get("outcome") == "FAILED":
            raise LakeError(str(result.get("error")))
    else:
        cleaned = run_clean(table, options, dry_run=args.dry_run)
        result = cleaned.to_dict()
        if args.list_files:
            files = cleaned.plan.files_per_partition if cleaned.plan else {}
            result["files"] = {part: sorted(paths) for part, paths in sorted(files.items())}
    print(json.dumps({**result, **_dropped(table)}, indent=2))


def _dropped(table: LakeTable) -> dict[str, object]:
    """``{"metadata_table_dropped": ...}`` for a JSON result when the action dropped Hudi's MDT."""
    drop = table.metadata_table_drop
    return {"metadata_table_dropped": drop.to_dict()} if drop is not None else {}


def _key_values(pairs: Sequence[str], error: type[ConfigError]) -> dict[str, str]:
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise error(f"--option {pair!r} is not K=V")
        key, value = key.strip(), value.strip()
        if options.get(key, value) != value:  # which one was meant? (argparse would keep the last)
            raise error(f"--option {key} is given twice, as {options[key]!r} and {value!r}: give it once")
        options[key] = value
    check_options(options)
    return options


def _cmd_archive(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake.table.archival.executor import run_archival
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(args.path)
    result = run_archival(table, _key_values(args.option, ArchivalConfigError))
    print(json.dumps({**result.to_dict(), **_dropped(table)}, indent=2))


def _compaction_options(args: argparse.Namespace) -> dict[str, str]:
    from airflow_lake_provider.lake.services.compaction.config import STRATEGY_KEY

    options = _key_values(args.option, CompactionConfigError)
    if args.strategy:  # "" is the default strategy, as an empty hoodie.compaction.strategy is
        _set_flag(options, STRATEGY_KEY, args.strategy, "--strategy", CompactionConfigError)
    return options


def _cmd_compact(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake import spark_submit
    from airflow_lake_provider.lake.services.compaction import executor, scheduler
    from airflow_lake_provider.lake.services.compaction.result import Outcome
    from airflow_lake_provider.lake.table.metadata.policy import guard_mutation
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(args.path)
    options = _compaction_options(args)
    summary: dict[str, object] = {"mode": args.mode}

    def execute(instant: str | None) -> None:
        if args.spark and not args.dry_run:
            # Before Spark starts; under maintain the job's driver writes the MDT deltacommit at commit.
            guard_mutation(table, "compaction execute", options, maintains=True, moves_keys=False)
            job_args = ["--table", table.uri] + (["--instant", instant] if instant else [])
            job_args += [a for k, v in options.items() for a in ("--option", f"{k}={v}")]
            result = spark_submit.submit("compact.py", job_args, master=args.master)
            if result.get("outcome") == "FAILED":
                raise CompactionError(str(result.get("error")))
            summary.update(outcome=result["outcome"], execute=result)
            return
        executed = executor.execute_compaction(table, instant, dry_run=args.dry_run, options=options)
        summary.update(outcome=executed.outcome.value, execute=executed.to_json())

    if args.mode == "execute":
        execute(args.instant)
    else:
        scheduled = scheduler.schedule_compaction(
            table, options, dry_run=args.dry_run, instant=args.instant, force=args.force
        )
        summary.update(outcome=scheduled.outcome.value, schedule=scheduled.to_json())
        planned, run = scheduled.outcome is Outcome.SCHEDULED, args.mode == "run" and not args.dry_run
        if run and (planned or executor.run_finishes_crashed(table, args.instant)):
            execute(scheduled.instant if planned else None)  # None: a crashed run's inflight compaction
    print(json.dumps({**summary, **_dropped(table)}, indent=2))


def _partition_commit_options(args: argparse.Namespace) -> dict[str, str]:
    from airflow_lake_provider.lake.services.partition_commit.config import (
        DELAY_KEY,
        POLICY_KIND_KEY,
        TRIGGER_KEY,
        parse_duration,
        parse_policies,
    )

    options = _key_values(args.option, ConfigError)
    if args.policy is not None:
        parse_policies(args.policy)  # unknown names fail here, before Spark or the table is touched
        _set_flag(options, POLICY_KIND_KEY, args.policy, "--policy", ConfigError)
    if args.trigger:
        _set_flag(options, TRIGGER_KEY, args.trigger, "--trigger", ConfigError)
    if args.delay is not None:
        parse_duration(args.delay)
        _set_flag(options, DELAY_KEY, args.delay, "--delay", ConfigError)
    return options


def _cmd_partition_commit(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake import spark_submit
    from airflow_lake_provider.lake.services.partition_commit.config import (
        PolicyKind,
        check_metastore_location,
        parse_policies,
    )
    from airflow_lake_provider.lake.services.partition_commit.executor import (
        commit_partitions,
        commit_plain_partitions,
        parse_watermark,
    )
    from airflow_lake_provider.lake.services.partition_commit.plain import is_plain_directory
    from airflow_lake_provider.lake.table.table import LakeTable

    options = _partition_commit_options(args)
    if args.watermark is not None:
        parse_watermark(args.watermark)
    storage = open_storage(args.path)
    if is_plain_directory(storage):
        # No .hoodie/: a parquet directory written by another engine (plain-directory protocol).
        plain = commit_plain_partitions(storage, args.partition, options, watermark=args.watermark)
        print(json.dumps(plain.to_dict(), indent=2))
        return
    table = LakeTable.open(storage)
    policies = parse_policies(PC_POLICY_KIND.read(table.config.properties, options))
    if PolicyKind.METASTORE in policies:
        check_metastore_location(table.uri)  # an s3:// table is refused before Spark starts
        # The metastore is reached through Spark SQL: the whole commit runs in the Spark job's driver.
        job_args = ["--table", table.uri] + [a for p in args.partition for a in ("--partition", p)]
        job_args += [a for k, v in options.items() for a in ("--option", f"{k}={v}")]
        if args.watermark is not None:
            job_args += ["--watermark", args.watermark]
        if args.metastore_dir:
            job_args += ["--metastore-dir", args.metastore_dir]
        result = spark_submit.submit("partition_commit.py", job_args, master=args.master)
        if result.get("outcome") == "FAILED":
            raise LakeError(str(result.get("error")))
    else:
        result = commit_partitions(table, args.partition, options, watermark=args.watermark).to_dict()
        result.update(_dropped(table))
    print(json.dumps(result, indent=2))


def _cmd_savepoint(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake.services.savepoint import create_savepoint, delete_savepoint
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(args.path)
    if args.action == "create":
        point = create_savepoint(table, args.instant)
        print(f"savepoint {point.instant}: {len(point.files)} files kept")
        for pending in point.overrides:
            print(f"pending clean {pending} will keep this savepoint's files")
    else:
        delete_savepoint(table, args.instant)
        print(f"savepoint {args.instant} deleted")


def _cmd_metadata_table(args: argparse.Namespace) -> int:
    from airflow_lake_provider.lake.table.metadata.policy import drop_metadata_table
    from airflow_lake_provider.lake.table.metadata.policy import report as metadata_report
    from airflow_lake_provider.lake.table.table import LakeTable

    if args.force and not args.drop:
        raise LakeError("--force needs --drop")
    if args.check:
        if args.drop:
            raise LakeError("--check and --drop cannot be combined")
        return _check_metadata_table(args.path)
    table = LakeTable.open(args.path)
    if args.drop:
        dropped = drop_metadata_table(table, force=args.force)
        print(dropped.notice if dropped else f"{table.uri} has no metadata table; nothing to drop")
        return 0
    found = metadata_report(table)
    state = found.state
    if not state.present:
        print(f"{table.uri}: no metadata table")
        return 0
    print(f"partitions: {', '.join(state.partitions) or '-'}")
    print(f"inflight partitions: {', '.join(state.inflight_partitions) or '-'}")
    print(f"folder {table.uri}/.hoodie/metadata: {'present' if state.folder_exists else 'absent'}")
    print(f"metadata instants: {len(found.instants)}")
    for name in found.instants:
        print(f"  {name}")
    print(f"latest metadata instant: {found.latest_instant or '-'}")
    print(f"latest data instant: {found.latest_data_instant or '-'}")
    return 0


def _check_metadata_table(path: str) -> int:
    """``--check``: the files partition against a full listing, the stats partitions against a
    recomputation, as JSON; 1 when they differ. Read-only (reads v6 and v8/v9 tables)."""
    from airflow_lake_provider.lake.storage import open_storage
    from airflow_lake_provider.lake.table.metadata.check import check_report

    report = check_report(open_storage(path))
    print(json.dumps(report, indent=2))
    return 0 if report["consistent"] else 1


_COMMANDS = {
    "init": _cmd_init,
    "write": _cmd_write,
    "read": _cmd_read,
    "timeline": _cmd_timeline,
    "show": _cmd_show,
    "clean": _cmd_clean,
    "savepoint": _cmd_savepoint,
    "archive": _cmd_archive,
    "compact": _cmd_compact,
    "partition-commit": _cmd_partition_commit,
    "rollback": _cmd_rollback,
    "restore": _cmd_restore,
    "metadata-table": _cmd_metadata_table,
}


def _reported() -> tuple[type[BaseException], ...]:
    """The errors the CLI reports in one line: ours, the OS's, and Arrow's if a command loaded it."""
    arrow = sys.modules.get("pyarrow")
    return (LakeError, OSError, arrow.ArrowException) if arrow is not None else (LakeError, OSError)


def _closed_pipe() -> int:
    """The reader went away (`lake timeline T | head -1`): stop quietly with SIGPIPE's status, as
    Unix tools do. No stdout left: Python's exit-time flush then reports no second error."""
    sys.stdout = None  # type: ignore[assignment]
    return 141


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except BrokenPipeError:  # --version
        return _closed_pipe()
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        code = _COMMANDS[args.command](args)
        sys.stdout.flush()  # here, not at exit: a closed pipe is then caught below
    except BrokenPipeError:
        return _closed_pipe()
    except Exception as exc:
        if not isinstance(exc, _reported()):
            raise
        message = " ".join(str(exc).split())
        print(f"lake: error: {message}", file=sys.stderr)
        return 1
    return code if isinstance(code, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
