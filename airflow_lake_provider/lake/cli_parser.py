"""The ``lake`` command line's arguments: one argparse definition per subcommand."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

# The choices from the option values alone: a service's config module is loaded by its command.
from airflow_lake_provider.lake.config.parsers import whole_number
from airflow_lake_provider.lake.config.values import CleanPolicy
from airflow_lake_provider.lake.config.values import PartitionCommitTrigger as Trigger

OPERATIONS = ("insert", "upsert", "delete")  # writer.Operation's values (the writer loads pyarrow)


def _upper(value: str) -> str:
    return value.strip().upper()  # as the option reads the same value (clean policy names)


def _lower(value: str) -> str:
    return value.strip().lower()  # as the option reads the same value (Flink's trigger names)


def _whole(value: str) -> int:
    """A count as its option reads it: Java's digits (not Python's ``1_0``)."""
    number = whole_number(value.strip())
    if number is None:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number")
    return number


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
        sys.stdout.flush()  # a closed pipe fails here, inside main's parse (see there)
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lake", description="Apache Hudi tables from Python (table versions 6, 8 and 9)."
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
    p.add_argument(
        "--table-version",
        type=int,
        choices=[6, 8, 9],
        default=6,
        help="Hudi table version: 6 (0.14/0.15, default), 8 (1.0) or 9 (1.1)",
    )

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
    p.add_argument(
        "--archived", action="store_true", help="also the instants of the LSM history (table versions 8, 9)"
    )

    p = add("show", "print an instant's plan or commit metadata")
    p.add_argument("path")
    p.add_argument("instant", help="instant time (see lake timeline)")
    p.add_argument("--json", action="store_true")


def _add_service_commands(add: Callable[[str, str], argparse.ArgumentParser]) -> None:
    """clean, compact, archive, partition-commit."""
    p = add("clean", "delete file versions no retained snapshot or savepoint needs")
    p.add_argument("path")
    p.add_argument("--policy", type=_upper, choices=[c.value for c in CleanPolicy])
    p.add_argument("--retained", type=_whole, help="commits, file versions or hours to retain (per policy)")
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
    p.add_argument("--trigger", type=_lower, choices=[t.value for t in Trigger])
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

    p = add("metadata-table", "show, check (or drop) Hudi's metadata table of a table")
    p.add_argument("path")
    p.add_argument(
        "--check",
        action="store_true",
        help=(
            "compare its files partition with a full listing, and its column_stats and "
            "partition_stats with a recomputation from the files; JSON, exit 1 on any difference"
        ),
    )
    p.add_argument(
        "--drop", action="store_true", help="drop it as Hudi does with hoodie.metadata.enable=false"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="with --drop: do not wait for inflight table services (a crashed run leaves them for good)",
    )
