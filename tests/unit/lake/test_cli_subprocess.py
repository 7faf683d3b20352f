"""Every ``lake`` subcommand as a real process: exact stdout (lines or JSON), exit status, and the
files left on disk. Errors exit 1 with one ``lake: error:`` line naming the offending value and
change nothing; argparse refusals exit 2. ``tests/unit/lake/test_cli.py`` calls ``main()`` in process.

Tables are built in process (faster); the subcommand under test always runs as
``python -m airflow_lake_provider.lake.cli``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from crash_support import crashing
from hudi import HudiTableBuilder
from lake_processes import lake_all

from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

REPO_ROOT = Path(__file__).resolve().parents[3]
HOODIE = ".hoodie"


# -- helpers --------------------------------------------------------------------------------------
def _lake(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "airflow_lake_provider.lake.cli", *argv],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
        timeout=600,
        check=False,
    )


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    """stdout of a run that must succeed silently on stderr."""
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    return done.stdout


def _json(done: subprocess.CompletedProcess[str], *volatile: str) -> dict[str, Any]:
    """The JSON summary of a successful run; ``volatile`` keys (timings) checked for type, then dropped."""
    out = json.loads(_ok(done))
    for key in volatile:
        assert isinstance(out.pop(key), (int, float, str)), key
    if "duration_seconds" in out:
        assert out.pop("duration_seconds") >= 0
    return out


def _error(done: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a run that failed with status 1 and printed nothing on stdout."""
    assert (done.returncode, done.stdout) == (1, ""), (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lake: error: "), done.stderr
    return lines[0].removeprefix("lake: error: ")


def _usage_error(done: subprocess.CompletedProcess[str]) -> str:
    """argparse's refusal: status 2, usage, then one ``lake <cmd>: error:`` line."""
    assert (done.returncode, done.stdout) == (2, "")
    last = done.stderr.splitlines()[-1]
    assert done.stderr.startswith("usage: lake ") and ": error: " in last
    return last.split(": error: ", 1)[1]


def _tree(base: Path) -> dict[str, int]:
    """Every file under ``base`` with its size, but the empty service lock files under ``.hoodie/.aux/``
    (made on a lock's first use, whoever takes it)."""
    out = {}
    for root, _dirs, files in os.walk(base):
        for f in files:
            if f.startswith(".lake-") and f.endswith(".lock"):
                continue
            p = os.path.join(root, f)
            out[os.path.relpath(p, base)] = os.path.getsize(p)
    return out


def _data_files(base: Path) -> set[str]:
    return {p for p in _tree(base) if not p.startswith(HOODIE + "/") and p.endswith(".parquet")}


def _written_at(files: set[str], instant: str) -> set[str]:
    """Base files named with ``instant`` (``<fileId>_<token>_<instant>.parquet``)."""
    return {f for f in files if f.rsplit("_", 1)[1].removesuffix(".parquet") == instant}


def _timeline(base: Path) -> list[str]:
    return sorted(f for f in os.listdir(base / HOODIE) if f[:1].isdigit())


def _batch(keys: list[str], ts: int, parts: list[str]) -> pa.Table:
    return pa.table(
        {
            "id": keys,
            "ts": pa.array([ts] * len(keys), pa.int64()),
            "p": parts,
            "v": [f"{k}@{ts}" for k in keys],
        }
    )


def _cow(path: Path, commits: int) -> tuple[LakeTable, list[str]]:
    """COW, partitions a and b; every upsert rewrites both file groups (one new slice each)."""
    table = LakeTable.create(
        path,
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
    )
    keys, parts = ["k1", "k2", "k3", "k4"], ["a", "a", "b", "b"]
    return table, [write(table, _batch(keys, ts, parts), "upsert").instant for ts in range(commits)]


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table.column(c).to_pylist() for c in ("_hoodie_record_key", "ts", "v")), strict=True))


def _hudi_rs(base: Path) -> list[tuple]:
    return _rows(pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(base)).build().read()))


# -- init, write, read, timeline ------------------------------------------------------------------
def test_init_write_read_timeline(tmp_path: Path) -> None:
    base = tmp_path / "orders"
    assert _ok(
        _lake(
            "init", str(base), "--table-type", "cow", "--name", "orders", "--record-key", "id",
            "--precombine", "ts", "--partition-fields", "p", "--hive-style",
        )
    ) == f"created COPY_ON_WRITE table orders at {base}\n"  # fmt: skip
    assert _tree(base) == {
        f"{HOODIE}/hoodie.properties": (base / HOODIE / "hoodie.properties").stat().st_size
    }
    props = (base / HOODIE / "hoodie.properties").read_text()
    assert "hoodie.datasource.write.hive_style_partitioning=true" in props
    assert "hoodie.table.recordkey.fields=id" in props

    pq.write_table(_batch(["k1", "k2", "k3"], 1, ["a", "a", "b"]), tmp_path / "ins.parquet")
    pq.write_table(_batch(["k2"], 2, ["a"]), tmp_path / "upd.parquet")
    pq.write_table(_batch(["k3"], 3, ["b"]), tmp_path / "del.parquet")
    instants = []
    for name, op in (("ins", "insert"), ("upd", "upsert"), ("del", "delete")):
        out = _ok(_lake("write", str(base), "--input", str(tmp_path / f"{name}.parquet"), "--operation", op))
        assert out.endswith("\n") and len(out) == 18 and out[:17].isdigit()
        instants.append(out.strip())
    t1, t2, t3 = instants
    assert t1 < t2 < t3
    assert {f.split("/")[0] for f in _data_files(base)} == {"p=a", "p=b"}

    assert _ok(_lake("timeline", str(base))) == "".join(f"{t}  commit         COMPLETED\n" for t in instants)
    out = tmp_path / "now.parquet"
    assert _ok(_lake("read", str(base), "--output", str(out))) == f"2 rows -> {out}\n"
    assert _rows(pq.read_table(out)) == [("k1", 1, "k1@1"), ("k2", 2, "k2@2")]
    then = tmp_path / "then.parquet"
    assert _ok(_lake("read", str(base), "--output", str(then), "--as-of", t1)) == f"3 rows -> {then}\n"
    assert _rows(pq.read_table(then)) == [("k1", 1, "k1@1"), ("k2", 1, "k2@1"), ("k3", 1, "k3@1")]
    assert _rows(read_snapshot(LakeTable.open(base))) == _hudi_rs(base) == _rows(pq.read_table(out))

    # Errors: nothing changes, the line names the offending path or value.
    before = _tree(tmp_path)
    exists, as_of, missing, usage = lake_all(
        ["init", str(base), "--table-type", "mor", "--name", "x", "--record-key", "id", "--precombine", "ts"],
        ["read", str(base), "--output", str(tmp_path / "x.parquet"), "--as-of", "yesterday"],
        ["write", str(base), "--input", str(tmp_path / "none.parquet"), "--operation", "upsert"],
        ["write", str(base), "--input", "x", "--operation", "merge"],
    )
    assert _error(exists) == f"{base} already holds a table ({base / HOODIE} exists)"
    assert _error(as_of) == "instant time 'yesterday' is not 14 or 17 digits (yyyyMMddHHmmss[SSS])"
    assert _error(missing) == f"input file {tmp_path / 'none.parquet'} does not exist"
    assert (
        _usage_error(usage)
        == "argument --operation: invalid choice: 'merge' (choose from 'insert', 'upsert', 'delete')"
    )
    assert _tree(tmp_path) == before


# -- clean and savepoint --------------------------------------------------------------------------
def test_clean_and_savepoint(tmp_path: Path) -> None:
    base = tmp_path / "t"
    table, (c1, c2, c3, c4) = _cow(base, 4)
    files = _data_files(base)
    assert _ok(_lake("savepoint", "create", str(base), "--instant", c2)) == f"savepoint {c2}: 2 files kept\n"
    assert f"{c2}.savepoint" in _timeline(base)

    # Retaining 1 commit keeps c4 and c3 (the last slice before it); c2's slices are savepointed,
    # so only c1's go.
    before = _tree(base)
    preview = _json(_lake("clean", str(base), "--retained", "1", "--dry-run"))
    sizes = {f: before[f] for f in _written_at(files, c1)}
    expected_plan = {
        "earliest_commit_to_retain": c4,
        "policy": "KEEP_LATEST_COMMITS",
        "files_planned": 2,
        "bytes_planned": sum(sizes.values()),
        "partitions": {
            p: {"files": 1, "bytes": s} for f, s in sorted(sizes.items()) for p in [f.split("/")[0]]
        },
        "deleted_files": 0,
        "failed_files": 0,
        "finished_pending": [],
        "kept_for_savepoints": [],
        "held_back_by": [],
        "reason": "",
    }
    assert preview == {"outcome": "PLANNED", "instant": None, **expected_plan}
    assert _tree(base) == before  # a dry run writes nothing

    cleaned = _json(_lake("clean", str(base), "--retained", "1"))
    t = cleaned.pop("instant")
    assert cleaned == {"outcome": "CLEANED", **expected_plan, "deleted_files": 2}
    assert files - _data_files(base) == _written_at(files, c1) and not _data_files(base) - files
    assert [n for n in _timeline(base) if ".clean" in n] == [
        f"{t}.clean",
        f"{t}.clean.inflight",
        f"{t}.clean.requested",
    ]

    again = _json(_lake("clean", str(base), "--retained", "1"))
    assert again == {
        **{k: v for k, v in expected_plan.items() if k not in ("reason",)},
        "outcome": "NO_WORK",
        "instant": None,
        "earliest_commit_to_retain": None,
        "policy": "KEEP_LATEST_COMMITS",  # the policy in effect, though nothing is planned
        "files_planned": 0,
        "bytes_planned": 0,
        "partitions": {},
        "reason": "fewer than 1 commits since the last clean",
    }

    # Savepoint errors name the instant; nothing changes.
    before = _tree(base)
    again, too_old, unknown, usage = lake_all(
        ["savepoint", "create", str(base), "--instant", c2],
        ["savepoint", "create", str(base), "--instant", c1],
        ["savepoint", "delete", str(base), "--instant", c3],
        ["savepoint", "list", str(base), "--instant", c3],
    )
    assert _error(again) == f"{base}: a savepoint at {c2} already exists"
    assert _error(too_old) == (
        f"{base}: {c1} is older than {c4}, the earliest commit the last clean ({t}) retained; "
        "its files may be gone"
    )
    assert _error(unknown) == f"{base}: there is no completed savepoint at {c3}"
    assert _usage_error(usage).startswith("argument action: invalid choice: 'list'")
    assert _tree(base) == before

    # Deleting the savepoint frees c2's slices for the next clean (every partition listed again).
    assert _ok(_lake("savepoint", "delete", str(base), "--instant", c2)) == f"savepoint {c2} deleted\n"
    assert not [n for n in _timeline(base) if ".savepoint" in n]
    c5 = write(table, _batch(["k1", "k2", "k3", "k4"], 9, ["a", "a", "b", "b"]), "upsert").instant
    files = _data_files(base)
    freed = _json(_lake("clean", str(base), "--retained", "1"))
    assert (freed["outcome"], freed["earliest_commit_to_retain"], freed["deleted_files"]) == (
        "CLEANED",
        c5,
        4,
    )
    assert files - _data_files(base) == _written_at(files, c2) | _written_at(files, c3)


def test_clean_errors_and_a_held_lock_change_nothing(tmp_path: Path) -> None:
    base = tmp_path / "t"
    table, _ = _cow(base, 3)
    before = _tree(base)
    cases = {
        "hoodie.cleaner.fileversions.retained=0": [
            "--policy",
            "KEEP_LATEST_FILE_VERSIONS",
            "--retained",
            "0",
        ],
        "hoodie.cleaner.policy='KEEP_NOTHING' is not one of": [
            "--option",
            "hoodie.cleaner.policy=KEEP_NOTHING",
        ],
        "hoodie.clean.max.commits=-1": ["--option", "hoodie.clean.max.commits=-1"],
        "hoodie.clean.allow.multiple='perhaps'": ["--option", "hoodie.clean.allow.multiple=perhaps"],
        "--option 'retained' is not K=V": ["--option", "retained"],
        # Two values for one key: refused (argparse alone keeps the last one silently).
        "--option hoodie.cleaner.commits.retained is given twice, as '5' and '1': give it once": [
            "--option",
            "hoodie.cleaner.commits.retained=5",
            "--option",
            "hoodie.cleaner.commits.retained=1",
        ],
        # A flag and an --option setting one key to two values: refused too (the flag won silently).
        "--retained 1 and --option hoodie.cleaner.commits.retained=5 disagree: give one of them": [
            "--retained",
            "1",
            "--option",
            "hoodie.cleaner.commits.retained=5",
        ],
        "--policy KEEP_LATEST_FILE_VERSIONS and --option hoodie.cleaner.policy=KEEP_LATEST_COMMITS di": [
            "--policy",
            "KEEP_LATEST_FILE_VERSIONS",
            "--option",
            "hoodie.cleaner.policy=KEEP_LATEST_COMMITS",
        ],
    }
    strategy = ["--strategy", "LogFileNumBasedCompactionStrategy"]
    *errors, usage, compact = lake_all(
        *(["clean", str(base), *argv] for argv in cases.values()),
        ["clean", str(base), "--policy", "KEEP_ALL"],
        [
            "compact",
            str(base),
            "--mode",
            "schedule",
            *strategy,
            "--option",
            "hoodie.compaction.strategy=BoundedIO",
        ],
    )
    assert _error(compact) == (
        "--strategy LogFileNumBasedCompactionStrategy and --option hoodie.compaction.strategy=BoundedIO "
        "disagree: give one of them"
    )
    for message, done in zip(cases, errors, strict=True):
        assert _error(done).startswith(message), (message, done.stderr)
    assert _usage_error(usage).startswith("argument --policy: invalid choice: 'KEEP_ALL'")
    assert _tree(base) == before
    # Another clean holds the table's clean lock: refused at once, nothing planned or deleted.
    with table.store.exclusive("clean"):
        assert _error(_lake("clean", str(base), "--retained", "1")) == (
            f"{base}: another clean is running on this table; lock file "
            f"{base}/.hoodie/.aux/.lake-clean.lock, held by a running process (the lock goes with it)"
        )
    assert _tree(base) == before


def test_savepoint_overrides_a_pending_clean_which_then_keeps_its_files(tmp_path: Path) -> None:
    base = tmp_path / "t"
    table, (c1, c2, c3, c4) = _cow(base, 4)
    files = _data_files(base)
    planned = run_clean(table, {"hoodie.cleaner.commits.retained": "1"}, mode="schedule")
    assert planned.plan is not None and planned.plan.file_count == 4  # c1's and c2's slices
    t = planned.instant
    created = _lake("savepoint", "create", str(base), "--instant", c2)
    assert (created.returncode, created.stdout) == (
        0,
        f"savepoint {c2}: 2 files kept\npending clean {t} will keep this savepoint's files\n",
    )
    # The override is logged as a warning too (stderr: one log line).
    [warning] = created.stderr.splitlines()
    assert warning.endswith(
        f"WARNING airflow_lake_provider.lake.services.savepoint: savepoint {c2} of {base} "
        f"overrides pending clean(s) {t}: they will keep its files"
    )
    cleaned = _lake("clean", str(base), "--retained", "1")
    kept = sorted(_written_at(files, c2))
    [warning] = cleaned.stderr.splitlines()
    assert warning.endswith(
        f"WARNING airflow_lake_provider.lake.services.clean.executor: clean {t} of {base}: "
        f"keeping 2 planned files that savepoints need: {', '.join(kept)}"
    )
    done = _json(subprocess.CompletedProcess(cleaned.args, 0, cleaned.stdout, ""))
    assert (done["outcome"], done["instant"], done["deleted_files"]) == ("CLEANED", t, 2)
    assert done["kept_for_savepoints"] == kept and done["finished_pending"] == [t]
    assert done["reason"] == "fewer than 1 commits since the last clean"
    assert files - _data_files(base) == _written_at(files, c1)


# -- compaction -----------------------------------------------------------------------------------
def _mor(path: Path, deltas: int, table_version: int = 6) -> LakeTable:
    """MOR: an insert of k0..k7 (two file groups per partition), then ``deltas`` upserts of k0 and k5."""
    table = LakeTable.create(
        path,
        name="t",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        table_version=table_version,
    )
    keys = [f"k{i}" for i in range(8)]
    write(table, _batch(keys, 0, ["a", "b"] * 4), "insert", max_rows_per_file=2)
    for d in range(1, deltas + 1):
        write(table, _batch(["k0", "k5"], d, ["a", "b"]), "upsert")
    return table


def _expected_mor(deltas: int) -> list[tuple]:
    rows = {f"k{i}": 0 for i in range(8)}
    if deltas:
        rows["k0"] = rows["k5"] = deltas
    return sorted((k, ts, f"{k}@{ts}") for k, ts in rows.items())


def test_compact_schedule_execute_run_and_no_work(tmp_path: Path) -> None:
    base = tmp_path / "t"
    table = _mor(base, 2)
    due = ["--option", "hoodie.compact.inline.max.delta.commits=2"]
    before = _tree(base)
    not_due = _json(_lake("compact", str(base), "--mode", "schedule"))
    reason = not_due["schedule"].pop("reason")
    # The insert is a delta commit too on merge-on-read: 3 of the 5 the default trigger needs.
    assert reason.startswith("not due: NUM_COMMITS: 3 delta commit(s) since the start (need 5), ")
    assert not_due == {
        "mode": "schedule",
        "outcome": "NO_WORK",
        "schedule": {"outcome": "NO_WORK", "instant": None, "dry_run": False, "plan": None},
    }
    nothing = _json(_lake("compact", str(base), "--mode", "execute"))
    assert nothing["outcome"] == nothing["execute"]["outcome"] == "NO_WORK"
    assert nothing["execute"]["instant"] is None and nothing["execute"]["files"] == []
    assert _tree(base) == before

    scheduled = _json(_lake("compact", str(base), "--mode", "schedule", *due))
    c = scheduled["schedule"]["instant"]
    plan = scheduled["schedule"]["plan"]
    # Only the file groups of k0 (partition a) and k5 (partition b) have log files.
    assert scheduled["outcome"] == "SCHEDULED" and plan["operations"] == 2 and plan["log_files"] == 4
    assert sorted(g["partition"] for g in plan["file_groups"]) == ["a", "b"]
    assert f"{c}.compaction.requested" in _timeline(base)
    preview = _json(_lake("compact", str(base), "--mode", "execute", "--dry-run"))
    assert (preview["outcome"], preview["execute"]["instant"], preview["execute"]["operations"]) == (
        "PLANNED",
        c,
        2,
    )
    assert not [n for n in _timeline(base) if n.startswith(c) and not n.endswith(".requested")]

    files = _data_files(base)
    done = _json(_lake("compact", str(base), "--mode", "execute"))
    execute = done["execute"]
    execute.pop("duration_seconds")
    assert done["outcome"] == "COMPLETED"
    assert {k: v for k, v in execute.items() if k not in ("files", "bytes_written")} == {
        "outcome": "COMPLETED",
        "instant": c,
        "operations": 2,
        "records_written": 4,  # two rows per file group
        "log_records_merged": 4,
        "recovered": False,
        "removed_files": [],
    }
    assert set(execute["files"]) == _data_files(base) - files == _written_at(_data_files(base), c)
    assert execute["bytes_written"] == sum(os.path.getsize(base / f) for f in execute["files"])
    assert [n for n in _timeline(base) if n.startswith(c)] == [
        f"{c}.commit",
        f"{c}.compaction.inflight",
        f"{c}.compaction.requested",
    ]
    assert _rows(read_snapshot(table)) == _hudi_rs(base) == _expected_mor(2)
    assert _json(_lake("compact", str(base), "--mode", "execute"))["outcome"] == "NO_WORK"

    # run = schedule + execute in one process.
    write(table, _batch(["k0"], 7, ["a"]), "upsert")
    ran = _json(
        _lake("compact", str(base), "--mode", "run", "--option", "hoodie.compact.inline.max.delta.commits=1")
    )
    assert ran["outcome"] == "COMPLETED" and ran["schedule"]["outcome"] == "SCHEDULED"
    assert ran["execute"]["instant"] == ran["schedule"]["instant"] > c and ran["execute"]["operations"] == 1
    assert _rows(read_snapshot(table)) == _hudi_rs(base)

    before = _tree(base)
    unknown, strategy, option, usage = lake_all(
        ["compact", str(base), "--mode", "execute", "--instant", "20990101000000000"],
        ["compact", str(base), "--mode", "schedule", "--strategy", "nope"],
        ["compact", str(base), "--mode", "schedule", "--option", "nope"],
        ["compact", str(base), "--mode", "later"],
    )
    assert _error(unknown) == f"{base}: there is no compaction at instant 20990101000000000"
    assert _error(strategy).startswith("hoodie.compaction.strategy: unknown strategy 'nope'")
    assert _error(option) == "--option 'nope' is not K=V"
    assert _usage_error(usage).startswith("argument --mode: invalid choice: 'later'")
    assert _tree(base) == before


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("table_version", [6, 8])
def test_compact_on_spark_with_work_to_do(tmp_path: Path, table_version: int) -> None:
    """``lake compact --mode run --spark``: the plan made here, executed by spark-submit (local[2]);
    on version 8 the timeline files are Hudi 1.x's (``.hoodie/timeline/``, completion time)."""
    base = tmp_path / "t"
    table = _mor(base, 3, table_version)
    files = _data_files(base)
    due = "hoodie.compact.inline.max.delta.commits=3"
    run = _lake("compact", str(base), "--mode", "run", "--spark", "--option", due)
    assert run.returncode == 0 and "lake: error" not in run.stderr  # stderr: spark-submit's own log
    done = json.loads(run.stdout)
    c = done["schedule"]["instant"]
    job = done["execute"]
    assert done["outcome"] == job["outcome"] == "COMPLETED" and job["instant"] == c
    assert (job["operations"], job["records_written"], job["log_records_merged"]) == (2, 4, 6)
    assert (job["recovered"], job["removed_files"]) == (False, [])
    assert len(job["tasks"]) == 2 and all(t["ok"] for t in job["tasks"])
    assert set(job["files"]) == _data_files(base) - files == _written_at(_data_files(base), c)
    if table_version == 6:
        assert [n for n in _timeline(base) if n.startswith(c)] == [
            f"{c}.commit",
            f"{c}.compaction.inflight",
            f"{c}.compaction.requested",
        ]
    else:
        completion = LakeTable.open(base).timeline().get(c).completion_time  # type: ignore[union-attr]
        assert sorted(n for n in os.listdir(base / HOODIE / "timeline") if n.startswith(c)) == [
            f"{c}.compaction.inflight",
            f"{c}.compaction.requested",
            f"{c}_{completion}.commit",
        ]
    assert _rows(read_snapshot(table)) == _hudi_rs(base) == _expected_mor(3)


# -- archive --------------------------------------------------------------------------------------
def test_archive(tmp_path: Path) -> None:
    base = tmp_path / "t"
    _, commits = _cow(base, 6)
    before = _tree(base)
    idle = _json(_lake("archive", str(base)))
    assert idle == {
        "outcome": "NO_WORK",
        "archived_instants": 0,
        "first_archived": None,
        "last_archived": None,
        "actions": {},
        "archive_file": None,
        "active_timeline_starts_at": None,
        "limited_by": "",
        "reason": "6 completed commits, at most 30 kept",
    }
    keep = ["--option", "hoodie.keep.min.commits=2", "--option", "hoodie.keep.max.commits=4"]
    assert _error(
        _lake(
            "archive",
            str(base),
            "--option",
            "hoodie.keep.min.commits=3",
            "--option",
            "hoodie.keep.max.commits=3",
        )
    ) == ("hoodie.keep.max.commits=3 must be greater than hoodie.keep.min.commits=3")
    assert _tree(base) == before
    # 6 > 4 completed commits: the oldest go until 2 remain.
    done = _json(_lake("archive", str(base), *keep))
    assert done == {
        "outcome": "ARCHIVED",
        "archived_instants": 4,
        "first_archived": commits[0],
        "last_archived": commits[3],
        "actions": {"commit": 4},
        "archive_file": ".commits_.archive.1_1-0-1",
        "active_timeline_starts_at": commits[4],
        "limited_by": "hoodie.keep.min.commits",
        "reason": "",
    }
    # Each archived instant's requested, inflight and completed files are gone from .hoodie/.
    assert _timeline(base) == sorted(
        f"{t}.{suffix}" for t in commits[4:] for suffix in ("commit", "commit.requested", "inflight")
    )
    assert os.listdir(base / HOODIE / "archived") == [".commits_.archive.1_1-0-1"]
    assert _json(_lake("archive", str(base), *keep))["outcome"] == "NO_WORK"


# -- partition commit -----------------------------------------------------------------------------
def test_partition_commit(tmp_path: Path) -> None:
    base = tmp_path / "t"
    _, (c1, _c2) = _cow(base, 2)
    before = _tree(base)
    waiting = _json(_lake("partition-commit", str(base), "--partition", "a", "--delay", "1 d"), "now")
    why = waiting["waiting"]["a"]
    assert why.startswith("first write ") and " + delay 1 day, 0:00:00 is after now (" in why
    assert waiting["outcome"] == "NO_WORK" and waiting["committed"] == []
    assert waiting["partitions"]["a"] == {
        "decision": "WAITING",
        "partition_time": None,
        "first_write": c1,
        "writes": 2,
        "reason": why,
    }
    assert not (base / "a" / "_SUCCESS").exists()

    done = _json(_lake("partition-commit", str(base), "--partition", "a"), "now")
    assert done == {
        "outcome": "COMMITTED",
        "trigger": "process-time",
        "watermark": None,
        "policies": ["success-file"],
        "committed": ["a"],
        "waiting": {},
        "already_committed": [],
        "missing": [],
        "late_data": {},
        "partitions": {
            "a": {
                "decision": "DUE",
                "partition_time": None,
                "first_write": c1,
                "writes": 2,
                "reason": done["partitions"]["a"]["reason"],
            }
        },
    }
    assert (base / "a" / "_SUCCESS").is_file() and not (base / "b" / "_SUCCESS").exists()
    again = _json(_lake("partition-commit", str(base), "--partition", "a"), "now")
    assert (again["outcome"], again["committed"], again["already_committed"]) == ("NO_WORK", [], ["a"])

    before = _tree(base)
    missing, delay, policy, twice = lake_all(
        ["partition-commit", str(base), "--partition", "a", "--partition", "zz"],
        ["partition-commit", str(base), "--partition", "b", "--delay", "5 parsecs"],
        ["partition-commit", str(base), "--partition", "b", "--policy", "success-file,bogus"],
        ["partition-commit", str(base), "--partition", "b"]
        + ["--option", "sink.partition-commit.delay=1 d", "--option", "sink.partition-commit.delay=0 s"],
    )
    assert _error(twice) == (
        "--option sink.partition-commit.delay is given twice, as '1 d' and '0 s': give it once"
    )
    assert _error(missing) == f"{base}: partition(s) ['zz'] have no completed write; nothing was committed"
    assert _error(delay) == (
        "sink.partition-commit.delay='5 parsecs' is not a duration such as '0 s', '30 min', '1 h' or '1 d'"
    )
    assert _error(policy).startswith("sink.partition-commit.policy.kind: unknown policy 'bogus'")
    assert _tree(base) == before


# -- rollback and restore -------------------------------------------------------------------------
def test_rollback_and_restore(tmp_path: Path) -> None:
    base = tmp_path / "t"
    table, (c1, c2) = _cow(base, 2)
    files = _data_files(base)
    with pytest.raises(SimulatedCrash):  # base files of both partitions made, no commit
        write(crashing(table, 6), _batch(["k1", "k3"], 5, ["a", "b"]), "upsert")
    [failed] = table.timeline().pending
    left = _data_files(base) - files
    assert left == _written_at(_data_files(base), failed.timestamp) and len(left) == 2

    assert _error(_lake("rollback", str(base), "--force")) == (
        "--force needs --instant: name the completed commit to roll back"
    )
    out = _ok(_lake("rollback", str(base)))
    [rolled] = [i.timestamp for i in table.timeline().instants if i.action.value == "rollback"]
    assert out == f"rolled back commit {failed.timestamp} at {rolled}: 2 files deleted, 0 log files marked\n"
    assert _data_files(base) == files
    assert _ok(_lake("rollback", str(base))) == "NO_WORK\n"

    assert _ok(_lake("savepoint", "create", str(base), "--instant", c1)) == f"savepoint {c1}: 2 files kept\n"
    c3 = write(table, _batch(["k2"], 6, ["a"]), "upsert").instant
    before = _tree(base)
    assert _error(_lake("restore", str(base), "--savepoint", c2)) == (
        f"{base}: there is no savepoint at {c2} (savepoints: {c1})"
    )
    assert _tree(base) == before
    out = _ok(_lake("restore", str(base), "--savepoint", c1))
    [restored] = [i.timestamp for i in table.timeline().instants if i.action.value == "restore"]
    assert out == f"restored savepoint {c1} at {restored}: rolled back {c3}, {c2}\n"
    assert _data_files(base) == _written_at(files, c1)
    expected = sorted((k, 0, f"{k}@0") for k in ("k1", "k2", "k3", "k4"))
    assert _rows(read_snapshot(LakeTable.open(base))) == _hudi_rs(base) == expected
    assert _ok(_lake("restore", str(base), "--savepoint", c1)) == f"NO_WORK: nothing after savepoint {c1}\n"
