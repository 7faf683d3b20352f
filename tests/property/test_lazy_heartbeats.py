"""LAZY failed-writes policy: a write crashed at every durable step k, then

(a) while its heartbeat is fresh, neither ``lake rollback``, the next writer nor a clean rolls it
    back (and the table reads as before it);
(b) once the heartbeat expired (aged file, or a tiny interval), the next writer or clean rolls it
    back, and the table reads as the model, in ours and hudi-rs, with nothing left pending.

(c) the expiry boundary, through the CLI: a write whose last beat is just under interval x tolerable
    misses old (over two intervals) is alive for lake rollback, clean and the next writer; just over,
    each rolls it back. Judging after one interval (a planted bug) fails here; so does any rule off by
    a millisecond (the exact test).

Prints a coverage line: operations x crash points.
"""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from crash_support import crashing, steps_of
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.storage import SimulatedCrash
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import rollback
from airflow_lake_provider.lake.table.rollback.policy import (
    FailedWritesConfig,
    FailedWritesPolicy,
    heartbeat_expired,
)
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from airflow_lake_provider.lake.timeline.instant import Action, InstantClock

LAZY = {"hoodie.cleaner.policy.failed.writes": "LAZY"}
# One beat per 10 minutes: no beat comes while a test runs, so step counts are exact.
FRESH = {**LAZY, "hoodie.client.heartbeat.interval_in_ms": "600000"}
# Expired 2 ms after the last beat.
TINY = {
    **LAZY,
    "hoodie.client.heartbeat.interval_in_ms": "1",
    "hoodie.client.heartbeat.tolerable.misses": "2",
}
COVERAGE: dict[str, set[int]] = {}
START = dt.datetime(2025, 7, 1, tzinfo=dt.timezone.utc)
Model = dict[int, tuple[int, str]]


def _clock() -> InstantClock:
    ticks = iter(range(10**6))
    return InstantClock(now=lambda: START + dt.timedelta(milliseconds=next(ticks)))


def _batch(rows: list[tuple[int, int, str]]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "ts": pa.array([r[1] for r in rows], pa.int64()),
            "p": pa.array(["a" if r[0] % 2 else "b" for r in rows]),
            "v": pa.array([r[2] for r in rows]),
        }
    )


def _seed(path: Path, kind: str, version: int = 6) -> tuple[LakeTable, Model]:
    table = LakeTable.create(
        path,
        name="lazy",
        table_type=kind,
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("p",),
        clock=_clock(),
        table_version=version,
    )
    first = [(1, 1, "a1"), (2, 1, "a2"), (3, 1, "a3")]
    write(table, _batch(first), "insert", options=FRESH)
    model = {k: (ts, v) for k, ts, v in first}
    if kind == "mor":  # log files exist: the crashed write appends new log versions
        second = [(1, 2, "b1"), (2, 2, "b2")]
        write(table, _batch(second), "upsert", options=FRESH)
        model.update({k: (ts, v) for k, ts, v in second})
    return table, model


def _observed(table: pa.Table) -> Model:
    return {r["id"]: (r["ts"], r["v"]) for r in table.select(["id", "ts", "v"]).to_pylist()}


def _check(path: Path, model: Model) -> None:
    assert _observed(read_snapshot(LakeTable.open(path))) == model
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    assert (_observed(pa.Table.from_batches(batches)) if batches else {}) == model


OPS = {
    "upsert": ([(1, 5, "c1"), (4, 5, "c4")], lambda m, rows: {**m, **{k: (ts, v) for k, ts, v in rows}}),
    "delete": ([(2, 5, "x")], lambda m, rows: {k: v for k, v in m.items() if k not in {r[0] for r in rows}}),
}
NEXT = [(3, 9, "n3")]  # what the next writer writes


def _steps(tmp_path: Path, kind: str, op: str, version: int) -> int:
    table, _ = _seed(tmp_path / f"count-{kind}-{op}", kind, version)
    probe = crashing(table)
    write(probe, _batch(OPS[op][0]), op, options=FRESH)
    return len(steps_of(probe))


# (version, recover): table version 8 (Hudi 1.x) too.
RECOVERIES = [(6, "next-writer"), (6, "clean"), (8, "next-writer"), (8, "clean")]


@pytest.mark.parametrize(("version", "recover"), RECOVERIES)
@pytest.mark.parametrize("op", ["upsert", "delete"])
@pytest.mark.parametrize("kind", ["cow", "mor"])
def test_lazy_crash_at_every_step(tmp_path: Path, kind: str, op: str, recover: str, version: int) -> None:
    rows, apply = OPS[op]
    total = _steps(tmp_path, kind, op, version)
    assert total >= 5
    left_pending: set[int] = set()
    for k in range(1, total + 1):
        path = tmp_path / f"k{k}"
        table, model = _seed(path, kind, version)
        with pytest.raises(SimulatedCrash):
            write(crashing(table, k), _batch(rows), op, options=FRESH)
        timeline = table.timeline()
        pending = [i.timestamp for i in timeline.pending]
        after = apply(model, rows)
        observed = _observed(read_snapshot(table))
        assert observed in (model, after), f"k={k}: partial write visible"
        base = after if not pending and observed == after else model
        if pending:
            assert observed == model, f"k={k}: a pending write is visible"
        # (a) Fresh heartbeat: nothing rolls the write back.
        assert rollback(table, options=FRESH) == [], f"k={k}"
        if recover == "clean":
            run_clean(table, {**FRESH, "hoodie.cleaner.commits.retained": "1"})
        else:
            write(table, _batch(NEXT), "upsert", options=FRESH)
            base = {**base, 3: (9, "n3")}
        assert [i.timestamp for i in table.timeline().pending] == pending, f"k={k}: rolled back while fresh"
        _check(path, base)
        # (b) Expired: the next writer or clean rolls it back.
        if recover == "clean":
            for t in pending:  # aged: the last beat an hour ago
                beat = path / ".hoodie" / ".heartbeat" / t
                beat.write_text(str(int(time.time() * 1000) - 3_600_000))
            run_clean(table, {**LAZY, "hoodie.cleaner.commits.retained": "1"})
        else:
            time.sleep(0.01)  # a 1 ms interval, 2 misses: long expired
            write(table, _batch([(3, 10, "m3")]), "upsert", options=TINY)
            base = {**base, 3: (10, "m3")}
        timeline = table.timeline()
        assert not timeline.pending, f"k={k}: {timeline.pending}"
        rolled = [i for i in timeline.instants if i.action.value == "rollback"]
        assert len(rolled) == len(pending), f"k={k}"
        _check(path, base)
        assert not [t for t in pending if (path / ".hoodie" / ".heartbeat" / t).exists()]
        COVERAGE.setdefault(f"lazy-v{version}-{kind}-{op}-{recover}", set()).add(k)
        if pending:
            left_pending.add(k)
    # Steps: the first beat, requested, inflight, markers and files, the commit, then markers and
    # heartbeat removed. Every crash from the requested file up to the commit leaves it pending.
    assert left_pending == set(range(2, total - 2)), (total, sorted(left_pending))


# -- the expiry boundary: interval x tolerable misses, not one interval -------------------------------
INTERVAL_MS, MISSES = 60_000, 3
EXPIRY_MS = INTERVAL_MS * MISSES  # 3 minutes
MARGIN_MS = 10_000  # what the judging itself may take, on a loaded machine


def _lazy_table_with_a_live_write(path: Path, kind: str, version: int = 6) -> tuple[LakeTable, Model, Path]:
    """A table whose properties say LAZY (1 minute beats, 3 misses), and a write that stopped
    beating after its inflight file (a long GC pause, a slow store): its heartbeat file."""
    table, model = _seed(path, kind, version)
    table.store.update_properties(
        {
            **table.config.properties,
            "hoodie.cleaner.policy.failed.writes": "LAZY",
            "hoodie.client.heartbeat.interval_in_ms": str(INTERVAL_MS),
            "hoodie.client.heartbeat.tolerable.misses": str(MISSES),
        }
    )
    table = LakeTable.open(path, clock=table.clock)
    with pytest.raises(SimulatedCrash):  # its first beat, requested, inflight
        write(crashing(table, 3), _batch([(1, 5, "live")]), "upsert")
    [pending] = table.timeline().pending
    return table, model, path / ".hoodie" / ".heartbeat" / pending.timestamp


def _last_beat(beat: Path, ago_ms: int) -> None:
    beat.write_text(str(time.time_ns() // 1_000_000 - ago_ms))


def _lake(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("kind", ["cow", "mor"])
@pytest.mark.parametrize(
    ("version", "recover"),
    [(version, judge) for version in (6, 8) for judge in ("lake rollback", "lake clean", "lake write")],
)
def test_a_lazy_write_is_rolled_back_only_once_interval_times_tolerable_misses_passed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, recover: str, version: int
) -> None:
    """Just under the expiry (two intervals and more without a beat) the write is alive: neither lake
    rollback, a clean nor the next writer rolls it back (``recover`` judges first). Just over it,
    ``recover`` does."""
    path = tmp_path / "t"
    table, model, beat = _lazy_table_with_a_live_write(path, kind, version)
    pending = [i.timestamp for i in table.timeline().pending]
    source = tmp_path / "next.parquet"
    pq.write_table(_batch(NEXT), source)
    judges = {
        "lake rollback": ("rollback", str(path)),
        "lake clean": ("clean", str(path), "--retained", "1"),
        "lake write": ("write", str(path), "--input", str(source), "--operation", "upsert"),
    }
    # Just under: each judge sees a beat EXPIRY - MARGIN ago (> 2 intervals, < 3).
    for name in sorted(judges, key=lambda n: n != recover):
        _last_beat(beat, EXPIRY_MS - MARGIN_MS)
        out = _lake(capsys, *judges[name])
        assert [i.timestamp for i in LakeTable.open(path).timeline().pending] == pending, name
        assert name != "lake rollback" or out == "NO_WORK\n"
    model = {**model, 3: (9, "n3")}
    timeline = LakeTable.open(path).timeline()
    assert [i.timestamp for i in timeline.pending] == pending, "a live write was rolled back"
    assert not timeline.filter([Action.ROLLBACK])
    assert beat.exists()
    _check(path, model)
    # Just over: expired.
    _last_beat(beat, EXPIRY_MS + MARGIN_MS)
    if recover == "lake rollback":
        out = _lake(capsys, "rollback", str(path))
        assert out.startswith(f"rolled back {'deltacommit' if kind == 'mor' else 'commit'} {pending[0]} at ")
    elif recover == "lake clean":
        _lake(capsys, "clean", str(path), "--retained", "1")
    else:
        pq.write_table(_batch([(3, 10, "m3")]), source)
        _lake(capsys, "write", str(path), "--input", str(source), "--operation", "upsert")
        model = {**model, 3: (10, "m3")}
    timeline = LakeTable.open(path).timeline()
    assert timeline.pending == []
    [rolled] = timeline.filter([Action.ROLLBACK])
    assert timeline.avro_record(rolled)["commitsRollback"] == pending
    assert not beat.exists()
    _check(path, model)


def test_heartbeat_expiry_is_exact_to_the_millisecond(tmp_path: Path) -> None:
    """Expired only once strictly more than interval x tolerable misses passed since the last beat."""
    table, _ = _seed(tmp_path / "t", "cow")
    config = FailedWritesConfig(FailedWritesPolicy.LAZY, INTERVAL_MS, MISSES)
    last = 1_750_000_000_000
    table.store.heartbeats.beat("20250701000000000", last)
    judged = {
        age: heartbeat_expired(table.store, "20250701000000000", config, last + age)
        for age in (0, INTERVAL_MS + 1, EXPIRY_MS - INTERVAL_MS + 1, EXPIRY_MS, EXPIRY_MS + 1)
    }
    assert judged == {0: False, 60_001: False, 120_001: False, EXPIRY_MS: False, EXPIRY_MS + 1: True}
    assert heartbeat_expired(table.store, "20250701000000001", config, last)  # no heartbeat file


def test_zz_lazy_coverage_line(capsys: pytest.CaptureFixture[str]) -> None:
    total = sum(len(v) for v in COVERAGE.values())
    line = f"LAZY crash coverage: {len(COVERAGE)} operations x crash points = {total}: " + ", ".join(
        f"{k}={len(v)}" for k, v in sorted(COVERAGE.items())
    )
    with capsys.disabled():
        print("\n" + line)
