"""The ``lake`` command line: a stable contract that users and other services script against."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from airflow_lake_provider.lake.config import check_options
from airflow_lake_provider.lake.config.registry import PC_POLICY_KIND
from airflow_lake_provider.lake.errors import (
    ArchivalConfigError,
    CleanConfigError,
    CompactionConfigError,
    CompactionError,
    LakeError,
    WriteInputError,
)
from airflow_lake_provider.lake.services.clean.config import POLICY_KEYS, CleanConfig, CleanPolicy
from airflow_lake_provider.lake.services.compaction.config import STRATEGY_KEY
from airflow_lake_provider.lake.services.partition_commit.config import (
    DELAY_KEY,
    POLICY_KIND_KEY,
    TRIGGER_KEY,
    PolicyKind,
    Trigger,
    check_metastore_location,
    parse_duration,
    parse_policies,
)
from airflow_lake_provider.lake.storage import Storage, open_storage, resolved_uri

if TYPE_CHECKING:
    from airflow_lake_provider.lake.table.table import LakeTable

# Each command imports what it uses when it runs (pyarrow, the table core, a service): `lake
# timeline` need not load the writer, `lake read` not the services (benchmarks/read_slice.py).
OPERATIONS = ("insert", "upsert", "delete")  # writer.Operation's values (the writer loads pyarrow)

log = logging.getLogger("airflow_lake_provider.lake.cli")  # also when run as __main__ (python -m)


def _fields(value: str) -> tuple[str, ...]:
    fields = tuple(f.strip() for f in value.split(",") if f.strip())
    if not fields:
        raise argparse.ArgumentTypeError("expected one or more comma-separated field names")
    return fields


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("airflow-lake-provider")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """``--version``: the version is looked up only when asked (importlib.metadata costs ~20 ms)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="print the version")

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(f"{parser.prog} {_version()}")
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lake", description="Apache Hudi (table version 6) tables from Python."
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    parser.add_argument("--version", action=_VersionAction)
    # -v after the subcommand too; SUPPRESS keeps a -v given before it when the subcommand has none.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="log progress to stderr"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, parents=[common])

    _add_table_commands(add)
    _add_service_commands(add)
    _add_recovery_commands(add)
    return parser


def _add_table_commands(add: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """init, write, read, timeline, show."""
    p = add("init", "create an empty table")
    p.add_argument("path")
    p.add_argument("--table-type", required=True, choices=["cow", "mor"])
    p.add_argument("--name", required=True)
    p.add_argument("--record-key", required=True, type=_fields, help="F[,F]")
    p.add_argument("--precombine", required=True, help="ordering field: the larger value wins")
    p.add_argument("--partition-fields", type=_fields, default=(), help="F[,F]")
    p.add_argument("--hive-style", action="store_true", help="partition folders named field=value")

    p = add("write", "commit a parquet file of records as one instant")
    p.add_argument("path")
    p.add_argument("--input", required=True, help="FILE.parquet")
    p.add_argument("--operation", required=True, choices=list(OPERATIONS))
    p.add_argument("--option", action="append", default=[], metavar="K=V", help="any write option")

    p = add("read", "write the snapshot (with meta columns) to a parquet file")
    p.add_argument("path")
    p.add_argument("--output", required=True, help="FILE.parquet")
    p.add_argument("--as-of", help="instant time: read the table as it was then")

    p = add("timeline", "list instants (time, action, state)")
    p.add_argument("path")
    p.add_argument("--json", action="store_true")

    p = add("show", "print an instant's plan or commit metadata")
    p.add_argument("path")
    p.add_argument("instant", help="instant time (see lake timeline)")
    p.add_argument("--json", action="store_true")


def _add_service_commands(add: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """clean, compact, archive, partition-commit."""
    p = add("clean", "delete file versions no retained snapshot or savepoint needs")
    p.add_argument("path")
    p.add_argument("--policy", choices=[c.value for c in CleanPolicy])
    p.add_argument("--retained", type=int, help="commits, file versions or hours to retain (per policy)")
    p.add_argument("--option", action="append", default=[], metavar="K=V", help="any hoodie.clean* option")
    p.add_argument("--dry-run", action="store_true", help="print the plan; write and delete nothing")
    p.add_argument(
        "--list-files", action="store_true", help='add the planned files\' names ("files": per partition)'
    )
    p.add_argument("--spark", action="store_true", help="list and delete on Spark (spark_jobs/clean.py)")
    p.add_argument("--master", default="local[2]", help="Spark master for --spark")

    p = add("compact", "schedule and/or execute a compaction of a merge-on-read table")
    p.add_argument("path")
    p.add_argument(
        "--mode",
        required=True,
        choices=["schedule", "execute", "run"],
        help="schedule a plan, execute a pending plan, or both (run)",
    )
    p.add_argument("--instant", help="schedule: the plan's time; execute: the pending compaction to run")
    p.add_argument("--strategy", help="hoodie.compaction.strategy (class name or short name)")
    p.add_argument("--option", action="append", default=[], metavar="K=V", help="any hoodie.compact* option")
    p.add_argument("--force", action="store_true", help="schedule even if the trigger strategy is not due")
    p.add_argument("--dry-run", action="store_true", help="print what would be planned or executed")
    p.add_argument(
        "--spark", action="store_true", help="execute the operations on Spark (spark_jobs/compact.py)"
    )
    p.add_argument("--master", default="local[2]", help="Spark master for --spark")

    p = add("archive", "move old completed instants to the archived timeline")
    p.add_argument("path")
    p.add_argument("--option", action="append", default=[], metavar="K=V", help="hoodie.keep.* options")

    p = add("partition-commit", "commit partitions (success file, metastore, custom policy)")
    p.add_argument("path")
    p.add_argument("--partition", action="append", required=True, help="partition path (repeatable)")
    p.add_argument("--policy", help="comma-separated policies in order: success-file,metastore,custom")
    p.add_argument("--trigger", choices=[t.value for t in Trigger])
    p.add_argument("--delay", help="e.g. '0 s', '30 min', '1 h', '1 d'")
    p.add_argument("--watermark", help="partition-time trigger: ISO 8601 time or epoch milliseconds")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="K=V",
        help="any sink.partition-commit.* / partition.time-extractor.* / hive_sync option",
    )
    p.add_argument("--master", default="local[2]", help="Spark master of the metastore policy's job")
    p.add_argument(
        "--metastore-dir",
        help="folder of the metastore policy's embedded Derby metastore (default: a temporary folder)",
    )


def _add_recovery_commands(add: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """savepoint, rollback, restore, metadata-table."""
    p = add("savepoint", "keep a commit's files from every clean")
    p.add_argument("action", choices=["create", "delete"])
    p.add_argument("path")
    p.add_argument("--instant", required=True, help="the completed commit to (un)savepoint")

    p = add("rollback", "roll back failed writes (or one instant)")
    p.add_argument("path")
    p.add_argument(
        "--instant", help="the instant to roll back (default: every failed write the policy allows)"
    )
    p.add_argument("--force", action="store_true", help="allow rolling back the latest completed commit")
    p.add_argument("--option", action="append", default=[], metavar="K=V", help="hoodie.* options")

    p = add("restore", "roll the table back to a savepoint (irreversible)")
    p.add_argument("path")
    p.add_argument("--savepoint", required=True, help="the savepoint instant to restore")
    p.add_argument("--option", action="append", default=[], metavar="K=V", help="hoodie.* options")

    p = add("metadata-table", "show (or drop) Hudi's metadata table of a table")
    p.add_argument("path")
    p.add_argument(
        "--drop", action="store_true", help="drop it as Hudi does with hoodie.metadata.enable=false"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="with --drop: do not wait for inflight table services (a crashed run leaves them for good)",
    )


def _cmd_rollback(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake.services.rollback import rollback
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(args.path)
    if args.force and not args.instant:
        raise LakeError("--force needs --instant: name the completed commit to roll back")
    results = rollback(table, args.instant, force=args.force, options=_key_values(args.option, LakeError))
    if not results:
        print("NO_WORK")
        return
    for result in results:
        print(
            f"rolled back {result.target_action} {result.target} at {result.instant}: "
            f"{len(result.deleted)} files deleted, {len(result.marked)} log files marked"
            + (" (finished an interrupted rollback)" if result.resumed else "")
        )


def _cmd_restore(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake.services.restore import restore
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(args.path)
    result = restore(table, args.savepoint, _key_values(args.option, LakeError))
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
    )
    print(f"created {table.config.table_type.value} table {table.config.name} at {table.uri}")


def _cmd_write(args: argparse.Namespace) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_lake_provider.lake.table.table import LakeTable
    from airflow_lake_provider.lake.table.write import write

    table = LakeTable.open(args.path)
    options = _key_values(args.option, WriteInputError)
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
    import pyarrow as pa
    import pyarrow.parquet as pq

    from airflow_lake_provider.lake.table.reader import read_snapshot
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(args.path)
    folder, name = _split(args.output)
    _check_outside(table.storage, folder, name)
    snapshot = read_snapshot(table, as_of=args.as_of)
    sink = pa.BufferOutputStream()
    pq.write_table(snapshot if snapshot.num_columns else pa.table({}), sink)
    folder.write(name, sink.getvalue().to_pybytes())  # atomic: no half-written output file
    print(f"{snapshot.num_rows} rows -> {folder.uri(name)}")


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
    if not name or name in (".", "..") or (sep and "/" not in rest.strip("/")):
        raise LakeError(f"{location!r} does not name a file")
    storage = open_storage(folder or ("/" if location.startswith("/") else "."))
    if storage.exists(name) and name not in storage.list_names():
        raise LakeError(f"{location} is a folder, not a file")
    return storage, name


def _cmd_timeline(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake.table.table import LakeTable

    timeline = LakeTable.open(args.path).timeline()
    rows = [{"time": i.timestamp, "action": i.action.value, "state": i.state.name} for i in timeline.instants]
    if args.verbose:
        from airflow_lake_provider.lake.services.inspect import instant_stats, stats_line
    stats = [instant_stats(timeline, i) for i in timeline.instants] if args.verbose else []
    if args.json:
        merged = [{**row, **more} for row, more in zip(rows, stats, strict=True)] if stats else rows
        print(json.dumps(merged, indent=2))
        return
    for n, row in enumerate(rows):
        if stats:
            print(f"{row['time']}  {row['action']:<14} {row['state']:<9} {stats_line(stats[n])}")
        else:
            print(f"{row['time']}  {row['action']:<14} {row['state']}")


def _cmd_show(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake.services.inspect import details_text, instant_details
    from airflow_lake_provider.lake.table.table import LakeTable

    details = instant_details(LakeTable.open(args.path), args.instant)
    if args.json:
        print(json.dumps(details, indent=2))
        return
    print("\n".join(details_text(details)))


def _clean_options(args: argparse.Namespace) -> dict[str, str]:
    options = _key_values(args.option, CleanConfigError)
    if args.policy:
        options[POLICY_KEYS[0]] = args.policy
    if args.retained is not None:
        options.update(CleanConfig.from_options(options).retention_option(args.retained))
    return options


def _cmd_clean(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake import spark_submit
    from airflow_lake_provider.lake.services.clean.executor import run_clean
    from airflow_lake_provider.lake.table.metadata_table import guard_mutation
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(args.path)
    options = _clean_options(args)
    if args.spark and args.list_files:
        raise LakeError("--list-files is not supported with --spark: list the plan with --dry-run first")
    if args.spark:
        guard_mutation(table, "clean", options, dry_run=args.dry_run)  # before Spark starts
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


def _key_values(pairs: Sequence[str], error: type[LakeError]) -> dict[str, str]:
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise error(f"--option {pair!r} is not K=V")
        options[key.strip()] = value.strip()
    check_options(options)
    return options


def _cmd_archive(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake.table.archival.executor import run_archival
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(args.path)
    result = run_archival(table, _key_values(args.option, ArchivalConfigError))
    print(json.dumps({**result.to_dict(), **_dropped(table)}, indent=2))


def _compaction_options(args: argparse.Namespace) -> dict[str, str]:
    options = _key_values(args.option, CompactionConfigError)
    if args.strategy:
        options[STRATEGY_KEY] = args.strategy
    return options


def _cmd_compact(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake import spark_submit
    from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
    from airflow_lake_provider.lake.services.compaction.result import Outcome
    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
    from airflow_lake_provider.lake.table.metadata_table import guard_mutation
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(args.path)
    options = _compaction_options(args)
    summary: dict[str, object] = {"mode": args.mode}

    def execute(instant: str | None) -> None:
        if args.spark and not args.dry_run:
            guard_mutation(table, "compaction execute", options)  # the job reads no options
            job_args = ["--table", table.uri] + (["--instant", instant] if instant else [])
            result = spark_submit.submit("compact.py", job_args, master=args.master)
            if result.get("outcome") == "FAILED":
                raise CompactionError(str(result.get("error")))
            summary.update(outcome=result["outcome"], execute=result)
            return
        executed = execute_compaction(table, instant, dry_run=args.dry_run, options=options)
        summary.update(outcome=executed.outcome.value, execute=executed.to_json())

    if args.mode == "execute":
        execute(args.instant)
    else:
        scheduled = schedule_compaction(
            table, options, dry_run=args.dry_run, instant=args.instant, force=args.force
        )
        summary.update(outcome=scheduled.outcome.value, schedule=scheduled.to_json())
        if args.mode == "run" and scheduled.outcome is Outcome.SCHEDULED and not args.dry_run:
            execute(scheduled.instant)
    print(json.dumps({**summary, **_dropped(table)}, indent=2))


def _partition_commit_options(args: argparse.Namespace) -> dict[str, str]:
    options: dict[str, str] = {}
    for pair in args.option:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise LakeError(f"--option {pair!r} is not K=V")
        options[key.strip()] = value.strip()
    check_options(options)
    if args.policy is not None:
        parse_policies(args.policy)  # unknown names fail here, before Spark or the table is touched
        options[POLICY_KIND_KEY] = args.policy
    if args.trigger:
        options[TRIGGER_KEY] = args.trigger
    if args.delay is not None:
        parse_duration(args.delay)
        options[DELAY_KEY] = args.delay
    return options


def _cmd_partition_commit(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake import spark_submit
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


def _cmd_metadata_table(args: argparse.Namespace) -> None:
    from airflow_lake_provider.lake.table.metadata_table import drop_metadata_table
    from airflow_lake_provider.lake.table.metadata_table import report as metadata_report
    from airflow_lake_provider.lake.table.table import LakeTable

    table = LakeTable.open(args.path)
    if args.force and not args.drop:
        raise LakeError("--force needs --drop")
    if args.drop:
        dropped = drop_metadata_table(table, force=args.force)
        print(dropped.notice if dropped else f"{table.uri} has no metadata table; nothing to drop")
        return
    found = metadata_report(table)
    state = found.state
    if not state.present:
        print(f"{table.uri}: no metadata table")
        return
    print(f"partitions: {', '.join(state.partitions) or '-'}")
    print(f"inflight partitions: {', '.join(state.inflight_partitions) or '-'}")
    print(f"folder {table.uri}/.hoodie/metadata: {'present' if state.folder_exists else 'absent'}")
    print(f"metadata instants: {len(found.instants)}")
    for name in found.instants:
        print(f"  {name}")
    print(f"latest metadata instant: {found.latest_instant or '-'}")
    print(f"latest data instant: {found.latest_data_instant or '-'}")


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


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        _COMMANDS[args.command](args)
        sys.stdout.flush()  # here, not at exit: a closed pipe is then caught below
    except BrokenPipeError:
        # The reader went away (`lake timeline T | head -1`): stop quietly with SIGPIPE's status, as
        # Unix tools do. No stdout left: Python's exit-time flush then reports no second error.
        sys.stdout = None  # type: ignore[assignment]
        return 141
    except Exception as exc:
        if not isinstance(exc, _reported()):
            raise
        message = " ".join(str(exc).split())
        print(f"lake: error: {message}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
