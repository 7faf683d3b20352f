"""Random writes on table version 8 (Hudi 1.x), each possibly failing mid-write (killed after a
random durable step, or an error the writer itself sees), then recovered as production does:
``lake rollback``, the next write (EAGER), or a forced rollback of the latest commit. Ours ==
hudi-rs == a model after every step, no instant is left pending, and no data file of a rolled-back
write is left behind (a v8 write's log files are its own: a rollback deletes them).

60 examples in the normal run; ``LAKE_DEEP=1`` (``make test-deep``) runs 5,000.
"""

from __future__ import annotations

import datetime as dt
import functools
from pathlib import Path

import pyarrow as pa
from crash_support import crashing
from hypothesis import event, given, settings
from hypothesis import strategies as st
from property_support import Model, derandomized, example_dir, examples, millisecond_clock, tally
from property_support import hudi_model_rows as _hudi
from property_support import model_rows as _observed

from airflow_lake_provider.lake.file_group.file_names import BaseFileName, LogFileName
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

EXAMPLES = examples(60)
KEYS = [1, 2, 3, 4, 5, 6]
START = dt.datetime(2025, 6, 1, tzinfo=dt.timezone.utc)
_clock = functools.partial(millisecond_clock, START)
STATS = tally("v8 rollback model")


class _WriterError(Exception):
    """An error inside the write, which the writer sees (and undoes its instant for)."""


def _orphans(table: LakeTable, path: Path) -> list[str]:
    """Data files named with an instant that is not a completed commit (what a rollback must delete)."""
    done = {i.timestamp for i in table.timeline().completed_commits}
    out = []
    for p in path.rglob("*"):
        if ".hoodie" in p.parts or not p.is_file():
            continue
        base, log = BaseFileName.parse(p.name), LogFileName.parse(p.name)
        instant = base.instant if base else log.base_instant if log else None
        if instant is not None and instant not in done:
            out.append(p.name)
    return out


step_st = st.tuples(
    st.sampled_from(["upsert", "upsert", "delete", "force-rollback"]),
    st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True),
    # None: runs whole; ("kill", k): the process dies after durable step k; ("error", point): the
    # writer sees an error at that point of the write.
    st.one_of(
        st.none(),
        st.tuples(st.just("kill"), st.integers(1, 10)),
        st.tuples(st.just("error"), st.sampled_from(["requested", "inflight", "file", "commit"])),
    ),
    st.sampled_from(["lake rollback", "next write"]),
)


@settings(max_examples=EXAMPLES, derandomize=derandomized())
@given(kind=st.sampled_from(["cow", "mor"]), steps=st.lists(step_st, min_size=3, max_size=8))
def test_v8_failed_writes_roll_back_to_the_model(tmp_path_factory, kind: str, steps: list) -> None:
    path = example_dir(tmp_path_factory, "v8rollback") / "t"
    table = LakeTable.create(
        path,
        name="r",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        clock=_clock(),
        table_version=8,
    )
    model: Model = {}
    history: list[Model] = []  # the model as of each completed commit, oldest first
    ts = 0
    for op, keys, failure, recover in steps:
        ts += 1
        before = dict(model)
        if op == "force-rollback":
            if not history:
                continue
            after = history[-2] if len(history) > 1 else {}
            latest = max(table.timeline().completed_commits, key=lambda i: i.completion_time or "")
            target = crashing(table, failure[1]) if failure and failure[0] == "kill" else table
            try:
                rollback(target, latest.timestamp, force=True)
                crashed = False
            except SimulatedCrash:
                crashed = True
        else:
            after = dict(model)
            if op == "upsert":
                after.update(dict.fromkeys(keys, (ts, f"v{ts}")))
            else:
                for k in keys:
                    after.pop(k, None)
            batch = pa.table(
                {
                    "id": pa.array(keys, pa.int64()),
                    "ts": pa.array([ts] * len(keys), pa.int64()),
                    "v": [f"v{ts}"] * len(keys),
                }
            )
            target = crashing(table, failure[1]) if failure and failure[0] == "kill" else table
            point = failure[1] if failure and failure[0] == "error" else None

            def fault(at: str, point: str | None = point) -> None:
                if at == point:
                    raise _WriterError(at)

            try:
                write(target, batch, op, fault=fault)
                crashed = False
            except SimulatedCrash:
                crashed = True
            except _WriterError:  # undone by the writer itself: as if it never ran
                after, crashed = before, False
                STATS[f"{kind} writer error undone"] += 1
        event(f"{kind} {op} crashed={crashed}")
        if crashed:
            STATS[f"{kind} {op} killed, recovered by {recover}"] += 1
            if recover == "lake rollback" or op == "force-rollback":
                rollback(table)
            observed = _observed(read_snapshot(table))
            assert observed in (before, after), f"a killed {op} left a partial result"
            after = observed
        model = after
        _sync(history, table, model)
        if crashed and recover == "next write" and op != "force-rollback":
            ts += 1  # the next write rolls the failed one back first (EAGER)
            schema = pa.schema([("id", pa.int64()), ("ts", pa.int64()), ("v", pa.string())])
            write(table, pa.table({"id": [6], "ts": [ts], "v": [f"n{ts}"]}, schema), "upsert")
            model = {**model, 6: (ts, f"n{ts}")}
            _sync(history, table, model)
        assert [str(i) for i in table.timeline().pending] == [], f"pending left after {op}"
        assert _observed(read_snapshot(table)) == model, f"ours after {op} ({failure})"
        assert _hudi(path) == model, f"hudi-rs after {op} ({failure})"
        assert _orphans(table, path) == [], f"files of a rolled-back write left after {op}"


def _sync(history: list[Model], table: LakeTable, model: Model) -> None:
    """``history[i]``: the rows as of the i-th completed commit; the newest is ``model``."""
    commits = len(table.timeline().completed_commits)
    del history[commits:]
    if len(history) < commits:
        history.append(dict(model))
    assert len(history) == commits
    if history:
        assert history[-1] == model, "the rows as of the latest commit changed without a commit"
