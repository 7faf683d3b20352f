"""Timeline archival: what is archived and what stops it, the archive file, reads before and after."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake import cli
from airflow_lake_provider.lake.errors import ArchivalConfigError, InstantArchivedError, TableConfigError
from airflow_lake_provider.lake.log_file.log_format import rollback_command_block
from airflow_lake_provider.lake.log_file.scanner import read_log_blocks
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.restore import restore
from airflow_lake_provider.lake.services.savepoint import create_savepoint, savepoints
from airflow_lake_provider.lake.storage import LocalStorage
from airflow_lake_provider.lake.table.archival.executor import Outcome, run_archival
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.archived import decode_archive_block
from airflow_lake_provider.lake.timeline.instant import Action
from tests.unit.lake.table.rollback.test_written import _archive_past, _compacted_then_upserted

# No count-based compaction trigger: on MOR archival then keeps no delta commits for one (see
# test_mor_archival_keeps_the_delta_commits_the_compaction_trigger_counts).
KEEP = {
    "hoodie.keep.min.commits": "3",
    "hoodie.keep.max.commits": "5",
    "hoodie.compact.inline.trigger.strategy": "TIME_ELAPSED",
}


VERSIONS = pytest.mark.parametrize("version", [6, 8])


def _table(tmp_path: Path, kind: str, commits: int, version: int = 6) -> tuple[LakeTable, list[str]]:
    table = LakeTable.create(
        tmp_path / kind,
        name="t",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        table_version=version,
    )
    instants = []
    for i in range(commits):
        batch = pa.table({"id": [f"k{i % 4}"], "ts": pa.array([i], pa.int64()), "p": [f"p{i % 2}"], "v": [i]})
        instants.append(write(table, batch, "upsert").instant)
    return table, instants


def _rows(table: LakeTable, as_of: str | None = None) -> list[tuple]:
    return _rows_of(read_snapshot(table, as_of=as_of))


def _hudi_rows(table: LakeTable) -> list[tuple]:
    return _rows_of(
        pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(table.base_path)).build().read())
    )


def _rows_of(t: pa.Table) -> list[tuple]:
    return sorted(zip(t["p"].to_pylist(), t["id"].to_pylist(), t["ts"].to_pylist(), strict=True))


def _active(table: LakeTable) -> list[str]:
    """The files of the active timeline's folder (``.hoodie/``, or ``.hoodie/timeline/`` on v8)."""
    folder = table.base_path / table.layout.folder
    return sorted(p.name for p in folder.iterdir() if p.is_file())


def _nothing_archived(table: LakeTable) -> bool:
    folder = table.base_path / (table.layout.history_folder or ".hoodie/archived")
    return not folder.exists() or not any(folder.iterdir())


def _archived_entries(table: LakeTable) -> list[dict]:
    folder = table.base_path / ".hoodie" / "archived"
    return [
        entry
        for name in sorted(p.name for p in folder.iterdir())
        for block in read_log_blocks(LocalStorage(folder), name)
        for entry in decode_archive_block(block)
    ]


@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_archives_down_to_min_commits_and_reads_stay_the_same(tmp_path: Path, kind: str) -> None:
    table, instants = _table(tmp_path, kind, 8)
    before = _rows(table)
    commit_json = {
        t: json.loads((table.base_path / ".hoodie" / f"{t}.{_action(kind)}").read_bytes()) for t in instants
    }
    result = run_archival(table, KEEP)
    assert result.outcome is Outcome.ARCHIVED
    assert result.archived == tuple(instants[:5])
    assert result.keep_from == instants[5] and result.limited_by == "hoodie.keep.min.commits"
    assert result.archive_file == ".commits_.archive.1_1-0-1"
    # v6 names: a commit's inflight file is "<t>.inflight", a deltacommit's "<t>.deltacommit.inflight".
    inflight = ".inflight" if kind == "cow" else ".deltacommit.inflight"
    kept = [
        f"{t}{s}"
        for t in instants[5:]
        for s in (f".{_action(kind)}", inflight, f".{_action(kind)}.requested")
    ]
    assert _active(table) == sorted([*kept, "hoodie.properties"])
    assert _rows(table) == before == _hudi_rows(table)
    entries = _archived_entries(table)
    assert [(e["commitTime"], e["actionType"], e["actionState"]) for e in entries] == [
        (t, _action(kind), "COMPLETED") for t in instants[:5]
    ]
    for entry in entries:  # the commit metadata, as Java archives it: the same write stats
        stats = entry["hoodieCommitMetadata"]["partitionToWriteStats"]
        expected = commit_json[entry["commitTime"]]["partitionToWriteStats"]
        assert {p: [s["path"] for s in v] for p, v in stats.items()} == {
            p: [s["path"] for s in v] for p, v in expected.items()
        }
    assert run_archival(table, KEEP).outcome is Outcome.NO_WORK  # 3 left: at most 5 kept


def _action(kind: str) -> str:
    return "commit" if kind == "cow" else "deltacommit"


@VERSIONS
def test_nothing_is_archived_up_to_max_commits(tmp_path: Path, version: int) -> None:
    table, _ = _table(tmp_path, "cow", 5, version)
    before = _active(table)
    result = run_archival(table, KEEP)
    assert (result.outcome, result.reason) == (Outcome.NO_WORK, "5 completed commits, at most 5 kept")
    assert _active(table) == before
    assert _nothing_archived(table)


def test_a_pending_write_stops_archival_at_its_position(tmp_path: Path) -> None:
    table, instants = _table(tmp_path, "mor", 8)
    pending = table.store.create_requested(_between(instants[2], instants[3]), Action.DELTACOMMIT)
    result = run_archival(table, KEEP)
    assert result.archived == tuple(instants[:3])
    assert result.limited_by == f"pending deltacommit {pending.timestamp}"


def test_v8_keeps_the_last_commit_before_a_pending_write_as_hudi_1x_does(tmp_path: Path) -> None:
    """Hudi 1.x's ``TimelineArchiverV2``: the greatest completed commit before the earliest pending
    write stays active, so files the write leaves after a later rollback never predate the active
    timeline (such files would count as committed)."""
    table, instants = _table(tmp_path, "mor", 8, 8)
    # a write that died after its requested file
    pending = table.store.create_requested(_between(instants[2], instants[3]), Action.DELTACOMMIT)
    result = run_archival(table, KEEP)
    assert result.archived == tuple(instants[:2])
    assert result.keep_from == instants[2]
    assert result.limited_by == f"the last commit before pending deltacommit {pending.timestamp}"
    assert [i.timestamp for i in table.timeline().instants] == sorted([*instants[2:], pending.timestamp])


def _upsert(table: LakeTable, i: int) -> str:
    batch = pa.table({"id": [f"k{i % 4}"], "ts": pa.array([i], pa.int64()), "p": [f"p{i % 2}"], "v": [i]})
    return write(table, batch, "upsert").instant


COUNTED = "the delta commits the compaction trigger counts"


@VERSIONS
@pytest.mark.parametrize(
    ("trigger", "deltas", "archived", "limited_by"),
    [
        # 8 delta commits, no compaction: the newest 6 stay (Hudi: the oldest instant to retain is the
        # (8 - 6 + 1)th delta commit).
        ("NUM_COMMITS", 6, 2, f"{COUNTED} (NUM_COMMITS, hoodie.compact.inline.max.delta.commits=6)"),
        ("NUM_AND_TIME", 6, 2, f"{COUNTED} (NUM_AND_TIME, hoodie.compact.inline.max.delta.commits=6)"),
        # fewer than the trigger needs: the first delta commit stays, nothing goes
        ("NUM_COMMITS", 9, 0, f"{COUNTED} (NUM_COMMITS, hoodie.compact.inline.max.delta.commits=9)"),
        # a trigger that counts no delta commits keeps none
        ("TIME_ELAPSED", 6, 5, "hoodie.keep.min.commits"),
    ],
)
def test_mor_archival_keeps_the_delta_commits_the_compaction_trigger_counts(
    tmp_path: Path, version: int, trigger: str, deltas: int, archived: int, limited_by: str
) -> None:
    table, instants = _table(tmp_path, "mor", 8, version)
    options = {
        **KEEP,
        "hoodie.compact.inline.trigger.strategy": trigger,
        "hoodie.compact.inline.max.delta.commits": str(deltas),
    }
    result = run_archival(table, options)
    assert result.archived == tuple(instants[:archived])
    assert (result.keep_from, result.limited_by) == (instants[archived], limited_by)
    assert [i.timestamp for i in table.timeline().instants] == instants[archived:]


@VERSIONS
def test_after_mor_archival_a_num_commits_compaction_is_due_when_hudis_would_be(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: int
) -> None:
    """keep.min.commits (2) < max.delta.commits (4): archival keeps the last compaction and the 3
    delta commits after it, so the 4th makes a compaction due, as on Hudi (4 since the last one).
    Before, it kept 2 commits and the trigger counted 3 after the 4th: not due."""
    table, before = _table(tmp_path, "mor", 6, version)  # 4 keys: updates from the 5th on
    path = str(table.base_path)
    assert cli.main(["compact", path, "--mode", "run", "--force"]) == 0
    compaction = json.loads(capsys.readouterr().out)["schedule"]["instant"]
    after = [_upsert(table, i) for i in range(6, 9)]
    options = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "3"}
    due = ["--option", "hoodie.compact.inline.max.delta.commits=4"]
    args = [f"{k}={v}" for k, v in options.items()]
    assert cli.main(["archive", path, "--option", args[0], "--option", args[1], *due]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["first_archived"], summary["last_archived"]) == (before[0], before[5])
    assert summary["active_timeline_starts_at"] == compaction
    assert summary["limited_by"] == f"{COUNTED} (NUM_COMMITS, hoodie.compact.inline.max.delta.commits=4)"
    assert [i.timestamp for i in table.timeline().instants] == [compaction, *after]
    assert cli.main(["compact", path, "--mode", "schedule", *due]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "NO_WORK"  # 3 since the compaction
    _upsert(table, 9)
    assert cli.main(["compact", path, "--mode", "schedule", *due]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"] == "SCHEDULED"


@VERSIONS
def test_a_savepoint_stops_archival(tmp_path: Path, version: int) -> None:
    table, instants = _table(tmp_path, "cow", 8, version)
    create_savepoint(table, instants[1])
    result = run_archival(table, KEEP)
    assert result.archived == (instants[0],)
    assert result.limited_by == f"savepoint {instants[1]}"


@VERSIONS
def test_lake_archive_that_a_savepoint_stops_entirely_names_the_savepoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: int
) -> None:
    table, instants = _table(tmp_path, "cow", 7, version)
    create_savepoint(table, instants[0])
    before = _active(table)
    keep = ["--option", "hoodie.keep.min.commits=3", "--option", "hoodie.keep.max.commits=5"]
    assert cli.main(["archive", str(table.base_path), *keep]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["outcome"], summary["archived_instants"]) == ("NO_WORK", 0)
    assert summary["active_timeline_starts_at"] == instants[0]
    assert summary["limited_by"] == f"savepoint {instants[0]}"
    assert summary["reason"] == (
        f"7 completed commits, at most 5 kept; nothing older than {instants[0]} may go "
        f"(limited by savepoint {instants[0]})"
    )
    assert _active(table) == before and _nothing_archived(table)


@VERSIONS
def test_archival_never_passes_the_last_cleans_earliest_retained_commit(tmp_path: Path, version: int) -> None:
    table = LakeTable.create(
        tmp_path / "t",
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        table_version=version,
    )
    instants = [
        write(
            table, pa.table({"id": ["k"], "ts": pa.array([i], pa.int64()), "p": ["x"], "v": [i]}), "upsert"
        ).instant
        for i in range(8)
    ]
    cleaned = run_clean(table, {"hoodie.cleaner.commits.retained": "6"})
    earliest = cleaned.plan.earliest_instant_to_retain.timestamp
    assert earliest == instants[2]
    result = run_archival(table, KEEP)
    assert result.archived == tuple(instants[:2])
    assert result.limited_by == "the earliest commit the last clean retained"
    assert _rows(table) == _hudi_rows(table)


def test_time_travel_to_an_archived_instant_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table, instants = _table(tmp_path, "cow", 8)
    expected = _rows(table, instants[6])
    run_archival(table, KEEP)
    with pytest.raises(
        InstantArchivedError,
        match=f"cannot read as of {instants[1]}: the timeline up to it is archived; the earliest "
        f"instant that can still be read is {instants[5]}",
    ):
        read_snapshot(table, as_of=instants[1])
    assert _rows(table, instants[6]) == expected
    assert (
        cli.main(
            ["read", str(table.base_path), "--output", str(tmp_path / "o.parquet"), "--as-of", instants[0]]
        )
        == 1
    )
    assert "the timeline up to it is archived" in capsys.readouterr().err


def test_an_interrupted_archival_is_finished_by_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, instants = _table(tmp_path, "mor", 8)
    expected = _rows(table)
    real_delete = LocalStorage.delete
    calls = {"n": 0}

    def dies_after_four(self: LocalStorage, rel: str) -> bool:
        calls["n"] += 1
        if calls["n"] > 4:
            raise OSError("killed")
        return real_delete(self, rel)

    monkeypatch.setattr(LocalStorage, "delete", dies_after_four)
    with pytest.raises(OSError, match="killed"):
        run_archival(table, KEEP)
    monkeypatch.setattr(LocalStorage, "delete", real_delete)
    timeline = table.timeline()
    assert all(i.is_completed for i in timeline.instants)  # nothing looks pending half way
    assert _rows(table) == expected == _hudi_rows(table)
    again = run_archival(table, KEEP)
    assert again.archived == tuple(instants[1:5]) and again.archive_file == ".commits_.archive.2_1-0-1"
    assert _rows(table) == expected == _hudi_rows(table)
    assert [e["commitTime"] for e in _archived_entries(table)] == [*instants[:5], *instants[1:5]]


@VERSIONS
def test_bad_options_change_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str], version: int) -> None:
    table, _ = _table(tmp_path, "cow", 8, version)
    before = _active(table)
    with pytest.raises(
        ArchivalConfigError, match="hoodie.keep.max.commits=3 must be greater than hoodie.keep.min.commits=3"
    ):
        run_archival(table, {"hoodie.keep.min.commits": "3", "hoodie.keep.max.commits": "3"})
    assert cli.main(["archive", str(table.base_path), "--option", "hoodie.keep.min.commits=x"]) == 1
    assert capsys.readouterr().err.strip() == "lake: error: hoodie.keep.min.commits='x' is not a whole number"
    assert _active(table) == before


@VERSIONS
def test_cli_archive_prints_the_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: int
) -> None:
    table, instants = _table(tmp_path, "cow", 7, version)
    args = [
        "archive",
        str(table.base_path),
        "--option",
        "hoodie.keep.min.commits=3",
        "--option",
        "hoodie.keep.max.commits=5",
    ]
    assert cli.main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary | {"duration_seconds": 0} == {
        "outcome": "ARCHIVED",
        "archived_instants": 4,
        "first_archived": instants[0],
        "last_archived": instants[3],
        "actions": {"commit": 4},
        "archive_file": (
            ".commits_.archive.1_1-0-1" if version == 6 else f"{instants[0]}_{instants[3]}_0.parquet"
        ),
        "active_timeline_starts_at": instants[4],
        "limited_by": "hoodie.keep.min.commits",
        "duration_seconds": 0,
        "reason": "",
    }


def _between(a: str, b: str) -> str:
    """An instant time strictly between two (millisecond) instant times."""
    middle = (int(a) + int(b)) // 2
    assert int(a) < middle < int(b), (a, b)
    return str(middle)


def _auto_table(tmp_path: Path, version: int = 6) -> LakeTable:
    return LakeTable.create(
        tmp_path / "auto",
        name="t",
        table_type="mor",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        table_version=version,
    )


def _one_row(i: int) -> pa.Table:
    return pa.table({"id": [f"k{i % 4}"], "ts": pa.array([i], pa.int64()), "p": [f"p{i % 2}"], "v": [i]})


@VERSIONS
def test_writes_archive_automatically_as_hudi_does(tmp_path: Path, version: int) -> None:
    table = _auto_table(tmp_path, version)
    results = [write(table, _one_row(i), "upsert", options=KEEP) for i in range(8)]
    # Commit 6 makes 6 > keep.max.commits (5): archived down to keep.min.commits (3).
    assert [r.archived for r in results[:5]] == [()] * 5
    assert results[5].archived == tuple(r.instant for r in results[:3])
    assert results[6].archived == results[7].archived == ()
    completed = [i.timestamp for i in table.timeline().completed_commits]
    assert completed == [r.instant for r in results[3:]]
    assert (
        _rows(table)
        == _hudi_rows(table)
        == [("p0", "k0", 4), ("p0", "k2", 6), ("p1", "k1", 5), ("p1", "k3", 7)]
    )


@VERSIONS
def test_automatic_archival_can_be_turned_off(tmp_path: Path, version: int) -> None:
    table = _auto_table(tmp_path, version)
    options = {**KEEP, "hoodie.archive.automatic": "false"}
    results = [write(table, _one_row(i), "upsert", options=options) for i in range(8)]
    assert all(r.archived == () for r in results)
    assert len(table.timeline().completed_commits) == 8
    assert _nothing_archived(table)


@pytest.mark.parametrize(
    "options",
    [
        {"hoodie.keep.min.commits": "5", "hoodie.keep.max.commits": "5"},
        {"hoodie.archive.automatic": "sometimes"},
    ],
)
@VERSIONS
def test_a_write_with_bad_archival_options_changes_nothing(
    tmp_path: Path, options: dict[str, str], version: int
) -> None:
    table = _auto_table(tmp_path, version)
    write(table, _one_row(0), "upsert")
    before = _active(table)
    with pytest.raises((ArchivalConfigError, TableConfigError)):
        write(table, _one_row(1), "upsert", options=options)
    assert _active(table) == before


# -- replacecommits whose replaced file groups still have files (issue 30, item 2) ------------------
def _lake(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the ``lake`` CLI; it must succeed; its standard output."""
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), err
    return out


def _lake_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    return json.loads(_lake(capsys, *argv))


def _lake_write(capsys: pytest.CaptureFixture[str], path: Path, op: str, p: str, rows: list[tuple]) -> str:
    """One write of (id, ts) rows into partition ``p`` through ``lake write``; its instant."""
    source = path.parent / f"in-{len(list(path.parent.glob('in-*')))}.parquet"
    pq.write_table(
        pa.table(
            {
                "id": [r[0] for r in rows],
                "ts": pa.array([r[1] for r in rows], pa.int64()),
                "p": [p] * len(rows),
                "v": [r[1] for r in rows],
            }
        ),
        source,
    )
    return _lake(capsys, "write", str(path), "--input", str(source), "--operation", op).strip()


def _lake_rows(capsys: pytest.CaptureFixture[str], path: Path) -> list[tuple]:
    """(partition, id, ts) rows through ``lake read``, checked equal to hudi-rs's."""
    out = path.parent / "out.parquet"
    _lake(capsys, "read", str(path), "--output", str(out))
    rows = _rows_of(pq.read_table(out))
    assert rows == _rows_of(pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read()))
    return rows


def _replacecommit(capsys: pytest.CaptureFixture[str], path: Path) -> str:
    timeline = json.loads(_lake(capsys, "timeline", str(path), "--json"))
    (replace,) = [i["time"] for i in timeline if i["action"] == "replacecommit"]
    return replace


def _parquet_names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.suffix == ".parquet")


CLI_KEEP = ("--option", "hoodie.keep.min.commits=3", "--option", "hoodie.keep.max.commits=5")


@VERSIONS
def test_a_merge_after_a_file_versions_clean_is_archived_only_once_its_replaced_files_are_cleaned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: int
) -> None:
    """A clean by file versions retains no earliest commit, so only the replaced files themselves
    can hold the merge's replacecommit back: archived with them on disk, every merged row was read
    twice (ours and hudi-rs) and the next clean found nothing to delete."""
    path = tmp_path / "t"
    _lake(capsys, "init", str(path), "--table-type", "cow", "--name", "t", "--record-key", "id",
          "--precombine", "ts", "--partition-fields", "p", "--table-version", str(version))  # fmt: skip
    for i in range(3):
        _lake_write(capsys, path, "insert", "x", [(f"k{i}{j}", i) for j in range(5)])
    _lake_write(capsys, path, "upsert", "x", [("k00", 9)])  # a second version of k0's file
    cleaned = _lake_json(
        capsys, "clean", str(path), "--policy", "KEEP_LATEST_FILE_VERSIONS", "--retained", "1"
    )
    assert (cleaned["outcome"], cleaned["earliest_commit_to_retain"], cleaned["deleted_files"]) == (
        "CLEANED",
        None,
        1,
    )
    merged = _lake_json(
        capsys, "partition-commit", str(path), "--partition", "x", "--policy", "merge-small-files"
    )
    assert merged["committed"] == ["x"]
    replace = _replacecommit(capsys, path)
    ys = [_lake_write(capsys, path, "insert", "y", [(f"y{i}", i)]) for i in range(3)]
    expected = sorted(
        [("x", "k00", 9)]
        + [("x", f"k{i}{j}", i) for i in range(3) for j in range(5) if (i, j) != (0, 0)]
        + [("y", f"y{i}", i) for i in range(3)]
    )
    assert _lake_rows(capsys, path) == expected and len(expected) == 18
    replaced_files = _parquet_names(path / "x")
    assert len(replaced_files) == 4  # the merged file and the three it replaced

    archived = _lake_json(capsys, "archive", str(path), *CLI_KEEP)
    assert _lake_rows(capsys, path) == expected  # (archived with the merge: 33 rows, 15 twice)
    # 8 commits: down to 3 would archive through the merge; the replaced files hold it back.
    assert (archived["actions"], archived["active_timeline_starts_at"], archived["limited_by"]) == (
        {"commit": 4, "clean": 1},
        replace,
        f"replacecommit {replace} (its replaced file groups still have files)",
    )
    ys += [_lake_write(capsys, path, "insert", "y", [(f"y{i}", i)]) for i in (3, 4)]
    expected = sorted([*expected, ("y", "y3", 3), ("y", "y4", 4)])
    held = _lake_json(capsys, "archive", str(path), *CLI_KEEP)
    assert (held["outcome"], held["reason"]) == (
        "NO_WORK",
        f"replacecommit {replace}: its replaced file groups still have files (a clean removes them; "
        "archived, it would no longer hide them from readers)",
    )
    assert _lake_rows(capsys, path) == expected

    cleaned = _lake_json(
        capsys, "clean", str(path), "--policy", "KEEP_LATEST_FILE_VERSIONS", "--retained", "1"
    )
    assert (cleaned["deleted_files"], cleaned["partitions"]["x"]["files"]) == (3, 3)
    (merged_file,) = _parquet_names(path / "x")
    assert merged_file in replaced_files and merged_file.endswith(f"_{replace}.parquet")
    archived = _lake_json(capsys, "archive", str(path), *CLI_KEEP)
    assert (archived["first_archived"], archived["last_archived"], archived["actions"]) == (
        replace,
        ys[1],
        {"replacecommit": 1, "commit": 2},
    )
    assert _lake_rows(capsys, path) == expected


@VERSIONS
def test_a_merge_whose_replaced_files_a_deleted_savepoint_kept_is_not_archived_with_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], version: int
) -> None:
    """Default clean policy: the savepoint keeps the merged groups' old files from the clean, whose
    earliest retained commit is past the merge; once the savepoint is deleted, only those files can
    hold the replacecommit back (archived with them on disk, ours and hudi-rs read 13 rows, not 7)."""
    path = tmp_path / "t"
    _lake(capsys, "init", str(path), "--table-type", "cow", "--name", "t", "--record-key", "id",
          "--precombine", "ts", "--partition-fields", "p", "--table-version", str(version))  # fmt: skip
    inserts = [
        _lake_write(capsys, path, "insert", "x", [(f"k{i}{j}", i) for j in range(2)]) for i in range(3)
    ]
    _lake(capsys, "savepoint", "create", str(path), "--instant", inserts[2])
    merged = _lake_json(
        capsys, "partition-commit", str(path), "--partition", "x", "--policy", "merge-small-files"
    )
    assert merged["committed"] == ["x"]
    replace = _replacecommit(capsys, path)
    ys = [_lake_write(capsys, path, "upsert", "y", [("y0", i)]) for i in range(4)]
    cleaned = _lake_json(capsys, "clean", str(path), "--retained", "2")
    assert (cleaned["policy"], cleaned["earliest_commit_to_retain"], cleaned["partitions"]) == (
        "KEEP_LATEST_COMMITS",
        ys[2],
        {"y": {"files": 1, "bytes": cleaned["bytes_planned"]}},
    )  # the savepoint kept the replaced files of x
    assert len(_parquet_names(path / "x")) == 4
    _lake(capsys, "savepoint", "delete", str(path), "--instant", inserts[2])
    expected = sorted([("x", f"k{i}{j}", i) for i in range(3) for j in range(2)] + [("y", "y0", 3)])

    archived = _lake_json(capsys, "archive", str(path), *CLI_KEEP)
    assert _lake_rows(capsys, path) == expected and len(expected) == 7  # (archived with it: 13)
    assert (archived["first_archived"], archived["last_archived"], archived["limited_by"]) == (
        inserts[0],
        inserts[2],
        f"replacecommit {replace} (its replaced file groups still have files)",
    )

    ys.append(_lake_write(capsys, path, "insert", "y", [("y1", 4)]))
    expected = sorted([*expected, ("y", "y1", 4)])
    cleaned = _lake_json(capsys, "clean", str(path), "--retained", "2")
    assert cleaned["partitions"]["x"]["files"] == 3
    assert [n for n in _parquet_names(path / "x") if not n.endswith(f"_{replace}.parquet")] == []
    archived = _lake_json(capsys, "archive", str(path), *CLI_KEEP)
    assert (archived["first_archived"], archived["last_archived"]) == (replace, ys[1])
    assert _lake_rows(capsys, path) == expected


def test_archival_deletes_a_log_an_earlier_version_left_on_a_rolled_back_compactions_slice(
    tmp_path: Path,
) -> None:
    """A restore of an earlier version rolled a compaction back by its base files alone and left a
    log two upserts put on its slice (appended, as Hudi's writers do: both blocks and both
    rollbacks' command blocks). Archival deletes it before moving past the rollbacks: once they are
    archived it would read as a committed slice without a base file and hide the file group's older
    row of key 1."""
    table, c, at_savepoint = _compacted_then_upserted(tmp_path / "t", 2)
    first, second = sorted(Path(table.storage.root).rglob(f".*_{c}.log.*"))
    shared = first.read_bytes() + second.read_bytes()
    point = savepoints(table.timeline())[0].instant
    restore(table, point)
    timeline = table.timeline()
    undone = [
        (r.timestamp, rec["commitsRollback"][0])
        for r in timeline.filter([Action.ROLLBACK])
        if (rec := timeline.avro_record(r))["commitsRollback"] != [c]
    ]
    assert len(undone) == 2
    first.write_bytes(shared + b"".join(rollback_command_block(*u) for u in undone))
    _archive_past(table, point)
    assert not first.exists()
    ours = read_snapshot(table).sort_by("id")
    theirs = pa.Table.from_batches(HudiTableBuilder.from_base_uri(table.storage.root).build().read())
    assert ours.column("ts").to_pylist() == theirs.sort_by("id").column("ts").to_pylist()
    assert ours.column("ts").to_pylist() == [at_savepoint.sort_by("id").column("ts")[0].as_py(), 13]


def test_archival_keeps_the_files_of_a_compaction_redone_after_its_rollback(tmp_path: Path) -> None:
    """A table an earlier version left with a completed rollback of compaction C and C completed
    again (it ran C once more after a crash between the rollback's completion and the removal of
    C's pending files). C's base files are committed: archival past the rollback keeps them, and
    we read what hudi-rs reads."""
    table, c, _ = _compacted_then_upserted(tmp_path / "t", 0)
    root = Path(table.storage.root)
    redo = {p: p.read_bytes() for p in [*root.glob(f".hoodie/{c}.*"), *root.glob(f"*_{c}.parquet")]}
    (undo,) = rollback(table, c, force=True)
    assert not any(p.exists() for p in redo)
    for p, data in redo.items():  # C completed again, its rollback still on the timeline
        p.write_bytes(data)
    _archive_past(table, savepoints(table.timeline())[0].instant)
    assert undo.instant not in {i.timestamp for i in table.timeline().instants}  # archived
    assert all(p.exists() for p in redo if p.suffix == ".parquet")
    ours = read_snapshot(table).sort_by("id")
    theirs = pa.Table.from_batches(HudiTableBuilder.from_base_uri(table.storage.root).build().read())
    assert ours.column("ts").to_pylist() == theirs.sort_by("id").column("ts").to_pylist() == [2, 13]
