"""Random histories of writes, compactions, cleans, savepoints and restores, each step possibly
killed after a random durable step and then recovered the way production does (``lake rollback``,
the next run of the service, the restore run again): ours == hudi-rs == a model after every step,
and no instant is left pending.

200 examples in the normal run; ``LAKE_DEEP=1`` (``make test-deep``) runs 5,000.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pyarrow as pa
from hudi import HudiTableBuilder
from hypothesis import event, given, settings
from hypothesis import strategies as st
from property_support import example_dir, examples

from airflow_lake_provider.lake.errors import SavepointError
from airflow_lake_provider.lake.format.instant import InstantClock, State
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.compaction.executor import execute_compaction, run_compaction
from airflow_lake_provider.lake.services.restore import restore
from airflow_lake_provider.lake.services.savepoint import create_savepoint
from airflow_lake_provider.lake.storage import SimulatedCrash, inject_crash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.writer import write

EXAMPLES = int(os.environ.get("LAKE_CRASH_EXAMPLES") or examples(200))
KEYS = [1, 2, 3, 4, 5, 6]
START = dt.datetime(2025, 6, 1, tzinfo=dt.timezone.utc)
Model = dict[int, tuple[int, str]]


def _clock() -> InstantClock:
    ticks = iter(range(10**7))
    return InstantClock(now=lambda: START + dt.timedelta(milliseconds=next(ticks)))


def _observed(table: pa.Table) -> Model:
    if table.num_rows == 0:
        return {}
    return {r["id"]: (r["ts"], r["v"]) for r in table.select(["id", "ts", "v"]).to_pylist()}


def _hudi(path: Path) -> Model:
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    return _observed(pa.Table.from_batches(batches)) if batches else {}


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
)
# None: the step runs whole; k: the process dies right after its k-th durable step.
crash_st = st.one_of(st.none(), st.integers(1, 4), st.integers(1, 12))


@settings(max_examples=EXAMPLES)
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
    ts = 0
    for (op, keys), crash in steps:
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
        action = _action(table, op, keys, ts, snapshots)
        try:
            with inject_crash(crash):
                action()
            crashed = False
        except SimulatedCrash:
            crashed = True
        event(f"{kind} {op} crashed={crashed}")
        if crashed:
            _recover(table, op, snapshots)
        model = _settle(table, op, before, after, crashed, snapshots)
        if op == "savepoint" and table.timeline().savepoints():
            latest = max(i.timestamp for i in table.timeline().savepoints())
            snapshots.setdefault(latest, dict(model))
        assert not [i for i in table.timeline().instants if i.state is not State.COMPLETED], "pending left"
        assert _observed(read_snapshot(table)) == model, f"ours after {op} (crash {crash})"
        assert _hudi(path) == model, f"hudi-rs after {op} (crash {crash})"


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
        return lambda: run_clean(table, {"hoodie.cleaner.commits.retained": "1"})
    if op == "savepoint":
        commits = table.timeline().completed_commits
        latest = commits[-1].timestamp if commits else None
        return lambda: create_savepoint(table, latest) if latest and latest not in snapshots else None
    return lambda: restore(table, max(snapshots))


def _recover(table: LakeTable, op: str, snapshots: dict[str, Model]) -> None:
    """What production does after a process died: the rollback, or the next run of the service."""
    if op in ("upsert", "delete"):
        rollback(table)
    elif op == "compact":
        for pending in table.timeline().pending_compactions():
            execute_compaction(table, pending.timestamp)
    elif op == "clean":
        run_clean(table, {"hoodie.cleaner.commits.retained": "1"}, mode="execute")
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
    killed after it stands; every other service, finished by the recovery, took effect."""
    if op not in ("upsert", "delete") or not crashed:
        return after if op != "restore" or snapshots else before
    observed = _observed(read_snapshot(table))
    assert observed in (before, after), "a killed write left a partial result"
    event(f"killed write: {'committed' if observed == after and after != before else 'rolled back'}")
    return observed
