"""``lake timeline -v``, ``lake show``, ``clean --list-files``, one dry-run outcome name, ``-v`` on
either side of the subcommand, the partition-commit help, write progress, and the ``metastore``
policy refused on ``s3://`` before Spark starts. Expected outputs are built from the files on disk."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
from airflow_lake_provider.lake.services.rollback import rollback
from airflow_lake_provider.lake.services.savepoint import create_savepoint
from airflow_lake_provider.lake.storage import open_storage
from airflow_lake_provider.lake.table.progress import Progress
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import Action

REPO_ROOT = Path(__file__).resolve().parents[3]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _batch(ids: list[int], ts: int, cities: list[str]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([ts] * len(ids), pa.int64()),
            "city": cities,
        }
    )


def _table(path: Path, kind: str = "cow") -> LakeTable:
    return LakeTable.create(
        path,
        name="orders",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("city",),
    )


def _data_files(base: Path) -> set[str]:
    """Table-relative paths of every data file (base and log files) under the partitions."""
    return {
        str(p.relative_to(base))
        for p in base.rglob("*")
        if p.is_file() and ".hoodie" not in p.parts and not p.name.startswith(".hoodie_partition")
    }


def _written_at(files: set[str], instant: str) -> list[str]:
    """The base files ``instant`` wrote (``..._<instant>.parquet``)."""
    return sorted(f for f in files if f.endswith(f"_{instant}.parquet"))


# -- timeline -v ----------------------------------------------------------------------------------
def test_timeline_verbose_shows_operation_records_and_files_per_instant(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _table(tmp_path / "orders")
    t1 = write(table, _batch([1, 2, 3], 1, ["a", "a", "b"]), "insert").instant
    t2 = write(table, _batch([1, 4], 2, ["a", "b"]), "upsert").instant
    t3 = write(table, _batch([2], 3, ["a"]), "delete").instant
    # A pending write (killed before it completed) has no commit metadata: dashes.
    t4 = table.store.create_requested(table.clock.next(after=t3), Action.COMMIT).timestamp
    path = str(table.base_path)

    expected = "".join(
        f"{t}  commit         {s:<9} {op:<14} written={w} updated={u} deleted={d} files_added={a} "
        f"files_removed={r}\n"
        for t, s, op, w, u, d, a, r in (
            (t1, "COMPLETED", "INSERT", 3, 0, 0, 2, 0),
            (t2, "COMPLETED", "UPSERT", 3, 1, 0, 2, 0),
            (t3, "COMPLETED", "DELETE", 1, 0, 1, 1, 0),
            (t4, "REQUESTED", "-", "-", "-", "-", "-", "-"),
        )
    )
    assert _run(capsys, "timeline", path, "-v") == (0, expected, "")  # -v after the subcommand
    assert _run(capsys, "-v", "timeline", path) == (0, expected, "")  # and before it
    states = ((t1, "COMPLETED"), (t2, "COMPLETED"), (t3, "COMPLETED"), (t4, "REQUESTED"))
    plain = "".join(f"{t}  commit         {s}\n" for t, s in states)
    assert _run(capsys, "timeline", path) == (0, plain, "")

    code, out, err = _run(capsys, "timeline", path, "--json", "-v")
    assert (code, err) == (0, "")
    keys = (
        "operation",
        "records_written",
        "records_updated",
        "records_deleted",
        "files_added",
        "files_removed",
    )
    rows = [
        (t1, "COMPLETED", ("INSERT", 3, 0, 0, 2, 0)),
        (t2, "COMPLETED", ("UPSERT", 3, 1, 0, 2, 0)),
        (t3, "COMPLETED", ("DELETE", 1, 0, 1, 1, 0)),
        (t4, "REQUESTED", (None,) * 6),
    ]
    assert json.loads(out) == [
        {"time": t, "action": "commit", "state": s, **dict(zip(keys, v, strict=True))} for t, s, v in rows
    ]


# -- show -----------------------------------------------------------------------------------------
def test_show_prints_a_commits_partitions_files_and_record_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _table(tmp_path / "orders")
    base = table.base_path
    t1 = write(table, _batch([1, 2, 3], 1, ["a", "a", "b"]), "insert").instant
    t2 = write(table, _batch([1, 4], 2, ["a", "b"]), "upsert").instant
    files = _data_files(base)
    a2, b2 = _written_at(files, t2)  # a: k1 updated in k1+k2's file group; b: k4 in a new one
    assert a2.startswith("a/") and b2.startswith("b/")
    (a1,) = [f for f in _written_at(files, t1) if f.startswith("a/")]
    a_size, b_size = os.path.getsize(base / a2), os.path.getsize(base / b2)

    code, out, err = _run(capsys, "show", str(base), t2)
    assert (code, err) == (0, "")
    assert out == (
        f"instant {t2} commit COMPLETED\n"
        "operation: UPSERT\n"
        "records: 3 written, 1 inserted, 1 updated, 0 deleted\n"
        f"files: 2 written ({a_size + b_size} bytes), 0 file groups replaced\n"
        "partition a:\n"
        f"  {a2}  written=2 updated=1 inserted=0 deleted=0 bytes={a_size} prev_commit={t1}\n"
        "partition b:\n"
        f"  {b2}  written=1 updated=0 inserted=1 deleted=0 bytes={b_size} prev_commit=null\n"
    )
    code, out, err = _run(capsys, "show", str(base), t2, "--json")
    assert (code, err) == (0, "")
    file_id = {a2: a1.split("/")[1].split("_")[0], b2: b2.split("/")[1].split("_")[0]}

    def stat(path: str, written: int, updated: int, inserted: int, size: int, prev: str) -> dict[str, object]:
        return {"path": path, "file_id": file_id[path], "prev_commit": prev, "records_written": written,
                "records_updated": updated, "records_inserted": inserted, "records_deleted": 0,
                "bytes_written": size}  # fmt: skip

    assert json.loads(out) == {
        "instant": t2,
        "action": "commit",
        "state": "COMPLETED",
        "operation": "UPSERT",
        "records_written": 3,
        "records_updated": 1,
        "records_deleted": 0,
        "files_added": 2,
        "files_removed": 0,
        "records_inserted": 1,
        "bytes_written": a_size + b_size,
        "compaction": False,
        "partitions": {
            "a": {"files": [stat(a2, 2, 1, 0, a_size, t1)], "replaced_file_ids": []},
            "b": {"files": [stat(b2, 1, 0, 1, b_size, "null")], "replaced_file_ids": []},
        },
    }


def test_show_prints_a_pending_compaction_plans_operations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _table(tmp_path / "orders", "mor")
    base = table.base_path
    t1 = write(table, _batch([1, 2], 1, ["a", "a"]), "insert").instant
    write(table, _batch([1], 2, ["a"]), "upsert")
    t3 = write(table, _batch([2], 3, ["a"]), "upsert").instant
    files = _data_files(base)
    (base_file,) = _written_at(files, t1)
    logs = sorted(f for f in files if ".log." in f)
    assert len(logs) == 2 and all(f.startswith("a/.") for f in logs)  # t2's and t3's log files
    c = schedule_compaction(table, {}, force=True).instant
    file_id = base_file.split("/")[1].split("_")[0]

    code, out, err = _run(capsys, "show", str(base), c)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"instant {c} compaction REQUESTED"
    assert re.fullmatch(r"compaction plan: 1 operations, [0-9.]+ MB IO", lines[1])
    assert lines[2:] == [
        f"  a/{file_id}: base {base_file.split('/')[1]} (instant {t1}), 2 log files",
        *(f"    {f.split('/')[1]}" for f in logs),
    ]
    details = json.loads(_run(capsys, "show", str(base), c, "--json")[1])
    (op,) = details["operations"]
    assert (op["partition"], op["file_id"], op["base_instant"], op["base_file"], op["log_files"]) == (
        "a", file_id, t1, base_file.split("/")[1], [f.split("/")[1] for f in logs]
    )  # fmt: skip
    assert t3 < c


def test_clean_list_files_show_of_its_plan_and_of_the_completed_clean_name_the_deleted_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``clean --dry-run --list-files`` names exactly the files a clean then deletes; ``show`` of
    the pending clean lists them as its plan, ``show`` of the completed clean as deleted."""
    table = _table(tmp_path / "orders")
    base = table.base_path
    for ts in range(1, 5):
        write(table, _batch([1, 2], ts, ["a", "b"]), "upsert")
    retain = ["--option", "hoodie.cleaner.commits.retained=1"]
    code, out, err = _run(capsys, "clean", str(base), "--dry-run", "--list-files", *retain)
    assert (code, err) == (0, "")
    preview = json.loads(out)
    assert preview["outcome"] == "PLANNED" and preview["files_planned"] == 4

    before = _data_files(base)
    scheduled = run_clean(table, {"hoodie.cleaner.commits.retained": "1"}, mode="schedule")
    code, out, err = _run(capsys, "show", str(base), scheduled.instant)
    assert (code, err) == (0, "")
    planned = out

    run_clean(table, {}, mode="execute")
    deleted = before - _data_files(base)
    by_part = {p: sorted(f for f in deleted if f.startswith(f"{p}/")) for p in ("a", "b")}
    assert preview["files"] == by_part and len(deleted) == 4
    earliest = scheduled.plan.earliest_instant_to_retain.timestamp
    listing = [f"  partition {p}:\n" + "".join(f"    {f}\n" for f in by_part[p]) for p in ("a", "b")]
    assert planned == (
        f"instant {scheduled.instant} clean REQUESTED\n"
        "policy: KEEP_LATEST_COMMITS\n"
        f"earliest commit to retain: {earliest}\n"
        "files to delete: 4\n" + "".join(listing)
    )
    code, out, err = _run(capsys, "show", str(base), scheduled.instant)
    assert (code, out, err) == (
        0,
        f"instant {scheduled.instant} clean COMPLETED\n"
        f"earliest commit to retain: {earliest}\n"
        "deleted files: 4\n" + "".join(listing),
        "",
    )
    code, out, err = _run(capsys, "timeline", str(base), "-v")
    assert out.splitlines()[-1] == (
        f"{scheduled.instant}  clean          COMPLETED CLEAN          "
        "written=- updated=- deleted=- files_added=- files_removed=4"
    )


def test_show_prints_a_completed_rollbacks_target_and_deleted_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _table(tmp_path / "orders")
    base = table.base_path
    write(table, _batch([1], 1, ["a"]), "insert")
    t2 = write(table, _batch([2, 3], 2, ["a", "b"]), "insert").instant
    before = _data_files(base)
    (done,) = rollback(table, t2, force=True)
    deleted = sorted(before - _data_files(base))
    assert deleted == _written_at(before, t2) and len(deleted) == 2
    code, out, err = _run(capsys, "show", str(base), done.instant)
    assert (code, out, err) == (
        0,
        f"instant {done.instant} rollback COMPLETED\n"
        f"rolled back: {t2}\n"
        "deleted files: 2\n"
        f"  partition a:\n    {deleted[0]}\n"
        f"  partition b:\n    {deleted[1]}\n",
        "",
    )


def test_show_of_a_savepointed_commit_prints_the_files_its_savepoint_keeps(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A savepoint shares its commit's time, so ``lake show T`` is the only way to see what it keeps."""
    table = _table(tmp_path / "orders")
    base = table.base_path
    t1 = write(table, _batch([1, 2], 1, ["a", "b"]), "insert").instant
    write(table, _batch([1], 2, ["a"]), "upsert")
    kept = _written_at(_data_files(base), t1)
    create_savepoint(table, t1, user="ana")
    code, out, _ = _run(capsys, "show", str(base), t1, "--json")
    details = json.loads(out)
    assert (code, details["action"], details["savepointed_by"]) == (0, "commit", "ana")
    assert details["files_kept"] == {"a": [kept[0]], "b": [kept[1]]}
    code, out, _ = _run(capsys, "show", str(base), t1)
    assert out.endswith(
        f"savepointed by: ana\nfiles kept: 2\n  partition a:\n    {kept[0]}\n  partition b:\n    {kept[1]}\n"
    )


def test_show_of_an_unknown_instant_exits_1_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _table(tmp_path / "orders")
    t1 = write(table, _batch([1], 1, ["a"]), "insert").instant
    assert _run(capsys, "show", str(table.base_path), "20990101000000000") == (
        1,
        "",
        f"lake: error: {table.base_path}: no instant 20990101000000000 on the active timeline\n",
    )
    assert _run(capsys, "show", str(table.base_path), "20000101000000000")[2] == (
        f"lake: error: {table.base_path}: no instant 20000101000000000 on the active timeline "
        "(older than its first instant: archived, or never written)\n"
    )
    assert t1 > "20000101000000000"
    for malformed in ("2026", "../x", "2025012100054779", "20250231000000000"):  # never "archived"
        code, out, err = _run(capsys, "show", str(table.base_path), malformed)
        assert (code, out) == (1, "") and err.startswith(
            f"lake: error: {table.base_path}: no instant {malformed}: instant time {malformed!r} is not"
        ), err
        assert "archived" not in err


# -- one dry-run outcome name -----------------------------------------------------------------------
def test_dry_runs_of_clean_and_compaction_report_one_outcome_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _table(tmp_path / "orders", "mor")
    base = str(table.base_path)
    write(table, _batch([1, 2], 1, ["a", "a"]), "insert")
    for ts in (2, 3):
        write(table, _batch([1], ts, ["a"]), "upsert")
    listing = sorted(os.listdir(table.base_path / ".hoodie"))
    scheduled = json.loads(_run(capsys, "compact", base, "--mode", "schedule", "--force", "--dry-run")[1])
    assert (scheduled["outcome"], scheduled["schedule"]["outcome"], scheduled["schedule"]["dry_run"]) == (
        "PLANNED", "PLANNED", True
    )  # fmt: skip
    cleaned = json.loads(
        _run(capsys, "clean", base, "--dry-run", "--option", "hoodie.cleaner.commits.retained=1")[1]
    )
    assert cleaned["outcome"] in ("PLANNED", "NO_WORK") and "files" not in cleaned
    assert sorted(os.listdir(table.base_path / ".hoodie")) == listing  # dry runs write nothing
    c = schedule_compaction(table, {}, force=True).instant
    executed = json.loads(_run(capsys, "compact", base, "--mode", "execute", "--dry-run")[1])
    assert (executed["outcome"], executed["execute"]["outcome"], executed["execute"]["instant"]) == (
        "PLANNED", "PLANNED", c
    )  # fmt: skip


def test_clean_list_files_is_refused_with_spark_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = _table(tmp_path / "orders")
    write(table, _batch([1], 1, ["a"]), "insert")
    assert _run(capsys, "clean", str(table.base_path), "--spark", "--list-files") == (
        1,
        "",
        "lake: error: --list-files is not supported with --spark: list the plan with --dry-run first\n",
    )


# -- usage: -v anywhere, help, exit 2 -------------------------------------------------------------
def test_partition_commit_help_lists_option_master_and_metastore_dir(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    with pytest.raises(SystemExit) as exit_:
        main(["partition-commit", "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert (
        "  --option K=V          any sink.partition-commit.* / partition.time-extractor.* / hive_sync\n"
        in out
    )
    assert "  --master MASTER       Spark master of the metastore policy's job\n" in out
    assert (
        "  --metastore-dir METASTORE_DIR\n"
        "                        folder of the metastore policy's embedded Derby metastore (default: a\n"
        "                        temporary folder)\n"
    ) in out
    assert "  -v, --verbose         log progress to stderr\n" in out


def test_usage_errors_exit_2_as_the_cli_doc_says(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["partition-commit", "somewhere"])  # --partition is required
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert (
        err.splitlines()[-1]
        == "lake partition-commit: error: the following arguments are required: --partition"
    )
    cli_doc = " ".join((REPO_ROOT / "docs" / "cli.md").read_text().split())
    assert (
        "a usage error, such as a missing or unknown argument, is reported by the argument parser"
        " with exit status 2" in cli_doc
    )


# -- metastore policy on s3:// ----------------------------------------------------------------------
def test_metastore_policy_on_an_s3_table_is_refused_before_spark_starts(
    s3_bucket: str, s3_endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from s3_helpers import s3_objects

    uri = f"s3://{s3_bucket}/orders"
    table = LakeTable.create(
        open_storage(uri), name="orders", table_type="cow", record_key_fields=("id",),
        precombine_field="ts", partition_fields=("city",),
    )  # fmt: skip
    write(table, _batch([1], 1, ["a"]), "insert")
    objects = s3_objects(s3_endpoint, s3_bucket)
    started = time.monotonic()
    code, out, err = _run(capsys, "partition-commit", uri, "--partition", "city=a", "--partition", "a",
                          "--policy", "metastore,success-file")  # fmt: skip
    elapsed = time.monotonic() - started
    assert (code, out, err) == (
        1,
        "",
        f"lake: error: {uri}: the metastore policy works on local tables only (its Spark job has no "
        "s3:// file system: pyspark ships no hadoop-aws connector); commit with "
        "sink.partition-commit.policy.kind=success-file, or register the partitions in your catalog "
        "with a custom policy\n",
    )
    assert elapsed < 1.0, elapsed  # no JVM was started (a Spark start takes 10-20 s)
    assert s3_objects(s3_endpoint, s3_bucket) == objects  # nothing written


# -- progress of a write --------------------------------------------------------------------------
def test_progress_logs_the_start_every_interval_and_the_end(caplog: pytest.LogCaptureFixture) -> None:
    ticks = iter([0.0, 0.5, 2.5, 3.0, 4.6, 4.7])
    logger = logging.getLogger("test.progress")
    with caplog.at_level(logging.INFO, logger="test.progress"):
        progress = Progress("write T of /t", 5, 1000, interval=2.0, clock=lambda: next(ticks), logger=logger)
        for files, rows in ((1, 100), (1, 200), (2, 300), (1, 150), (1, 250)):
            progress.step(files, rows)
    assert [r.getMessage() for r in caplog.records] == [
        "write T of /t: 1000 rows in 5 file groups",
        "write T of /t: 2/5 file groups, 2 files, 300 rows, 2.5 s",  # 2.5 s since the start line
        "write T of /t: 4/5 file groups, 5 files, 750 rows, 4.6 s",  # not at 3.0: 2 s after 2.5
        "write T of /t: 5/5 file groups, 6 files, 1000 rows, 4.7 s",  # the last one, always
    ]


def test_cli_write_with_v_logs_progress_on_stderr(tmp_path: Path) -> None:
    table = _table(tmp_path / "orders")
    batch = pa.table({"id": pa.array(range(6), pa.int64()), "ts": pa.array([1] * 6, pa.int64()),
                      "city": ["a", "b", "c", "a", "b", "c"]})  # fmt: skip
    pq.write_table(batch, tmp_path / "in.parquet")
    done = subprocess.run(
        [sys.executable, "-m", "airflow_lake_provider.lake.cli", "write", str(table.base_path),
         "--input", str(tmp_path / "in.parquet"), "--operation", "insert", "-v"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    instant = done.stdout.strip()
    progress = [
        line.split(" INFO airflow_lake_provider.lake.table.progress: ", 1)[1]
        for line in done.stderr.splitlines()
        if " INFO airflow_lake_provider.lake.table.progress: " in line
    ]
    what = f"write {instant} of {table.base_path}"
    assert progress[0] == f"{what}: 6 rows in 3 file groups"
    assert re.fullmatch(
        re.escape(f"{what}: 3/3 file groups, 3 files, 6 rows, ") + r"[0-9]+\.[0-9] s", progress[-1]
    )
    assert len(progress) in (2, 3, 4)  # the start, the end, a line per 2 s in between
    assert (
        f" INFO airflow_lake_provider.lake.cli: read 6 rows from {tmp_path / 'in.parquet'}\n" in done.stderr
    )
