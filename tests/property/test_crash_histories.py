"""Random histories of writes, compactions, cleans, savepoints, restores and forced rollbacks of the
latest commit, each step possibly killed after a random durable step and then recovered the way
production does (``lake rollback``, the next run of the service, the restore run again): ours ==
hudi-rs == a model after every step, and no instant is left pending.

A forced rollback after a clean is refused exactly when a file of the snapshot it falls back to is
gone (hudi-rs listed that snapshot's files when it was the latest); otherwise the table reads as the
model did at the commit before. The last test prints and asserts how often each path ran.

200 examples in the normal run; ``LAKE_DEEP=1`` (``make test-deep``) runs 5,000.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
from pathlib import Path

import pyarrow as pa
import pytest
from crash_support import crashing
from hudi import HudiTableBuilder
from hypothesis import event, given, settings
from hypothesis import strategies as st
from property_support import SUMMARY, Model, derandomized, example_dir, examples, millisecond_clock, tally
from property_support import hudi_model_rows as _hudi
from property_support import model_rows as _observed

from airflow_lake_provider.lake.errors import RollbackError, SavepointError
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction, run_compaction
from airflow_lake_provider.lake.services.restore import restore
from airflow_lake_provider.lake.services.savepoint import create_savepoint
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import Instant, State

EXAMPLES = int(os.environ.get("LAKE_CRASH_EXAMPLES") or examples(200))
KEYS = [1, 2, 3, 4, 5, 6]
START = dt.datetime(2025, 6, 1, tzinfo=dt.timezone.utc)
_clock = functools.partial(millisecond_clock, START)
STATS = tally("crash histories")
CLEAN = {"hoodie.cleaner.commits.retained": "1"}  # keeps the slices before the latest commit too
# Keeps only the latest commit's files: the slices a forced rollback of it falls back to go.
CLEAN_VERSIONS = {
    "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
    "hoodie.cleaner.fileversions.retained": "1",
}


def _snapshot_files(path: Path) -> frozenset[str]:
    """The data files of the latest snapshot, as hudi-rs lists them."""
    files = set()
    for s in HudiTableBuilder.from_base_uri(str(path)).build().get_file_slices():
        files.add(s.base_file_relative_path())
        files.update(s.log_files_relative_paths())
    return frozenset(files)


step_st = st.one_of(
    st.tuples(st.just("upsert"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True)),
    st.tuples(st.just("upsert"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True)),
    st.tuples(st.just("delete"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=2, unique=True)),
    st.tuples(st.just("compact"), st.just([])),
    st.tuples(st.just("clean"), st.just([])),
    st.tuples(st.just("savepoint"), st.just([])),
    st.tuples(st.just("savepoint"), st.just([])),
    st.tuples(st.just("restore"), st.just([])),
    st.tuples(st.just("restore"), st.just([])),
    st.tuples(st.just("force-rollback"), st.just([])),
    # Whole steps (never killed) first, then a forced rollback of the latest commit (maybe killed)
    # after a clean keeping one file version: of a write (COW: a rewrite; MOR: log appends), of a
    # compaction (MOR; on COW it does nothing).
    st.tuples(st.just("clean versions, force-rollback"), st.just([])),
    st.tuples(
        st.just("upsert, upsert, clean versions, force-rollback"),
        st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True),
    ),
    st.tuples(
        st.just("upsert, upsert, compact, clean versions, force-rollback"),
        st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True),
    ),
)
# None: the step runs whole; k: the process dies right after its k-th durable step.
crash_st = st.one_of(st.none(), st.integers(1, 4), st.integers(1, 12))


@settings(max_examples=EXAMPLES, derandomize=derandomized())
@given(
    kind=st.sampled_from(["cow", "mor"]),
    steps=st.lists(st.tuples(step_st, crash_st), min_size=4, max_size=10),
)
def test_crashes_anywhere_recover_to_exactly_one_outcome(tmp_path_factory, kind: str, steps: list) -> None:
    path = example_dir(tmp_path_factory, "crash") / "t"
    table = LakeTable.create(
        path, name="c", table_type=kind, record_key_fields=("id",), precombine_field="ts", clock=_clock()
    )
    model: Model = {}
    snapshots: dict[str, Model] = {}  # savepoint -> rows
    # Each commit that was the latest -> the rows and (hudi-rs) data files of its snapshot.
    at_commit: dict[str, tuple[Model, frozenset[str]]] = {}
    cleaned = False  # a clean ran since the latest commit was made
    ts = 0
    STATS[f"examples {kind}"] += 1
    for (op, keys), crash in steps:
        *whole, op = op.split(", ")
        for first in whole:  # never killed
            ts += 1
            _action(table, first, keys, ts, snapshots)()
            if first == "upsert":
                model.update(dict.fromkeys(keys, (ts, f"v{ts}")))
            cleaned = _record(table, path, model, at_commit, cleaned, first)
        ts += 1  # every version is newer: the model needs no ordering rules
        before = dict(model)
        after = dict(model)
        if op == "upsert":
            after.update(dict.fromkeys(keys, (ts, f"v{ts}")))
        elif op == "delete":
            for k in keys:
                after.pop(k, None)
        elif op == "restore":
            if not snapshots:
                continue
            target = max(snapshots)
            after = dict(snapshots[target])
        elif op == "force-rollback":
            commits = table.timeline().completed_commits
            if not commits:
                continue
            previous = at_commit[commits[-2].timestamp] if len(commits) > 1 else ({}, frozenset())
            after = dict(previous[0])
            gone = sorted(f for f in previous[1] if not (path / f).exists())
        action = _action(crashing(table, crash), op, keys, ts, snapshots)
        try:
            action()
            crashed = False
        except SimulatedCrash:
            crashed = True
        except RollbackError as exc:  # refused before any step: nothing changed
            assert op == "force-rollback", exc
            _refused(table, commits[-1], str(exc), gone, cleaned)
            after, crashed = before, False
        else:
            if op == "force-rollback":
                assert not gone, f"rolled back {commits[-1].timestamp} though {gone} are gone"
                STATS["forced rollbacks done" + (" after a clean" if cleaned else "")] += 1
        event(f"{kind} {op} crashed={crashed}")
        if crashed:
            _recover(table, op, snapshots)
            if op == "force-rollback":
                STATS["forced rollbacks killed half way"] += 1
        model = _settle(table, op, before, after, crashed, snapshots)
        if op == "savepoint" and table.timeline().savepoints():
            latest = max(i.timestamp for i in table.timeline().savepoints())
            snapshots.setdefault(latest, dict(model))
        assert not [i for i in table.timeline().instants if i.state is not State.COMPLETED], "pending left"
        assert _observed(read_snapshot(table)) == model, f"ours after {op} (crash {crash})"
        assert _hudi(path) == model, f"hudi-rs after {op} (crash {crash})"
        cleaned = _record(table, path, model, at_commit, cleaned, op)


def _record(
    table: LakeTable,
    path: Path,
    model: Model,
    at_commit: dict[str, tuple[Model, frozenset[str]]],
    cleaned: bool,
    op: str,
) -> bool:
    """Remember the snapshot of a new latest commit; whether a clean ran since it was made."""
    latest = table.timeline().last_completed_commit
    if latest is not None and latest.timestamp not in at_commit:
        at_commit[latest.timestamp] = (dict(model), _snapshot_files(path))
        cleaned = False
    return cleaned or op.startswith("clean")


def _refused(table: LakeTable, target: Instant, message: str, gone: list[str], cleaned: bool) -> None:
    """A forced rollback is refused for a savepointed commit, or exactly when files it falls back to
    are gone (only a clean removes them)."""
    if "is savepointed" in message:
        STATS["forced rollbacks refused: savepointed"] += 1
        return
    assert "a clean removed" in message and gone and cleaned, (target, message, gone)
    what = "compaction" if table.timeline().is_compaction(target) else "write"
    STATS[f"forced rollbacks of a {what} refused after a clean removed their fallback"] += 1


def _action(table: LakeTable, op: str, keys: list[int], ts: int, snapshots: dict[str, Model]):  # noqa: ANN202
    if op in ("upsert", "delete"):
        batch = pa.table(
            {
                "id": pa.array(keys, pa.int64()),
                "ts": pa.array([ts] * len(keys), pa.int64()),
                "v": [f"v{ts}"] * len(keys),
            }
        )
        return lambda: write(table, batch, op)
    if op == "compact":
        return lambda: run_compaction(table, force=True) if table.config.is_mor else None
    if op == "clean":
        return lambda: run_clean(table, CLEAN)
    if op == "clean versions":
        return lambda: run_clean(table, CLEAN_VERSIONS)
    if op == "savepoint":
        commits = table.timeline().completed_commits
        latest = commits[-1].timestamp if commits else None
        return lambda: create_savepoint(table, latest) if latest and latest not in snapshots else None
    if op == "force-rollback":
        latest = table.timeline().completed_commits[-1].timestamp
        return lambda: rollback(table, latest, force=True)
    return lambda: restore(table, max(snapshots))


def _recover(table: LakeTable, op: str, snapshots: dict[str, Model]) -> None:
    """What production does after a process died: the rollback, or the next run of the service."""
    if op in ("upsert", "delete", "force-rollback"):
        rollback(table)  # a forced rollback's stored plan is finished first
    elif op == "compact":
        for pending in table.timeline().pending_compactions():
            execute_compaction(table, pending.timestamp)
    elif op == "clean":
        run_clean(table, CLEAN, mode="execute")
    elif op == "savepoint":
        commits = table.timeline().completed_commits
        try:
            create_savepoint(table, commits[-1].timestamp)
        except SavepointError as exc:  # the killed run got as far as creating it
            assert "already exists" in str(exc)
    elif op == "restore":
        restore(table, max(snapshots))


def _settle(
    table: LakeTable, op: str, before: Model, after: Model, crashed: bool, snapshots: dict[str, Model]
) -> Model:
    """The state the table must now be in: a write killed before its commit is rolled back, one
    killed after it stands; a forced rollback killed before its plan was stored did nothing, after
    it the recovery finishes it; every other service, finished by the recovery, took effect."""
    if op not in ("upsert", "delete", "force-rollback") or not crashed:
        return after if op != "restore" or snapshots else before
    observed = _observed(read_snapshot(table))
    assert observed in (before, after), f"a killed {op} left a partial result"
    event(f"killed {op}: {'took effect' if observed == after and after != before else 'undone'}")
    return observed


def test_crash_histories_exercised_what_they_claim() -> None:
    """Runs after the history test above: forced rollbacks ran, were refused after a clean removed
    their fallback, succeeded after a clean that left it, and were killed half way."""
    if STATS["examples cow"] + STATS["examples mor"] < 50:
        pytest.skip("the history test did not run (or ran too few examples) in this session")
    for what in (
        "forced rollbacks done",
        "forced rollbacks done after a clean",
        "forced rollbacks of a write refused after a clean removed their fallback",
        "forced rollbacks of a compaction refused after a clean removed their fallback",
        "forced rollbacks refused: savepointed",
        "forced rollbacks killed half way",
    ):
        SUMMARY.append(f"crash histories: {what}: {STATS[what]}")
        assert STATS[what], f"never happened: {what}"
