"""Random histories of writes, compactions, savepoints and cleans: a clean never changes what a retained
instant or a savepoint reads (ours and hudi-rs), and never touches ``.hoodie/`` or anything outside."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from pathlib import Path

import pyarrow as pa
from hudi import HudiReadOptions, HudiTableBuilder
from hypothesis import event, given, settings
from hypothesis import strategies as st

from airflow_lake_provider.lake.errors import SavepointError
from airflow_lake_provider.lake.format.instant import instant_to_datetime
from airflow_lake_provider.lake.services.clean.executor import Outcome, run_clean
from airflow_lake_provider.lake.services.clean.planner import CleanPolicy
from airflow_lake_provider.lake.services.compaction.executor import Outcome as CompactionOutcome
from airflow_lake_provider.lake.services.compaction.executor import run_compaction, schedule_compaction
from airflow_lake_provider.lake.services.savepoint import create_savepoint
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.writer import write

KEYS = ["k0", "k1", "k2"]


def _rows(table: pa.Table) -> list[tuple]:
    if table.num_rows == 0:
        return []
    cols = [
        table.column(c).to_pylist() for c in ("_hoodie_partition_path", "_hoodie_record_key", "ts", "value")
    ]
    return sorted(zip(*cols, strict=True))


def _hudi_rs(path: Path, as_of: str) -> list[tuple]:
    batches = (
        HudiTableBuilder.from_base_uri(str(path)).build().read(HudiReadOptions().with_as_of_timestamp(as_of))
    )
    return _rows(pa.Table.from_batches(batches)) if batches else []


def _tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            full = Path(dirpath) / name
            out[str(full.relative_to(root))] = hashlib.sha256(full.read_bytes()).hexdigest()
    return out


write_st = st.tuples(
    st.just("write"),
    st.sampled_from(["upsert", "upsert", "delete"]),
    st.lists(st.tuples(st.sampled_from(KEYS), st.just("x"), st.integers(0, 1000)), min_size=2, max_size=4),
)
clean_st = st.tuples(
    st.just("clean"),
    st.sampled_from(
        [
            CleanPolicy.KEEP_LATEST_COMMITS,
            CleanPolicy.KEEP_LATEST_COMMITS,
            CleanPolicy.KEEP_LATEST_FILE_VERSIONS,
            CleanPolicy.KEEP_LATEST_BY_HOURS,
        ]
    ),
    st.integers(1, 2),
)
savepoint_st = st.tuples(st.just("savepoint"), st.integers(0, 20), st.just(0))
# Merge-on-read tables grow new slices only by compaction: run one, or leave one pending.
compact_st = st.tuples(st.just("compact"), st.sampled_from(["run", "run", "schedule"]), st.just(0))


@settings(max_examples=40)
@given(
    table_type=st.sampled_from(["cow", "mor"]),
    partitioned=st.booleans(),
    steps=st.lists(
        st.one_of(write_st, write_st, write_st, clean_st, savepoint_st, compact_st), min_size=10, max_size=24
    ),
)
def test_clean_keeps_every_retained_instant_and_savepoint_readable(
    tmp_path_factory, table_type: str, partitioned: bool, steps: list[tuple]
) -> None:
    root = tmp_path_factory.mktemp("clean")
    outside = root / "neighbour"
    outside.mkdir()
    (outside / "data.parquet").write_bytes(b"not part of the table")
    table = LakeTable.create(
        root / "t",
        name="c",
        table_type=table_type,
        record_key_fields=("key",),
        precombine_field="ts",
        partition_fields=("city",) if partitioned else (),
    )
    snapshots: dict[str, list[tuple]] = {}
    savepointed: set[str] = set()
    ts = 0
    for step in steps:
        if step[0] == "write":
            _, op, rows = step
            ts += 1  # increasing ts: every version wins, so deletes and updates all take effect
            batch = pa.table(
                {
                    "key": [r[0] for r in rows],
                    "city": [r[1] for r in rows],
                    "ts": pa.array([ts] * len(rows), pa.int64()),
                    "value": [r[2] for r in rows],
                }
            )
            instant = write(table, batch, op).instant
            snapshots[instant] = _rows(read_snapshot(table))
        elif step[0] == "compact":
            if table_type != "mor" or table.timeline().pending_compactions():
                continue
            if step[1] == "schedule":
                schedule_compaction(table, force=True)
            else:
                scheduled, done = run_compaction(table, force=True)
                if done.outcome is CompactionOutcome.COMPLETED:
                    snapshots[scheduled.instant] = _rows(read_snapshot(table))
        elif step[0] == "savepoint":
            candidates = sorted(snapshots)
            if candidates:
                chosen = candidates[step[1] % len(candidates)]
                if chosen not in savepointed:
                    try:
                        create_savepoint(table, chosen)
                        savepointed.add(chosen)
                    except SavepointError as exc:  # its files were already cleaned: refused
                        assert "already cleaned" in str(exc) or "earliest commit" in str(exc)
        else:
            _, policy, retained = step
            key = {
                CleanPolicy.KEEP_LATEST_COMMITS: "hoodie.cleaner.commits.retained",
                CleanPolicy.KEEP_LATEST_FILE_VERSIONS: "hoodie.cleaner.fileversions.retained",
                CleanPolicy.KEEP_LATEST_BY_HOURS: "hoodie.cleaner.hours.retained",
            }[policy]
            commits = sorted(snapshots)
            # For hours: "now" is one hour after a commit chosen by the retention number.
            now = (
                instant_to_datetime(commits[-min(retained, len(commits))]) + dt.timedelta(minutes=59)
                if commits
                else dt.datetime.now(dt.timezone.utc)
            )
            hoodie_before = _tree_digest(table.base_path / ".hoodie")
            outside_before = _tree_digest(outside)
            result = run_clean(table, {"hoodie.cleaner.policy": policy.value, key: str(retained)}, now=now)
            event(f"clean {result.outcome.value} deleted>0={result.deleted_files > 0}")
            hoodie_after = _tree_digest(table.base_path / ".hoodie")
            # Only the clean's own bookkeeping file may be rewritten; every other file stays as it was.
            kept = {k: v for k, v in hoodie_before.items() if k != ".aux/lake-clean-state.json"}
            assert {k: hoodie_after.get(k) for k in kept} == kept, "a .hoodie file changed"
            assert _tree_digest(outside) == outside_before
            retained_instants = set(savepointed)
            if snapshots:
                retained_instants.add(max(snapshots))
            if result.outcome is Outcome.CLEANED and result.plan and result.plan.earliest_instant_to_retain:
                earliest = result.plan.earliest_instant_to_retain.timestamp
                retained_instants |= {t for t in snapshots if t >= earliest}
            for instant in sorted(retained_instants):
                assert _rows(read_snapshot(table, as_of=instant)) == snapshots[instant], (
                    f"ours as of {instant}"
                )
                if not table.timeline().pending_compactions():  # hudi-rs hides logs of a pending one
                    assert _hudi_rs(table.base_path, instant) == snapshots[instant], (
                        f"hudi-rs as of {instant}"
                    )
