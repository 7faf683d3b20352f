"""Rollback: crash at every durable step of writes and rollbacks, recover as production does, and
check our reader == hudi-rs == a model; refusals that change nothing; Hudi's marker kinds; real tables."""

from __future__ import annotations

import datetime as dt
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
from crash_support import crashing, steps_of
from hudi import HudiTableBuilder
from savepoint_support import savepoint
from tree_digest import tree_digest

from airflow_lake_provider.lake.errors import HeartbeatError, RollbackError, StorageError, UnsafePathError
from airflow_lake_provider.lake.file_group.file_names import LogFileName
from airflow_lake_provider.lake.log_file.log_format import parse_log_bytes, rollback_command_block
from airflow_lake_provider.lake.storage import LocalStorage, SimulatedCrash
from airflow_lake_provider.lake.table.archival.executor import run_archival
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline import avro as timeline_avro
from airflow_lake_provider.lake.timeline import layout
from airflow_lake_provider.lake.timeline.instant import InstantClock
from airflow_lake_provider.lake.timeline.markers import Markers

COVERAGE: dict[str, set[int]] = {}
START = dt.datetime(2025, 6, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


def _clock() -> InstantClock:
    """Distinct, increasing instants (each call of now() a millisecond later)."""
    ticks = iter(range(10**6))
    return InstantClock(now=lambda: START + dt.timedelta(milliseconds=next(ticks)))


def _batch(rows: list[tuple[int, int, str]]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "ts": pa.array([r[1] for r in rows], pa.int64()),
            "city": pa.array(["a" if r[0] % 2 else "b" for r in rows], pa.string()),
            "v": pa.array([r[2] for r in rows], pa.string()),
        }
    )


# Table versions the version-neutral tests run on: 6, and 8 (Hudi 1.x: timeline layout 2, a new log
# file per deltacommit, which a rollback deletes instead of marking).
VERSIONS = [6, 8]


def _make(path: Path, kind: str, version: int = 6) -> LakeTable:
    return LakeTable.create(
        path,
        name="orders",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("city",),
        hive_style=True,
        clock=_clock(),
        table_version=version,
    )


def _timeline_dir(path: Path) -> Path:
    """Where the table's instant files are: ``.hoodie/`` (v6) or ``.hoodie/timeline/`` (v8/v9)."""
    v2 = path / ".hoodie" / "timeline"
    return v2 if v2.is_dir() else path / ".hoodie"


def _rows(table: pa.Table) -> dict[int, tuple[int, str]]:
    out = {}
    for r in table.to_pylist():
        assert r["id"] not in out, f"duplicate key {r['id']}"
        out[r["id"]] = (r["ts"], r["v"])
    return out


def _hudi(path: Path) -> pa.Table:
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    return pa.Table.from_batches(batches) if batches else pa.table({"id": [], "ts": [], "v": []})


def _check(path: Path, model: dict[int, tuple[int, str]]) -> None:
    """Ours == hudi-rs == model, and no instant is left pending."""
    table = LakeTable.open(path)
    assert _rows(read_snapshot(table)) == model
    assert _rows(_hudi(path)) == model
    assert [str(i) for i in table.timeline().pending] == []


FIRST = [(1, 10, "a1"), (2, 10, "b2"), (3, 10, "a3")]
SECOND = [(1, 20, "a1'"), (2, 20, "b2'"), (4, 20, "b4")]
DELETE = [(3, 30, "x")]
LATER = [(11, 40, "n11"), (13, 41, "n13"), (15, 42, "n15"), (17, 43, "n17")]  # new keys
# archive soon (a MOR table's delta commits are not kept for a count-based compaction trigger)
KEEP_ONE = {
    "hoodie.keep.min.commits": "1",
    "hoodie.keep.max.commits": "2",
    "hoodie.compact.inline.trigger.strategy": "TIME_ELAPSED",
}


def _apply(model: dict[int, tuple[int, str]], rows: list[tuple[int, int, str]], delete: bool = False) -> dict:
    out = dict(model)
    for k, ts, v in rows:
        if delete:
            out.pop(k, None)
        else:
            out[k] = (ts, v)
    return out


def _seed(path: Path, kind: str, version: int = 6) -> tuple[LakeTable, dict]:
    table = _make(path, kind, version)
    write(table, _batch(FIRST), "insert")
    model = _apply({}, FIRST)
    if kind == "mor":  # logs exist, so the crashed write appends log versions too
        write(table, _batch(SECOND), "upsert")
        model = _apply(model, SECOND)
    return table, model


def _count_steps(table: LakeTable, operation: Callable[[LakeTable], object]) -> int:
    probe = crashing(table)
    operation(probe)
    return len(steps_of(probe))


def _crashed_write(table: LakeTable, rows: list, op: str, after: int) -> tuple[bool, list[str]]:
    """Run a write with a crash after step ``after``: (committed before the crash, data files made)."""
    crashed = crashing(table, after)
    with pytest.raises(SimulatedCrash):
        write(crashed, _batch(rows), op)
    t = table.timeline()
    committed = bool(t.completed_commits) and t.completed_commits[-1].timestamp == t.instants[-1].timestamp
    made = [s.split(" ", 1)[1] for s in steps_of(crashed) if s.startswith("create ") and ".hoodie" not in s]
    return committed, [m for m in made if not m.endswith(".hoodie_partition_metadata")]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("recover", ["lake-rollback", "next-write"])
@pytest.mark.parametrize(
    ("kind", "op", "rows"),
    [
        ("cow", "upsert", SECOND),
        ("cow", "delete", DELETE),
        ("mor", "upsert", [(1, 30, "a1''"), (6, 30, "b6")]),
        ("mor", "delete", DELETE),
    ],
)
def test_write_crash_at_every_step_then_recover(
    tmp_path: Path, kind: str, op: str, rows: list, recover: str, version: int
) -> None:
    probe_table, model = _seed(tmp_path / "probe", kind, version)
    steps = _count_steps(probe_table, lambda t: write(t, _batch(rows), op))
    assert steps >= 6
    for k in range(1, steps + 1):
        path = tmp_path / f"k{k}"
        table, model = _seed(path, kind, version)
        committed, made = _crashed_write(table, rows, op, k)
        after = _apply(model, rows, delete=op == "delete")
        expected = after if committed else model
        # Readable right after the crash, exactly as before (or after, once the commit file exists).
        assert _rows(read_snapshot(LakeTable.open(path))) == expected
        reopened = LakeTable.open(path, clock=_clock())
        reopened.clock.next(after=reopened.timeline().latest_time)
        if recover == "lake-rollback":
            pending = [i.timestamp for i in reopened.timeline().pending]
            marked = sorted(m.relative_path for t in pending for m in Markers(reopened.storage).read(t))
            assert committed or set(made) <= set(marked)
            results = rollback(reopened)
            assert [r.target for r in results] == pending
            assert (pending == []) == committed
            # A complete rollback: every file the write marked is deleted (a marked file not made
            # yet too: a writer still running may make it), nothing else.
            assert sorted(f for r in results for f in r.deleted) == ([] if committed else marked)
            assert [r.marked for r in results] == [() for _ in results]
            _check(path, expected)
        else:
            write(reopened, _batch([(8, 1, "b8")]), "upsert")
            expected = _apply(expected, [(8, 1, "b8")])
            _check(path, expected)
        # Nothing the crashed write made is left behind, except what a commit made visible.
        assert committed or not any((path / m).exists() for m in made)
        leftovers = [f for f in _data_files(path) if not _visible_or_old(reopened, f)]
        assert leftovers == []
        COVERAGE.setdefault(f"write-v{version}-{kind}-{op}-{recover}", set()).add(k)


def _data_files(path: Path) -> list[str]:
    out = []
    for dirpath, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != ".hoodie"]
        out += [os.path.relpath(os.path.join(dirpath, f), path) for f in files if not f.startswith(".hoodie")]
    return sorted(out)


def _visible_or_old(table: LakeTable, rel: str) -> bool:
    """A data file of a completed instant (every file a rollback keeps)."""
    name = rel.rsplit("/", 1)[-1]
    timeline = LakeTable.open(table.base_path).timeline()
    times = {c.timestamp for c in timeline.completed_commits}
    if name.endswith(".parquet"):
        return name.rsplit("_", 1)[1].removesuffix(".parquet") in times
    return name.split("_")[1].split(".")[0] in times


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_rollback_crash_at_every_step_then_next_run_finishes(tmp_path: Path, kind: str, version: int) -> None:
    def failed_table(path: Path) -> tuple[LakeTable, dict]:
        table, model = _seed(path, kind, version)
        with pytest.raises(SimulatedCrash):  # a marker and its file written, no commit
            write(crashing(table, 4), _batch([(1, 40, "z"), (9, 40, "z9")]), "upsert")
        return LakeTable.open(path, clock=_clock()), model

    probe, _ = failed_table(tmp_path / "probe")
    probe.clock.next(after=probe.timeline().latest_time)
    steps = _count_steps(probe, rollback)
    assert steps >= 5
    for k in range(1, steps + 1):
        path = tmp_path / f"k{k}"
        table, model = failed_table(path)
        table.clock.next(after=table.timeline().latest_time)
        with pytest.raises(SimulatedCrash):
            rollback(crashing(table, k))
        assert _rows(read_snapshot(LakeTable.open(path))) == model  # readable mid-rollback
        rollbacks_before = len(list(_timeline_dir(path).glob("*.rollback.requested")))
        done_before = len(list(_timeline_dir(path).glob("*.rollback")))
        again = LakeTable.open(path, clock=_clock())
        again.clock.next(after=again.timeline().latest_time)
        results = rollback(again)
        # Finished from the stored plan when one was stored: never planned twice.
        assert len(list(_timeline_dir(path).glob("*.rollback.requested"))) == max(rollbacks_before, 1)
        if done_before:  # the crash came after the rollback completed: nothing left to do
            assert results == []
        else:
            assert len(results) == 1 and results[0].resumed == (rollbacks_before == 1)
        _check(path, model)
        assert [f for f in _data_files(path) if not _visible_or_old(again, f)] == []
        COVERAGE.setdefault(f"rollback-v{version}-{kind}", set()).add(k)


@pytest.mark.parametrize("version", VERSIONS)
def test_writer_error_after_instant_exists_undoes_it_without_a_trace(tmp_path: Path, version: int) -> None:
    """The one log file version it wrote, its markers and instant go; no rollback instant is left."""
    table, model = _seed(tmp_path / "t", "mor", version)
    before = tree_digest(tmp_path / "t")

    def boom(point: str) -> None:
        if point == "file":
            raise ValueError("disk on fire")

    with pytest.raises(ValueError, match="disk on fire"):
        write(table, _batch([(1, 50, "no")]), "upsert", fault=boom)
    _check(tmp_path / "t", model)
    assert tree_digest(tmp_path / "t") == before


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_a_crash_while_a_failed_write_is_undone_leaves_it_for_the_next_rollback(
    tmp_path: Path, kind: str, version: int
) -> None:
    """Killed after every durable step of the write and of its undo (its files, markers, inflight,
    requested, heartbeat): lake rollback finishes it, and the table reads as before it."""
    batch = _batch([(1, 50, "no"), (9, 50, "new")])  # a rewrite or log append, and an insert

    def boom(point: str) -> None:
        if point == "commit":  # every data file made
            raise ValueError("disk on fire")

    table, _ = _seed(tmp_path / "probe", kind, version)
    probe = crashing(table)
    with pytest.raises(ValueError):
        write(probe, batch, "upsert", fault=boom)
    steps = steps_of(probe)
    undo = [s for s in steps if s.startswith("delete")]
    assert len(undo) >= 5 and not [s for s in steps if ".rollback" in s], steps
    for k in range(1, len(steps) + 1):
        path = tmp_path / f"k{k}"
        table, model = _seed(path, kind, version)
        with pytest.raises(SimulatedCrash):
            write(crashing(table, k), batch, "upsert", fault=boom)
        rollback(table)
        _check(path, model)
        COVERAGE.setdefault(f"failed-write-undo-v{version}-{kind}", set()).add(k)


@pytest.mark.parametrize("version", VERSIONS)
def test_forced_rollback_of_latest_commit_and_refusals(tmp_path: Path, version: int) -> None:
    path = tmp_path / "t"
    table, model = _seed(path, "cow", version)
    write(table, _batch(DELETE), "delete")
    last = table.timeline().last_completed_commit.timestamp
    before = sorted(os.listdir(_timeline_dir(path)))
    with pytest.raises(RollbackError, match=rf"{last} is a completed commit; pass --force"):
        rollback(table, last)
    first = table.timeline().completed_commits[0].timestamp
    with pytest.raises(RollbackError, match=rf"{first} is not the latest completed commit"):
        rollback(table, first, force=True)
    with pytest.raises(RollbackError, match="there is no instant 20990101000000000"):
        rollback(table, "20990101000000000")
    assert sorted(os.listdir(_timeline_dir(path))) == before
    [result] = rollback(table, last, force=True)
    assert result.target == last and len(result.deleted) == 1
    _check(path, model)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_forced_rollback_crash_at_every_step_reads_before_or_with_the_commit(
    tmp_path: Path, kind: str, version: int
) -> None:
    """The commit is un-completed before any of its files goes: a crash at any step of a forced
    rollback reads as with the commit (not yet un-completed) or as before it, never a mix; the next
    run finishes the rollback it started."""
    rows = [(1, 50, "f1"), (9, 50, "z9")]  # an update and an insert

    def committed(path: Path) -> tuple[LakeTable, dict, str]:
        table, model = _seed(path, kind, version)
        write(table, _batch(rows), "upsert")
        return table, model, table.timeline().last_completed_commit.timestamp

    probe, _, last = committed(tmp_path / "probe")
    steps = _count_steps(probe, lambda t: rollback(t, last, force=True))
    assert steps >= 4
    reads_with = reads_before = 0
    for k in range(1, steps + 1):
        path = tmp_path / f"k{k}"
        table, before, last = committed(path)
        with_t = _apply(before, rows)
        with pytest.raises(SimulatedCrash):
            rollback(crashing(table, k), last, force=True)
        now = _rows(read_snapshot(LakeTable.open(path)))
        assert now in (with_t, before), f"crash at step {k} of {steps}: {now}"
        reads_with += now == with_t
        reads_before += now == before
        reopened = LakeTable.open(path, clock=_clock())
        reopened.clock.next(after=reopened.timeline().latest_time)
        results = rollback(reopened)  # resumes the rollback left pending, if the crash left one
        assert [r.target for r in results] in ([], [last])
        _check(path, before if results else now)  # none pending: not begun, or already complete
    assert reads_with and reads_before  # crashes on both sides of the un-completing step


@pytest.mark.parametrize("version", VERSIONS)
def test_lazy_policy_rolls_back_only_expired_heartbeats_and_names_garbage(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "t"
    table, model = _seed(path, "cow", version)
    lazy = {"hoodie.cleaner.policy.failed.writes": "LAZY"}
    with pytest.raises(SimulatedCrash):
        write(crashing(table, 3), _batch([(1, 60, "lazy")]), "upsert", options=lazy)
    [pending] = table.timeline().pending
    beat = path / ".hoodie" / ".heartbeat" / pending.timestamp
    assert beat.read_text().isdigit()  # a live heartbeat: not rolled back
    assert rollback(table, options=lazy) == []
    beat.write_text("garbage!")
    before = sorted(os.listdir(path / ".hoodie"))
    with pytest.raises(HeartbeatError, match=r"\.heartbeat/\d+: heartbeat file holds 'garbage!'"):
        rollback(table, options=lazy)
    assert sorted(os.listdir(path / ".hoodie")) == before
    beat.write_text("1")  # expired long ago
    assert [r.target for r in rollback(table, options=lazy)] == [pending.timestamp]
    assert not beat.exists()
    _check(path, model)
    # NEVER: nothing is rolled back without naming the instant.
    with pytest.raises(SimulatedCrash):
        write(
            crashing(table, 3),
            _batch([(1, 61, "never")]),
            "upsert",
            options={"hoodie.cleaner.policy.failed.writes": "NEVER"},
        )
    assert rollback(table, options={"hoodie.cleaner.policy.failed.writes": "NEVER"}) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_plan_naming_a_path_outside_the_table_is_refused_and_changes_nothing(
    tmp_path: Path, version: int
) -> None:
    path = tmp_path / "t"
    table, model = _seed(path, "cow", version)
    outside = tmp_path / "precious.parquet"
    outside.write_bytes(b"keep")
    with pytest.raises(SimulatedCrash):
        write(crashing(table, 3), _batch([(1, 60, "x")]), "upsert")
    [pending] = table.timeline().pending
    plan = {
        "instantToRollback": {"commitTime": pending.timestamp, "action": "commit"},
        "RollbackRequests": [
            {
                "partitionPath": "",
                "fileId": "f",
                "latestBaseInstant": None,
                "filesToBeDeleted": [str(outside)],
                "logBlocksToBeDeleted": None,
            }
        ],
        "version": 1,
    }
    (_timeline_dir(path) / "20990101000000000.rollback.requested").write_bytes(
        timeline_avro.write_avro(timeline_avro.ROLLBACK_PLAN, plan)
    )
    before = sorted(os.listdir(_timeline_dir(path)))
    with pytest.raises(UnsafePathError, match="precious.parquet"):
        rollback(table)
    assert outside.read_bytes() == b"keep"
    assert sorted(os.listdir(_timeline_dir(path))) == before


@pytest.mark.parametrize("version", VERSIONS)
def test_timeline_server_markers_and_no_markers_fallback(tmp_path: Path, version: int) -> None:
    for variant in ("server", "none"):
        path = tmp_path / variant
        table, model = _seed(path, "mor", version)
        with pytest.raises(SimulatedCrash):  # both files written, no commit
            write(crashing(table, 6), _batch([(1, 70, "m"), (11, 70, "n")]), "upsert")
        [pending] = table.timeline().pending
        temp = path / ".hoodie" / ".temp" / pending.timestamp
        markers = sorted(str(p.relative_to(temp)) for p in temp.rglob("*.marker.*"))
        assert markers
        shutil.rmtree(temp)
        if variant == "server":
            temp.mkdir(parents=True)
            (temp / "MARKERS.type").write_text("TIMELINE_SERVER_BASED")
            (temp / "MARKERS0").write_text("\n".join(markers[:1]) + "\n")
            (temp / "MARKERS1").write_text("\n".join(markers[1:]) + "\n")
        [result] = rollback(LakeTable.open(path, clock=_clock()))
        # Every file the markers named (and the listing fallback finds the same ones).
        assert sorted(result.deleted) == sorted(m.split(".marker.")[0] for m in markers)
        _check(path, model)
        assert [f for f in _data_files(path) if not _visible_or_old(table, f)] == []


# Every test table with at least two completed writes (the others hold none or one).
ONE_OR_NO_COMMIT = {"cow_v6_empty", "morparquet_v6_empty"} | {
    f"{k}_v6_simplekeygen_hivestyle_no_metafields" for k in ("cow", "morparquet")
}


@pytest.mark.parametrize(
    "name",
    sorted(
        p.stem
        for p in (Path(__file__).parents[4] / "data" / "hudi-tables").glob("*.zip")
        if p.stem not in ONE_OR_NO_COMMIT
    ),
)
def test_real_table_last_instant_rolled_back_reads_previous_snapshot(
    hudi_table_zip: Callable[[str], Path], name: str
) -> None:
    path = hudi_table_zip(name)
    table = LakeTable.open(path, clock=_clock())
    commits = table.timeline().completed_commits
    assert len(commits) >= 2
    last, previous = commits[-1], commits[-2]
    prev_rows = _hudi_as_of(path, previous.timestamp)
    (path / ".hoodie" / layout.file_name(last)).unlink()  # the write "failed" before its completed file
    table.clock.next(after=table.timeline().latest_time)
    [result] = rollback(table)
    assert result.target == last.timestamp
    assert _sorted_rows(_hudi(path)) == prev_rows
    assert _sorted_rows(read_snapshot(LakeTable.open(path))) == prev_rows
    assert LakeTable.open(path).timeline().pending == []


def _hudi_as_of(path: Path, instant: str) -> list:
    from hudi import HudiReadOptions

    batches = (
        HudiTableBuilder.from_base_uri(str(path))
        .build()
        .read(HudiReadOptions().with_as_of_timestamp(instant))
    )
    return _sorted_rows(pa.Table.from_batches(batches))


def _sorted_rows(table: pa.Table) -> list:
    cols = [c for c in table.column_names if c not in ("_hoodie_commit_seqno", "_hoodie_file_name")]
    return sorted(tuple(str(r[c]) for c in cols) for r in table.select(cols).to_pylist())


def _services_table(path: Path, kind: str) -> tuple[LakeTable, dict]:
    """Several versions of the same file groups (a clean has files to delete; a MOR compaction logs)."""
    table = _make(path, kind)
    model: dict = {}
    for n, rows in enumerate([FIRST, SECOND, [(1, 30 + 0, "a1-3"), (2, 30, "b2-3")], [(3, 40, "a3-4")]]):
        write(table, _batch(rows), "insert" if n == 0 else "upsert")
        model = _apply(model, rows)
    return table, model


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_clean_crash_at_every_step_then_next_run_finishes(tmp_path: Path, kind: str) -> None:
    from airflow_lake_provider.lake.services.clean.executor import run_clean
    from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction

    options = {"hoodie.cleaner.commits.retained": "1"}

    def cleanable(path: Path) -> tuple[LakeTable, dict]:
        table, model = _services_table(path, kind)
        if kind == "mor":  # a compacted slice makes the older slice (base and logs) cleanable
            schedule_compaction(table, {"hoodie.compact.inline.max.delta.commits": "1"})
            execute_compaction(table)
            write(table, _batch([(5, 80, "a5")]), "upsert")
            model = _apply(model, [(5, 80, "a5")])
        return table, model

    probe, _ = cleanable(tmp_path / "probe")
    steps = _count_steps(probe, lambda t: run_clean(t, options))
    assert steps >= 4
    for k in range(1, steps + 1):
        path = tmp_path / f"k{k}"
        table, model = cleanable(path)
        with pytest.raises(SimulatedCrash):
            run_clean(crashing(table, k), options)
        _check_allow_pending(path, model)
        run_clean(LakeTable.open(path, clock=_clock()), options)
        _check(path, model)
        COVERAGE.setdefault(f"clean-{kind}", set()).add(k)


def test_compaction_execution_crash_at_every_step_then_next_run_finishes(tmp_path: Path) -> None:
    from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction

    due = {"hoodie.compact.inline.max.delta.commits": "1"}

    def scheduled(path: Path) -> tuple[LakeTable, dict]:
        table, model = _services_table(path, "mor")
        assert schedule_compaction(table, due).instant
        return table, model

    probe, _ = scheduled(tmp_path / "probe")
    steps = _count_steps(probe, execute_compaction)
    assert steps >= 4
    for k in range(1, steps + 1):
        path = tmp_path / f"k{k}"
        table, model = scheduled(path)
        with pytest.raises(SimulatedCrash):
            execute_compaction(crashing(table, k))
        assert _rows(read_snapshot(LakeTable.open(path))) == model
        again = LakeTable.open(path, clock=_clock())
        if again.timeline().pending_compactions():
            execute_compaction(again)
        _check(path, model)
        COVERAGE.setdefault("compaction-execute", set()).add(k)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_restore_crash_at_every_step_then_next_run_finishes(tmp_path: Path, kind: str, version: int) -> None:
    from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction
    from airflow_lake_provider.lake.services.restore import restore

    def restorable(path: Path) -> tuple[LakeTable, dict, str]:
        table = _make(path, kind, version)
        write(table, _batch(FIRST), "insert")
        point = write(table, _batch(SECOND), "upsert").instant
        savepoint(table, point)
        model = _apply(_apply({}, FIRST), SECOND)
        write(table, _batch([(1, 50, "after"), (7, 50, "a7")]), "upsert")
        # A completed compaction after the savepoint is undone too.
        if kind == "mor":
            schedule_compaction(table, {"hoodie.compact.inline.max.delta.commits": "1"})
            execute_compaction(table)
        write(table, _batch([(2, 60, "x")]), "delete")
        with pytest.raises(SimulatedCrash):  # and a failed write
            write(crashing(table, 3), _batch([(9, 70, "a9")]), "upsert")
        return LakeTable.open(path, clock=_clock()), model, point

    probe, _, point = restorable(tmp_path / "probe")
    steps = _count_steps(probe, lambda t: restore(t, point))
    assert steps >= 10
    for k in range(1, steps + 1):
        path = tmp_path / f"k{k}"
        table, model, point = restorable(path)
        with pytest.raises(SimulatedCrash):
            restore(crashing(table, k), point)
        again = LakeTable.open(path, clock=_clock())
        result = restore(again, point)
        assert result.resumed or result.instant is None
        _check(path, model)
        names = sorted(os.listdir(_timeline_dir(path)))
        assert len([n for n in names if n.endswith(".restore")]) == 1
        COVERAGE.setdefault(f"restore-v{version}-{kind}", set()).add(k)


@pytest.mark.parametrize("version", VERSIONS)
def test_restore_refusals_change_nothing(tmp_path: Path, version: int) -> None:
    from airflow_lake_provider.lake.services.restore import restore

    path = tmp_path / "t"
    table, _ = _seed(path, "cow", version)
    before = sorted(os.listdir(_timeline_dir(path)))
    with pytest.raises(
        RollbackError, match=r"there is no savepoint at 20250601120000000 \(savepoints: none\)"
    ):
        restore(table, "20250601120000000")
    assert sorted(os.listdir(_timeline_dir(path))) == before
    # A restore killed half way: writers refuse until it is finished; another savepoint's restore too.
    first = table.timeline().completed_commits[0].timestamp
    savepoint(table, first)
    write(table, _batch(SECOND), "upsert")
    with pytest.raises(SimulatedCrash):
        restore(crashing(table, 2), first)
    before = sorted(os.listdir(_timeline_dir(path)))
    with pytest.raises(RollbackError, match=r"restore \d+ is pending; finish it before writing"):
        write(LakeTable.open(path), _batch([(1, 99, "no")]), "upsert")
    assert sorted(os.listdir(_timeline_dir(path))) == before
    assert restore(LakeTable.open(path, clock=_clock()), first).resumed
    _check(path, _apply({}, FIRST))


def _check_allow_pending(path: Path, model: dict) -> None:
    """Mid-service: ours and hudi-rs read the model (a pending clean does not change reads)."""
    assert _rows(read_snapshot(LakeTable.open(path))) == model
    assert _rows(_hudi(path)) == model


def test_clean_names_the_failed_write_holding_it_back(tmp_path: Path) -> None:
    from airflow_lake_provider.lake.services.clean.executor import run_clean

    path = tmp_path / "t"
    table = _make(path, "cow")
    never = {"hoodie.cleaner.policy.failed.writes": "NEVER"}
    write(table, _batch(FIRST), "insert")
    with pytest.raises(SimulatedCrash):
        write(crashing(table, 3), _batch([(1, 11, "failed")]), "upsert")
    [failed] = table.timeline().pending
    for n in range(3):
        write(table, _batch([(1, 20 + n, f"v{n}")]), "upsert", options=never)
    options = {"hoodie.cleaner.commits.retained": "1"}
    held = run_clean(table, options)
    assert held.held_back_by == (failed.timestamp,)
    assert held.reason.endswith(
        f"failed or running write(s) {failed.timestamp} (commit); if they failed, roll them back with: "
        f"lake rollback {table.uri}"
    )
    assert held.deleted_files == 0
    rollback(table, failed.timestamp)
    freed = run_clean(table, options)
    assert freed.held_back_by == () and freed.deleted_files == 2  # a1's older versions
    _check(path, {1: (22, "v2"), 2: (10, "b2"), 3: (10, "a3")})


@pytest.mark.parametrize("version", VERSIONS)
def test_a_rollback_leaves_no_markers_nor_heartbeat_of_its_target(tmp_path: Path, version: int) -> None:
    path = tmp_path / "t"
    table, model = _seed(path, "mor", version)
    with pytest.raises(SimulatedCrash):  # both files written, no commit
        write(crashing(table, 6), _batch([(1, 70, "m"), (11, 70, "n")]), "upsert")
    [pending] = table.timeline().pending
    temp = path / ".hoodie" / ".temp" / pending.timestamp
    beat = path / ".hoodie" / ".heartbeat" / pending.timestamp
    beat.parent.mkdir(exist_ok=True)
    beat.write_text("0")  # a killed writer's last beat, long expired
    assert list(temp.rglob("*.marker.*"))
    [result] = rollback(LakeTable.open(path, clock=_clock()))
    assert result.target == pending.timestamp
    assert not temp.exists() and not beat.exists()
    assert sorted(os.listdir(path / ".hoodie" / ".heartbeat")) == []
    _check(path, model)


def test_failed_append_to_a_shared_log_file_gets_a_rollback_block(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A Hudi writer appends to an existing log file: the rollback keeps the file (other instants'
    blocks) and appends a command block; ours and hudi-rs then skip the failed instant's block."""
    path = tmp_path / "t"
    table, model = _seed(path, "mor")  # insert, then an upsert: log files of a committed instant
    with pytest.raises(SimulatedCrash):  # its one log file written, no commit
        write(crashing(table, 4), _batch([(1, 90, "failed")]), "upsert")
    [pending] = table.timeline().pending
    temp = path / ".hoodie" / ".temp" / pending.timestamp
    [marker] = list(temp.rglob("*.marker.APPEND"))
    own = path / marker.relative_to(temp).as_posix().split(".marker.")[0]
    # Make it an append, as Hudi's writers do: the block moves to the end of the previous log version.
    shared = sorted(
        p for p in own.parent.iterdir() if p.name.startswith(own.name.split(".log.")[0]) and p != own
    )[-1]
    committed_bytes = shared.read_bytes()
    shared.write_bytes(committed_bytes + own.read_bytes())
    own.unlink()
    marker.rename(marker.with_name(shared.name + ".marker.APPEND"))
    assert _rows(read_snapshot(LakeTable.open(path))) == model  # the block is not committed: unseen
    # A crash right after the rollback block is appended: finishing the plan does not append twice.
    again = tmp_path / "again"
    shutil.copytree(path, again)
    probe = crashing(LakeTable.open(tmp_path / "again", clock=_clock()))
    rollback(probe)
    append_step = next(n for n, step in enumerate(steps_of(probe), 1) if step.startswith("append "))
    shutil.rmtree(again)
    shutil.copytree(path, again)
    with pytest.raises(SimulatedCrash):
        rollback(crashing(LakeTable.open(again, clock=_clock()), append_step))
    torn = tmp_path / "torn"
    shutil.copytree(again, torn)
    # A log the stored plan names, gone before the block was appended: nothing left to mark.
    gone = tmp_path / "gone"
    shutil.copytree(path, gone)
    with pytest.raises(SimulatedCrash):
        rollback(crashing(LakeTable.open(gone, clock=_clock()), append_step - 1))
    (gone / shared.relative_to(path)).unlink()
    [skipped] = rollback(LakeTable.open(gone, clock=_clock()))
    assert skipped.resumed and (skipped.deleted, skipped.marked) == ((), ())
    [resumed] = rollback(LakeTable.open(again, clock=_clock()))
    assert resumed.resumed
    again_shared = again / shared.relative_to(path)
    assert [b.block_type.name for b in parse_log_bytes(again_shared.read_bytes(), "x")].count("COMMAND") == 1
    # The size recorded is the file's: the block appended before the crash is counted once.
    metadata = timeline_avro.read_avro((again / ".hoodie" / f"{resumed.instant}.rollback").read_bytes(), "x")
    assert metadata["partitionMetadata"]["city=a"]["rollbackLogFiles"] == {
        str(again_shared): again_shared.stat().st_size
    }
    _check(again, model)
    # Its log torn since (cut inside the block appended): the torn block is skipped with a warning
    # naming the log, the block appended again, and both readers read the table as before.
    torn_shared = torn / shared.relative_to(path)
    torn_shared.write_bytes(torn_shared.read_bytes()[:-7])
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        [finished] = rollback(LakeTable.open(torn, clock=_clock()))
    assert finished.resumed and any(str(torn_shared) in r.getMessage() for r in caplog.records)
    _check(torn, model)
    [result] = rollback(LakeTable.open(path, clock=_clock()))
    rel = shared.relative_to(path).as_posix()
    assert (result.deleted, result.marked) == ((), (rel,))
    blocks = parse_log_bytes(shared.read_bytes(), str(shared))
    assert shared.read_bytes().startswith(committed_bytes)
    assert [(b.block_type.name, b.instant_time, b.target_instant_time) for b in blocks][-2:] == [
        ("AVRO_DATA", pending.timestamp, None),
        ("COMMAND", result.instant, pending.timestamp),
    ]
    _check(path, model)
    # Finishing the same plan again (a crash after the append) does not append a second block.
    metadata = timeline_avro.read_avro((path / ".hoodie" / f"{result.instant}.rollback").read_bytes(), "x")
    assert metadata["partitionMetadata"]["city=a"]["rollbackLogFiles"] == {str(shared): shared.stat().st_size}
    # Once archival moves the active timeline past the failed instant, its time reads as archived
    # (committed): the command block alone hides its block in the shared log, for ours and hudi-rs.
    for row in LATER:
        write(table, _batch([row]), "upsert")
    # A late executor of the failed write left its marker again: archival deletes what such markers
    # name only when it holds the failed instant's data alone, and the shared log holds committed data.
    late_marker = marker.with_name(shared.name + ".marker.APPEND")
    late_marker.parent.mkdir(parents=True, exist_ok=True)
    late_marker.write_bytes(b"")
    archived = run_archival(LakeTable.open(path), KEEP_ONE)
    active = LakeTable.open(path).timeline()
    assert archived.archived and active.instants[0].timestamp > pending.timestamp
    assert active.is_committed(pending.timestamp)
    assert shared.read_bytes().startswith(committed_bytes) and not late_marker.exists()
    _check(path, _apply(model, LATER))


def _rolled_back_append(path: Path) -> dict:
    """A MOR table whose write of key 1 crashed and was rolled back (its own log deleted): the table,
    model, instant, its marker's path, the failed block's bytes, the rollback's instant and the log
    the failed log followed (a committed log of the same file group)."""
    table, model = _seed(path, "mor")
    case = _rolled_back_append_to({"table": table, "model": model}, path, (1, 90, "failed"))
    own = case.pop("own")
    shared = sorted(p for p in own.parent.iterdir() if p.name.startswith(own.name.split(".log.")[0]))[-1]
    return {**case, "shared": shared}


def _late_executor(case: dict, log_file: Path) -> None:
    """The killed write's executor appends its block to ``log_file`` and leaves its marker."""
    with log_file.open("ab") as f:
        f.write(case["block"])
    case["marker"].parent.mkdir(parents=True, exist_ok=True)
    case["marker"].with_name(log_file.name + ".marker.APPEND").write_bytes(b"")


def _archive_past(case: dict, path: Path) -> None:
    for row in LATER:
        write(case["table"], _batch([row]), "upsert")
    assert run_archival(LakeTable.open(path), KEEP_ONE).archived
    assert LakeTable.open(path).timeline().is_committed(case["t"])


def _block_list(log_file: Path) -> list[tuple[str, str | None, str | None]]:
    blocks = parse_log_bytes(log_file.read_bytes(), str(log_file))
    return [(b.block_type.name, b.instant_time, b.target_instant_time) for b in blocks]


def test_archival_hides_blocks_a_late_executor_appended_after_the_rollback(tmp_path: Path) -> None:
    """A killed write's executor appends its block to a shared log after the rollback listed the
    files (as Hudi's writers append) and leaves its marker. Archival, which makes the instant read as
    committed, first appends a rollback block there: the row stays hidden for ours and hudi-rs."""
    path = tmp_path / "t"
    case = _rolled_back_append(path)
    shared, t, r = case["shared"], case["t"], case["rollback"]
    committed = _block_list(shared)
    _late_executor(case, shared)
    _check(path, case["model"])  # not committed: unseen
    _archive_past(case, path)
    _check(path, _apply(case["model"], LATER))
    assert _block_list(shared) == [*committed, ("AVRO_DATA", t, None), ("COMMAND", r, t)]
    # Run again: the log is hidden already, nothing more is appended.
    size = shared.stat().st_size
    write(case["table"], _batch([(19, 44, "n19")]), "upsert")
    run_archival(LakeTable.open(path), KEEP_ONE)
    assert shared.stat().st_size == size


def test_archival_hides_a_late_block_logged_after_the_rollback_block(tmp_path: Path) -> None:
    """Hudi's readers skip only the blocks before a rollback block: a late block of the same instant
    after it needs another (hudi-rs read the failed row again)."""
    path = tmp_path / "t"
    case = _rolled_back_append(path)
    shared, t, r = case["shared"], case["t"], case["rollback"]
    committed = _block_list(shared)
    with shared.open("ab") as f:
        f.write(case["block"] + rollback_command_block(r, t))  # as the rollback had marked it
    _late_executor(case, shared)  # ... and then the late block
    _check(path, case["model"])
    _archive_past(case, path)
    _check(path, _apply(case["model"], LATER))
    assert _block_list(shared) == [*committed, *[("AVRO_DATA", t, None), ("COMMAND", r, t)] * 2]


def test_archival_keeps_a_log_holding_another_rollbacks_block(tmp_path: Path) -> None:
    """A log holding only an older rollback's block (Hudi rolled over to a new log version), to which
    a later failed write's executor appended: deleting it with the failed block would bring back the
    older rolled-back row; archival marks it instead."""
    path = tmp_path / "t"
    first = _rolled_back_append(path)
    older, t0, r0 = first["shared"], first["t"], first["rollback"]
    with older.open("ab") as f:
        f.write(first["block"])  # t0's block in the committed log ...
    name = LogFileName.parse(older.name)
    assert name is not None
    hiding = older.with_name(older.name.replace(f".log.{name.version}_", f".log.{name.version + 1}_"))
    hiding.write_bytes(rollback_command_block(r0, t0))  # ... hidden by r0's block in the next version
    _check(path, first["model"])
    second = _rolled_back_append_to(first, path, (1, 91, "second failure"))
    _late_executor(second, hiding)
    _archive_past(second, path)
    _check(path, _apply(first["model"], LATER))
    assert _block_list(hiding) == [
        ("COMMAND", r0, t0),
        ("AVRO_DATA", second["t"], None),
        ("COMMAND", second["rollback"], second["t"]),
    ]


def test_archival_ignores_markers_naming_files_outside_the_table_or_under_hoodie(tmp_path: Path) -> None:
    """Damaged markers of the failed write (a MARKERS file line leading out, a marker under
    .hoodie/): archival neither appends to nor deletes what they name, and archives."""
    path = tmp_path / "t"
    case = _rolled_back_append(path)
    shared = case["shared"]
    content = shared.read_bytes() + case["block"]  # committed blocks and the failed one: "unmarked"
    outside = tmp_path / "outside" / shared.name
    under_hoodie = path / ".hoodie" / "x" / shared.name
    for victim in (outside, under_hoodie):
        victim.parent.mkdir()
        victim.write_bytes(content)
    temp = path / ".hoodie" / ".temp" / case["t"]
    (temp / ".hoodie" / "x").mkdir(parents=True)
    (temp / ".hoodie" / "x" / f"{shared.name}.marker.APPEND").write_bytes(b"")
    (temp / "MARKERS0").write_text(f"../outside/{shared.name}.marker.APPEND\n")
    _archive_past(case, path)
    assert outside.read_bytes() == content and under_hoodie.read_bytes() == content
    _check(path, _apply(case["model"], LATER))


def test_archival_that_cannot_mark_a_shared_log_waits_and_says_not_to_delete_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t"
    case = _rolled_back_append(path)
    shared, t = case["shared"], case["t"]
    _late_executor(case, shared)
    for row in LATER:
        write(case["table"], _batch([row]), "upsert")
    content = shared.read_bytes()

    def refuse(self: object, rel: str, data: bytes) -> None:
        raise StorageError(f"{rel}: no appends here")

    monkeypatch.setattr(LocalStorage, "append", refuse)
    refused = run_archival(LakeTable.open(path), KEEP_ONE)
    assert refused.outcome.value == "NO_WORK" and shared.read_bytes() == content
    uri = LakeTable.open(path).storage.uri(shared.relative_to(path).as_posix())
    assert (
        f"could not be cleaned up: {uri} holds other blocks too and needs a rollback block of {t} "
        f"({shared.relative_to(path).as_posix()}: no appends here): do not delete it;"
    ) in refused.reason
    _check(path, _apply(case["model"], LATER))
    monkeypatch.undo()
    _archive_past(case | {"table": LakeTable.open(path)}, path)
    _check(path, _apply(case["model"], LATER + LATER))


def _rolled_back_append_to(case: dict, path: Path, row: tuple[int, int, str]) -> dict:
    """Another write of ``case``'s table crashed and rolled back, as in :func:`_rolled_back_append`."""
    table = case["table"]
    with pytest.raises(SimulatedCrash):
        write(crashing(table, 4), _batch([row]), "upsert")
    [pending] = table.timeline().pending
    temp = path / ".hoodie" / ".temp" / pending.timestamp
    [marker] = list(temp.rglob("*.marker.APPEND"))
    own = path / marker.relative_to(temp).as_posix().split(".marker.")[0]
    block = own.read_bytes()
    [result] = rollback(LakeTable.open(path, clock=_clock()))
    assert result.deleted == (own.relative_to(path).as_posix(),) and not temp.exists()
    return {
        **case,
        "t": pending.timestamp,
        "marker": marker,
        "block": block,
        "rollback": result.instant,
        "own": own,
    }


def test_completed_compaction_later_writes_depend_on_is_refused(tmp_path: Path) -> None:
    from airflow_lake_provider.lake.services.compaction.executor import execute_compaction
    from airflow_lake_provider.lake.services.compaction.scheduler import schedule_compaction

    path = tmp_path / "t"
    table, model = _seed(path, "mor")
    c = schedule_compaction(table, {"hoodie.compact.inline.max.delta.commits": "1"}).instant
    execute_compaction(table)
    with pytest.raises(SimulatedCrash):  # a write against the compacted slice, pending
        write(
            crashing(table, 4),
            _batch([(1, 90, "later")]),
            "upsert",
            options={"hoodie.cleaner.policy.failed.writes": "NEVER"},
        )
    [pending] = table.timeline().pending
    before = sorted(os.listdir(path / ".hoodie"))
    with pytest.raises(RollbackError, match=rf"{pending.timestamp} started after the compaction {c}"):
        rollback(table, c, force=True)
    assert sorted(os.listdir(path / ".hoodie")) == before
    rollback(table, pending.timestamp)
    [undone] = rollback(table, c, force=True)  # nothing depends on it any more
    assert undone.target == c
    _check(path, model)


def test_zz_coverage_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Prints operations x crash points exercised (run with -s to see it)."""
    total = sum(len(v) for v in COVERAGE.values())
    line = f"crash coverage: {len(COVERAGE)} operations x crash points = {total}: " + ", ".join(
        f"{k}={len(v)}" for k, v in sorted(COVERAGE.items())
    )
    with capsys.disabled():
        print("\n" + line)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_stored_plan_with_hudi_file_uris_deletes_exactly_its_files(tmp_path: Path, version: int) -> None:
    """Hudi's plans spell local paths ``file:/abs/...``: they name the table's own files."""
    path = tmp_path / "t"
    table, model = _seed(path, "cow", version)
    with pytest.raises(SimulatedCrash):
        write(crashing(table, 4), _batch(SECOND), "upsert")
    with pytest.raises(SimulatedCrash):  # the plan is stored, nothing else done
        rollback(crashing(table, 1))
    [requested] = [i for i in table.timeline().pending if i.action.value == "rollback"]
    plan_file = path / table.layout.instant_path(requested)
    record = timeline_avro.read_avro(plan_file.read_bytes(), "plan")
    targets = [f for r in record["RollbackRequests"] for f in r["filesToBeDeleted"]]
    assert targets and all(f.startswith(str(path)) for f in targets)
    for r in record["RollbackRequests"]:
        r["filesToBeDeleted"] = [f"file:{f}" for f in r["filesToBeDeleted"]]
    plan_file.write_bytes(timeline_avro.write_avro(timeline_avro.ROLLBACK_PLAN, record))
    rollback(table)
    assert [f for f in targets if Path(f).exists()] == []
    _check(path, model)


def test_an_interrupted_rollback_of_a_table_written_elsewhere_is_finished(hudi_table_zip) -> None:
    """A Hudi table copied from where Spark wrote it (its plans name /opt/data/...): an interrupted
    rollback names the same files by partition and file name, and is finished here."""
    path = hudi_table_zip("morparquet_v6_nonpartitioned_rollback")
    expected = _sorted_rows(read_snapshot(LakeTable.open(path)))
    (path / ".hoodie" / "20250126040936578.rollback").unlink()  # the rollback died before completing
    table = LakeTable.open(path)
    assert [i.timestamp for i in table.timeline().pending] == ["20250126040936578"]
    rollback(table)
    assert table.timeline().pending == []
    assert _sorted_rows(read_snapshot(table)) == expected
    hudi = pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read())
    ours = read_snapshot(table)
    cols = ["_hoodie_record_key", "_hoodie_commit_time", "longField"]
    assert sorted(hudi.select(cols).to_pylist(), key=str) == sorted(ours.select(cols).to_pylist(), key=str)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_failed_deletes_are_named_in_the_rollback_metadata(tmp_path: Path, kind: str, version: int) -> None:
    """A file that cannot be deleted (here: a folder where the base file was) goes to
    ``failedDeleteFiles``; one already gone counts as deleted; the rollback completes."""
    path = tmp_path / "t"
    table, model = _seed(path, kind, version)
    rows = [(5, 40, "a5"), (7, 40, "a7"), (6, 40, "b6")]  # new keys: one new base file per partition

    def die_before_commit(point: str) -> None:
        if point == "commit":
            raise SimulatedCrash("killed after writing every file")

    with pytest.raises(SimulatedCrash):
        write(table, _batch(rows), "insert", fault=die_before_commit)
    [pending] = table.timeline().pending
    made = [m.relative_path for m in Markers(table.storage).read(pending.timestamp)]
    assert len(made) == 2
    stuck, gone = sorted(made)
    os.remove(path / stuck)
    os.mkdir(path / stuck)  # unlink of a folder fails: not "already gone"
    (path / stuck / "keep").write_text("x")
    with pytest.raises(SimulatedCrash):  # the plan is stored, nothing deleted yet
        rollback(crashing(table, 1))
    os.remove(path / gone)  # gone before the resumed run deletes it
    [result] = rollback(table)
    assert result.resumed and result.failed == (stuck,) and result.deleted == (gone,)
    timeline = LakeTable.open(path).timeline()
    record = timeline.avro_record(timeline.instants[-1])
    partitions = record["partitionMetadata"]
    uri = table.storage.uri
    assert {p: m["failedDeleteFiles"] for p, m in partitions.items()} == {
        stuck.rpartition("/")[0]: [uri(stuck)],
        gone.rpartition("/")[0]: [],
    }
    assert {p: m["successDeleteFiles"] for p, m in partitions.items()} == {
        stuck.rpartition("/")[0]: [],
        gone.rpartition("/")[0]: [uri(gone)],
    }
    assert record["totalFilesDeleted"] == 1
    assert _rows(read_snapshot(LakeTable.open(path))) == model
    shutil.rmtree(path / stuck)  # hudi-rs cannot list a folder named like a base file
    _check(path, model)
