"""Archival of table versions 8 and 9: the archived instants go to the LSM history as Hudi 1.x's
archiver writes it, and every read stays the same.

hudi-rs does not read the LSM history, so it judges a read as of an archived instant on a copy of
the table taken before the archival (its snapshot of the archived table is checked as well).
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet
import pytest
from crash_support import crashing, steps_of
from hudi import HudiReadOptions, HudiTableBuilder

from airflow_lake_provider.lake import cli
from airflow_lake_provider.lake.errors import TableConfigError
from airflow_lake_provider.lake.services.compaction.executor import run_compaction
from airflow_lake_provider.lake.services.compaction.result import Outcome as CompactionOutcome
from airflow_lake_provider.lake.services.inspect import instant_details
from airflow_lake_provider.lake.storage import LocalStorage, SimulatedCrash
from airflow_lake_provider.lake.table.archival.executor import Outcome, run_archival
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.history.reader import History
from airflow_lake_provider.lake.timeline.instant import InstantClock
from tests.tree_digest import tree_digest
from tests.unit.lake.table.test_reader_1x import _assert_same
from tests.unit.lake.table.test_reader_1x import _hudi_rs as _hudi_rs_1x

# No count-based compaction trigger: on MOR archival then keeps no delta commits for one (see
# test_mor_archival_keeps_the_delta_commits_the_compaction_trigger_counts).
KEEP = {
    "hoodie.keep.min.commits": "3",
    "hoodie.keep.max.commits": "5",
    "hoodie.compact.inline.trigger.strategy": "TIME_ELAPSED",
}
START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _clock() -> InstantClock:
    ticks = iter(range(10**6))
    return InstantClock(now=lambda: START + dt.timedelta(milliseconds=next(ticks)))


def _table(path: Path, kind: str, commits: int, version: int = 8) -> tuple[LakeTable, list[str]]:
    """``commits`` upserts of one row each: four keys over two partitions (updates in logs on MOR)."""
    table = LakeTable.create(
        path,
        name="t",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        table_version=version,
        clock=_clock(),
    )
    options = {"hoodie.archive.automatic": "false"}
    instants = [write(table, _row(i), "upsert", options=options).instant for i in range(commits)]
    return table, instants


def _row(i: int) -> pa.Table:
    return pa.table({"id": [f"k{i % 4}"], "ts": pa.array([i], pa.int64()), "p": [f"p{i % 2}"], "v": [i]})


def _rows(t: pa.Table) -> list[tuple]:
    return sorted(zip(t["p"].to_pylist(), t["id"].to_pylist(), t["ts"].to_pylist(), strict=True))


def _ours(path: Path, as_of: str | None = None) -> list[tuple]:
    return _rows(read_snapshot(LakeTable.open(path), as_of=as_of))


def _hudi(path: Path, as_of: str | None = None) -> list[tuple]:
    table = HudiTableBuilder.from_base_uri(str(path)).build()
    batches = table.read(HudiReadOptions().with_as_of_timestamp(as_of)) if as_of else table.read()
    return _rows(pa.Table.from_batches(batches))


def _timeline_files(path: Path) -> list[str]:
    return sorted(p.name for p in (path / ".hoodie" / "timeline").iterdir() if p.is_file())


def _history_files(path: Path) -> list[str]:
    return sorted(p.name for p in (path / ".hoodie" / "timeline" / "history").iterdir())


@pytest.mark.parametrize("version", [8, 9])
@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_archives_into_the_lsm_history_and_every_read_stays_the_same(
    tmp_path: Path, kind: str, version: int, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "t"
    _, instants = _table(path, kind, 8, version)
    original = tmp_path / "original"
    shutil.copytree(path, original)
    action = "commit" if kind == "cow" else "deltacommit"
    completed = {
        n.split("_")[0]: (n.split("_")[1].split(".")[0], (path / ".hoodie" / "timeline" / n).read_bytes())
        for n in _timeline_files(path)
        if "_" in n
    }
    result = run_archival(LakeTable.open(path), KEEP)
    assert result.outcome is Outcome.ARCHIVED
    assert result.archived == tuple(instants[:5])
    assert (result.keep_from, result.limited_by) == (instants[5], "hoodie.keep.min.commits")
    name = f"{instants[0]}_{instants[4]}_0.parquet"
    assert result.archive_file == name and result.actions == {action: 5}
    inflight = ".inflight" if kind == "cow" else f".{action}.inflight"
    assert _timeline_files(path) == sorted(
        f
        for t in instants[5:]
        for f in (f"{t}_{completed[t][0]}.{action}", f"{t}{inflight}", f"{t}.{action}.requested")
    )
    assert _history_files(path) == [name, "_version_", "manifest_1"]
    # The history's records: each instant's completion time and the bytes of its completed file.
    entries = History(LocalStorage(path), ".hoodie/timeline/history").entries_between(None, None)
    assert [(e.instant.instant_time, e.instant.completion_time, e.instant.action) for e in entries] == [
        (t, completed[t][0], action) for t in instants[:5]
    ]
    assert [e.metadata for e in entries] == [completed[t][1] for t in instants[:5]]
    assert [e.plan for e in entries] == [None] * 5

    expected = _ours(original)
    assert _ours(path) == expected == _hudi(path) == _hudi(original)
    for as_of in instants:  # archived and active instants alike
        assert _ours(path, as_of) == _hudi(original, as_of), as_of
    assert cli.main(["timeline", str(path), "--archived", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [
        (r["time"], r["completion_time"], r["action"], r["archived"])
        for r in listed
        if r["state"] == "COMPLETED"
    ] == [(t, completed[t][0], action, n < 5) for n, t in enumerate(instants)]
    again = run_archival(LakeTable.open(path), KEEP)
    assert (again.outcome, again.reason) == (Outcome.NO_WORK, "3 completed commits, at most 5 kept")


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_lake_show_of_an_archived_instant_reads_it_from_the_history(
    tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """What ``lake show`` says of each archived instant is what it said while it was active, marked
    archived; a time the history does not hold either is one error line naming both places."""
    path = tmp_path / "t"
    _, instants = _table(path, kind, 8)
    before = {t: instant_details(LakeTable.open(path), t) for t in instants}
    texts = {}
    for t in instants[:5]:
        assert cli.main(["show", str(path), t]) == 0
        texts[t] = capsys.readouterr().out
    run_archival(LakeTable.open(path), KEEP)
    for t in instants[:5]:
        assert instant_details(LakeTable.open(path), t) == {**before[t], "archived": True}
        assert cli.main(["show", str(path), t]) == 0
        first, rest = texts[t].split("\n", 1)
        assert capsys.readouterr().out == f"{first} (archived: from the LSM history)\n{rest}"
    missing = "20251231235959999"  # before the first instant (2026-01-01)
    assert cli.main(["show", str(path), missing]) == 1
    assert capsys.readouterr().err == (
        f"lake: error: {path}: no instant {missing} on the active timeline nor in its LSM history "
        "(older than its first instant: never written, or rolled back)\n"
    )


def _corrupt(path: Path, part: str) -> Path:
    """Overwrite the history's parquet file ("file") or its manifest with bytes of neither."""
    (damaged,) = [
        p
        for p in (path / ".hoodie" / "timeline" / "history").iterdir()
        if p.name.endswith(".parquet" if part == "file" else "manifest_1")
    ]
    damaged.write_bytes(b"garbage")
    return damaged


def _lake_read(capsys: pytest.CaptureFixture[str], path: Path) -> tuple[int, list[tuple], str]:
    out = path.parent / "out.parquet"
    code = cli.main(["read", str(path), "--output", str(out)])
    err = capsys.readouterr().err
    rows = _rows(pa.parquet.read_table(out)) if code == 0 else []
    out.unlink(missing_ok=True)
    return code, rows, err


@pytest.mark.parametrize("part", ["file", "manifest"])
def test_a_snapshot_read_that_needs_no_archived_instant_never_opens_a_damaged_history(
    tmp_path: Path, part: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """No compaction: every log's slice is the latest base file before it whatever its completion
    time, so the archived deltacommits' completion times are never asked for."""
    path = tmp_path / "t"
    _table(path, "mor", 8)
    expected = _ours(path)
    assert run_archival(LakeTable.open(path), KEEP).archived
    _corrupt(path, part)
    assert _lake_read(capsys, path) == (0, expected, "")
    assert expected == _hudi(path)


@pytest.mark.parametrize("part", ["file", "manifest"])
def test_a_snapshot_read_that_needs_a_damaged_history_names_the_file_and_what_to_do(
    tmp_path: Path, part: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A compaction's base file later than archived deltacommits whose logs are still there (no
    clean): each log's slice depends on its completion time, which only the history holds."""
    path = tmp_path / "t"
    table, instants = _table(path, "mor", 6)  # 4 inserts, then 2 updates in logs
    scheduled, executed = run_compaction(table, force=True)
    assert executed is not None and executed.outcome is CompactionOutcome.COMPLETED
    options = {"hoodie.archive.automatic": "false"}
    instants += [write(table, _row(i), "upsert", options=options).instant for i in range(6, 10)]
    archived = run_archival(LakeTable.open(path), KEEP).archived
    assert archived == (*instants[:6], scheduled.instant, instants[6])
    damaged = _corrupt(path, part)
    code, rows, err = _lake_read(capsys, path)
    what = (
        "not a readable LSM timeline file: Parquet file size is 7 bytes, smaller than the minimum "
        "file footer (8 bytes)"
        if part == "file"
        else "not an LSM timeline manifest: Expecting value: line 1 column 1 (char 0)"
    )
    assert (code, rows) == (1, [])
    assert err == (
        f"lake: error: {damaged}: {what}; this read needs the LSM history ({damaged.parent}) for the "
        f"completion time of archived deltacommit {instants[4]}, whose log file a later base file may "
        "take into its slice: restore the damaged file from a backup or replica (Hudi's readers need "
        "it too); reads that need no archived instant do not open the history\n"
    )


def test_full_history_levels_are_compacted_and_cleaned_after_an_archival(tmp_path: Path) -> None:
    """Twelve archivals of two instants each: the tenth level-0 file makes Hudi's writer compact the
    ten into one level-1 file; the cleaner keeps the newest three snapshots (four in a run that
    compacted), so the replaced files go two archivals later. Reads as of every instant stay those
    of the un-archived copy."""
    path = tmp_path / "t"
    table = LakeTable.create(
        path, name="t", table_type="mor", record_key_fields=("id",), precombine_field="ts",
        partition_fields=("p",), table_version=8, clock=_clock(),
    )  # fmt: skip
    off = {"hoodie.archive.automatic": "false"}
    instants = [write(table, _row(i), "upsert", options=off).instant for i in range(26)]
    original = tmp_path / "original"
    shutil.copytree(path, original)
    level0 = [f"{instants[2 * n]}_{instants[2 * n + 1]}_0.parquet" for n in range(12)]
    level1 = f"{instants[0]}_{instants[19]}_1.parquet"
    for n in range(12):  # two more commits archived per run
        active = len(LakeTable.open(path).timeline().completed_commits)
        keep = {
            **KEEP,
            "hoodie.keep.min.commits": str(active - 2),
            "hoodie.keep.max.commits": str(active - 1),
        }
        result = run_archival(LakeTable.open(path), keep)
        assert (result.archived, result.archive_file) == (tuple(instants[2 * n : 2 * n + 2]), level0[n])
        if n == 10:  # compacted by the tenth, still named by the snapshots kept
            assert _history_files(path) == sorted(
                [*level0[:11], level1, "_version_", *(f"manifest_{v}" for v in (10, 11, 12))]
            )
    assert _history_files(path) == sorted(
        [level1, *level0[10:], "_version_", "manifest_11", "manifest_12", "manifest_13"]
    )
    assert (path / ".hoodie/timeline/history/_version_").read_text() == "13"
    history = History(LocalStorage(path), ".hoodie/timeline/history")
    assert [f.name for f in history.snapshot.files] == [level1, *level0[10:]]
    assert [i.instant_time for i in history.instants()] == instants[:24]
    assert _ours(path) == _hudi(path) == _hudi(original)
    for as_of in instants:
        assert _ours(path, as_of) == _hudi(original, as_of), as_of


def _archival(table: LakeTable) -> object:
    return run_archival(table, KEEP)


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_a_crash_at_every_durable_step_leaves_each_instant_active_or_archived_and_a_rerun_finishes(
    tmp_path: Path, kind: str
) -> None:
    """After a crash at any step every instant is on the active timeline or in the history (or
    both), every read (snapshot, and as of each instant) is the un-archived table's, and the next
    archival leaves what an uninterrupted one leaves: each instant in the history once."""
    seed, instants = _table(tmp_path / "seed", kind, 8)
    expected = {t: _ours(seed.base_path, t) for t in instants}
    snapshot = _ours(seed.base_path)
    clean = tmp_path / "clean"
    shutil.copytree(seed.base_path, clean)
    probe = crashing(LakeTable.open(clean))
    run_archival(probe, KEEP)
    steps = steps_of(probe)
    assert [s for s in steps if "/history/" in s][:3] == [
        f"create .hoodie/timeline/history/{instants[0]}_{instants[4]}_0.parquet",
        "create .hoodie/timeline/history/manifest_1",
        "write .hoodie/timeline/history/_version_",
    ]
    assert steps.index("write .hoodie/timeline/history/_version_") < min(
        n for n, s in enumerate(steps) if s.startswith("delete .hoodie/timeline/")
    )
    final = (_timeline_files(clean), _history_files(clean))
    assert final[1] == [f"{instants[0]}_{instants[4]}_0.parquet", "_version_", "manifest_1"]
    for after in range(1, len(steps) + 1):
        path = tmp_path / f"crash-{after}"
        shutil.copytree(seed.base_path, path)
        with pytest.raises(SimulatedCrash):
            run_archival(crashing(LakeTable.open(path), after), KEEP)
        timeline = LakeTable.open(path).timeline()
        active = {i.timestamp for i in timeline.instants}
        archived = {i.timestamp for i in timeline.history.instants()} if timeline.history else set()
        assert set(instants) <= active | archived, (after, steps[after - 1])
        assert all(i.is_completed for i in timeline.instants), (after, steps[after - 1])
        assert _ours(path) == snapshot == _hudi(path), (after, steps[after - 1])
        for as_of in instants:
            assert _ours(path, as_of) == expected[as_of], (after, as_of)
        rerun = run_archival(LakeTable.open(path), KEEP)
        assert rerun.outcome in (Outcome.ARCHIVED, Outcome.NO_WORK), after
        # (A crash right after the first manifest leaves no _version_: readers, Hudi's too, then
        # take the greatest manifest, which names the complete file, so the rerun appends nothing.)
        files = _history_files(path)
        if "_version_" not in files:
            assert steps[after - 1] == "create .hoodie/timeline/history/manifest_1", after
            files = sorted([*files, "_version_"])
        assert (_timeline_files(path), files) == final, (after, steps[after - 1])
        history = History(LocalStorage(path), ".hoodie/timeline/history")
        rows = [
            t for f in history.snapshot.files for t in history.read_file(f).column("instantTime").to_pylist()
        ]
        assert sorted(rows) == instants[:5], after  # each archived instant once
        assert _ours(path) == snapshot, after


# -- Spark-written tables (tests/data/hudi-tables-1x) ----------------------------------------------
SPARK_TABLES = [
    "cow_v9_txns_simple_nometa",
    "mor_avro_v9_txns_simple_nometa",
    "cow_v9_txns_complex_nometa",
    "mor_avro_v9_txns_complex_nometa",
]


@pytest.mark.parametrize("name", SPARK_TABLES)
def test_archival_of_a_spark_written_table_reads_as_hudi_rs_reads_the_original(
    name: str, hudi_table_zip: Callable[[str], Path]
) -> None:
    original = hudi_table_zip(name)
    path = original.parent / f"{name}-archived"
    shutil.copytree(original, path)
    table = LakeTable.open(path)
    commits = [i.timestamp for i in table.timeline().completed_commits]
    result = run_archival(table, {"hoodie.keep.min.commits": "1", "hoodie.keep.max.commits": "2"})
    assert result.outcome is Outcome.ARCHIVED and result.archived, result.reason
    after = LakeTable.open(path)
    assert after.timeline().instants[0].timestamp == result.keep_from
    for as_of in [None, *commits]:
        _assert_same(read_snapshot(after, as_of), _hudi_rs_1x(original, as_of), name, after, as_of)
    _assert_same(read_snapshot(after), _hudi_rs_1x(path, None), name, after, None)


def test_a_spark_written_table_with_a_metadata_table_is_refused_then_archived_after_the_drop(
    hudi_table_zip: Callable[[str], Path],
) -> None:
    name = "mdt_basic_mor_avro_v8_nonpartitioned"
    original = hudi_table_zip(name)
    path = original.parent / f"{name}-archived"
    shutil.copytree(original, path)
    keep = {"hoodie.keep.min.commits": "1", "hoodie.keep.max.commits": "2"}
    before = tree_digest(path)
    with pytest.raises(TableConfigError, match="metadata table"):  # the refuse policy
        run_archival(LakeTable.open(path), {**keep, "lake.metadata-table.maintain": "false"})
    assert tree_digest(path) == before
    table = LakeTable.open(path)
    commits = [i.timestamp for i in table.timeline().completed_commits]
    result = run_archival(table, {**keep, "hoodie.metadata.enable": "false"})
    assert result.outcome is Outcome.ARCHIVED and result.archived, result.reason
    assert not (path / ".hoodie" / "metadata").exists()
    after = LakeTable.open(path)
    for as_of in [None, *commits]:
        _assert_same(read_snapshot(after, as_of), _hudi_rs_1x(original, as_of), name, after, as_of)
    _assert_same(read_snapshot(after), _hudi_rs_1x(path, None), name, after, None)


def test_a_crash_at_every_step_of_an_archival_that_compacts_the_history(tmp_path: Path) -> None:
    """The tenth archival (nine level-0 files before it) also compacts level 0 into level 1 and
    cleans: a crash at any of its steps leaves every instant readable (active or archived) and every
    read as before, and the rerun ends where an uninterrupted run ends."""
    seed, instants = _table(tmp_path / "seed", "mor", 23)

    def two_more(path: Path) -> dict[str, str]:
        """Options that archive the two oldest active commits."""
        active = len(LakeTable.open(path).timeline().completed_commits)
        return {
            **KEEP,
            "hoodie.keep.min.commits": str(active - 2),
            "hoodie.keep.max.commits": str(active - 1),
        }

    for n in range(9):  # nine archivals of two instants each
        assert run_archival(LakeTable.open(seed.base_path), two_more(seed.base_path)).archived == tuple(
            instants[2 * n : 2 * n + 2]
        )
    assert len([n for n in _history_files(seed.base_path) if n.endswith("_0.parquet")]) == 9
    keep = two_more(seed.base_path)  # archives instants 18 and 19, then compacts
    expected = {t: _ours(seed.base_path, t) for t in instants}
    snapshot = _ours(seed.base_path)
    clean = tmp_path / "clean"
    shutil.copytree(seed.base_path, clean)
    probe = crashing(LakeTable.open(clean))
    assert run_archival(probe, keep).archived == (instants[18], instants[19])
    steps = steps_of(probe)
    level1 = f"{instants[0]}_{instants[19]}_1.parquet"
    assert f"create .hoodie/timeline/history/{level1}" in steps
    final = (_timeline_files(clean), _history_files(clean))
    in_force = [f.name for f in History(LocalStorage(clean), ".hoodie/timeline/history").snapshot.files]
    assert in_force == [level1]
    for after in range(1, len(steps) + 1):
        path = tmp_path / f"crash-{after}"
        shutil.copytree(seed.base_path, path)
        with pytest.raises(SimulatedCrash):
            run_archival(crashing(LakeTable.open(path), after), keep)
        timeline = LakeTable.open(path).timeline()
        assert timeline.history is not None
        archived = {i.timestamp for i in timeline.history.instants()}
        assert set(instants) <= {i.timestamp for i in timeline.instants} | archived, (after, steps[after - 1])
        assert _ours(path) == snapshot, (after, steps[after - 1])
        for as_of in instants[::3]:
            assert _ours(path, as_of) == expected[as_of], (after, as_of, steps[after - 1])
        run_archival(LakeTable.open(path), keep)
        history = History(LocalStorage(path), ".hoodie/timeline/history")
        assert [i.instant_time for i in history.instants()] == instants[:20], after
        # The snapshot in force is the uninterrupted run's; a crash between the compaction's
        # publication and the cleaning leaves older manifests and the files only they name, which
        # the cleaner of the next archival removes (Hudi's writer cleans only after archiving too).
        assert _timeline_files(path) == final[0], (after, steps[after - 1])
        assert [f.name for f in history.snapshot.files] == in_force, (after, steps[after - 1])
        assert set(final[1]) <= set(_history_files(path)), (after, steps[after - 1])
        if _history_files(path) != final[1]:
            assert steps[after - 1].startswith(("write .hoodie/timeline/history/_version_", "delete ")), after
        assert _ours(path) == snapshot, after
    assert [s.split(" ")[0] for s in steps].count("create") == 4, steps  # L0, manifest, L1, manifest
