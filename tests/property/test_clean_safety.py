"""Random histories of writes, compactions, savepoints and cleans: a clean never changes what a retained
instant or a savepoint reads (ours and hudi-rs), and never touches ``.hoodie/`` or anything outside."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
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


def _hudi_rs(path: Path | str, as_of: str, storage_options: dict[str, str] | None = None) -> list[tuple]:
    builder = HudiTableBuilder.from_base_uri(str(path)).with_storage_options(storage_options or {})
    batches = builder.build().read(HudiReadOptions().with_as_of_timestamp(as_of))
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
    # "schedule" leaves the plan pending: savepoints made before the next clean must still win.
    st.sampled_from(["schedule_and_execute", "schedule_and_execute", "schedule"]),
)
savepoint_st = st.tuples(st.just("savepoint"), st.one_of(st.just(0), st.integers(0, 20)), st.just(0))
# Merge-on-read tables grow new slices only by compaction: run one, or leave one pending.
compact_st = st.tuples(st.just("compact"), st.sampled_from(["run", "run", "schedule"]), st.just(0))


@settings(max_examples=40)
@given(
    table_type=st.sampled_from(["cow", "mor"]),
    partitioned=st.booleans(),
    steps=st.lists(
        st.one_of(write_st, write_st, write_st, clean_st, savepoint_st, savepoint_st, compact_st),
        min_size=10,
        max_size=24,
    ),
)
def test_clean_keeps_every_retained_instant_and_savepoint_readable(
    tmp_path_factory, table_type: str, partitioned: bool, steps: list[tuple]
) -> None:
    root = tmp_path_factory.mktemp("clean")
    outside = root / "neighbour"
    outside.mkdir()
    (outside / "data.parquet").write_bytes(b"not part of the table")
    place = _Place(
        str(root / "t"), lambda: _tree_digest(root / "t" / ".hoodie"), lambda: _tree_digest(outside), {}
    )
    _clean_history(place, table_type, partitioned, steps)


@settings(max_examples=12)
@given(
    table_type=st.sampled_from(["cow", "mor"]),
    partitioned=st.booleans(),
    steps=st.lists(
        st.one_of(write_st, write_st, write_st, clean_st, savepoint_st, savepoint_st, compact_st),
        min_size=10,
        max_size=18,
    ),
)
def test_clean_keeps_every_retained_instant_and_savepoint_readable_on_s3(
    s3_endpoint: str, table_type: str, partitioned: bool, steps: list[tuple]
) -> None:
    """The same histories on an s3:// table; the neighbour is an object beside the table's prefix."""
    from s3_helpers import hudi_s3_options, s3_client, s3_env, s3_objects

    bucket = f"clean-{uuid.uuid4().hex[:12]}"
    client = s3_client(s3_endpoint)
    client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key="neighbour/data.parquet", Body=b"not part of the table")

    def digest(prefix: str) -> dict[str, str]:
        return {k: hashlib.sha256(v).hexdigest() for k, v in s3_objects(s3_endpoint, bucket, prefix).items()}

    place = _Place(
        f"s3://{bucket}/t",
        lambda: digest("t/.hoodie/"),
        lambda: digest("neighbour/"),
        hudi_s3_options(s3_endpoint),
    )
    with s3_env(s3_endpoint):
        _clean_history(place, table_type, partitioned, steps)


@dataclass(frozen=True)
class _Place:
    """Where a history runs: the table's location, digests of its .hoodie/ and of a neighbour, and
    the storage options hudi-rs needs there."""

    location: str
    hoodie: Callable[[], dict[str, str]]
    neighbour: Callable[[], dict[str, str]]
    hudi_options: dict[str, str]


def _clean_history(place: _Place, table_type: str, partitioned: bool, steps: list[tuple]) -> None:
    table = LakeTable.create(
        place.location,
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
                # Index 0 often picks the oldest commit: the one a pending clean plan most likely names.
                chosen = candidates[step[1] % len(candidates)] if step[1] else candidates[0]
                if chosen not in savepointed:
                    try:
                        point = create_savepoint(table, chosen)
                        savepointed.add(chosen)
                        event(f"savepoint overrides a pending clean: {bool(point.overrides)}")
                    except SavepointError as exc:  # its files were already cleaned: refused
                        assert "already cleaned" in str(exc) or "earliest commit" in str(exc)
        else:
            _, policy, retained, mode = step
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
            options = {"hoodie.cleaner.policy": policy.value, key: str(retained)}
            _clean_and_check(table, place, options, mode, now, snapshots, savepointed)
    # Finish whatever plan is still pending: savepoints made since must still read exactly.
    _clean_and_check(table, place, {}, "execute", dt.datetime.now(dt.timezone.utc), snapshots, savepointed)


def _clean_and_check(
    table: LakeTable,
    place: _Place,
    options: dict[str, str],
    mode: str,
    now: dt.datetime,
    snapshots: dict[str, list[tuple]],
    savepointed: set[str],
) -> None:
    """One clean run, then: .hoodie/ and the neighbour untouched, every retained instant and
    savepoint reads exactly as it did when written (ours and hudi-rs)."""
    hoodie_before = place.hoodie()
    outside_before = place.neighbour()
    result = run_clean(table, options, mode=mode, now=now)
    event(f"clean {result.outcome.value} deleted>0={result.deleted_files > 0}")
    if result.kept_for_savepoints:
        event("a pending clean kept files for a later savepoint")
    hoodie_after = place.hoodie()
    # Only the clean's own bookkeeping file may be rewritten; every other file stays as it was.
    kept = {k: v for k, v in hoodie_before.items() if k != ".aux/lake-clean-state.json"}
    assert {k: hoodie_after.get(k) for k in kept} == kept, "a .hoodie file changed"
    assert place.neighbour() == outside_before
    retained_instants = set(savepointed)
    if snapshots:
        retained_instants.add(max(snapshots))
    if result.outcome is Outcome.CLEANED and result.plan and result.plan.earliest_instant_to_retain:
        earliest = result.plan.earliest_instant_to_retain.timestamp
        retained_instants |= {t for t in snapshots if t >= earliest}
    for instant in sorted(retained_instants):
        assert _rows(read_snapshot(table, as_of=instant)) == snapshots[instant], f"ours as of {instant}"
        if not table.timeline().pending_compactions():  # hudi-rs hides logs of a pending one
            assert _hudi_rs(place.location, instant, place.hudi_options) == snapshots[instant], (
                f"hudi-rs as of {instant}"
            )


@settings(max_examples=30)
@given(
    table_type=st.sampled_from(["cow", "mor"]),
    versions=st.integers(3, 6),
    retained=st.integers(1, 2),
    picks=st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True),
    crash_inflight=st.booleans(),
)
def test_savepoints_made_while_a_clean_is_pending_win(
    tmp_path_factory, table_type: str, versions: int, retained: int, picks: list[int], crash_inflight: bool
) -> None:
    """Plan a clean, savepoint some instants (the plan may name their files), then let the clean run
    (or die after going inflight and be finished later): every savepoint reads exactly as before."""
    path = tmp_path_factory.mktemp("pending") / "t"
    _pending_clean_history(str(path), {}, table_type, versions, retained, picks, crash_inflight)


@settings(max_examples=15)
@given(
    table_type=st.sampled_from(["cow", "mor"]),
    versions=st.integers(3, 5),
    retained=st.integers(1, 2),
    picks=st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True),
    crash_inflight=st.booleans(),
)
def test_savepoints_made_while_a_clean_is_pending_win_on_s3(
    s3_endpoint: str, table_type: str, versions: int, retained: int, picks: list[int], crash_inflight: bool
) -> None:
    """The same on an s3:// table (moto's S3 server on 127.0.0.1), hudi-rs reading S3."""
    from s3_helpers import hudi_s3_options, s3_client, s3_env

    bucket = f"clean-{uuid.uuid4().hex[:12]}"
    s3_client(s3_endpoint).create_bucket(Bucket=bucket)
    with s3_env(s3_endpoint):
        _pending_clean_history(
            f"s3://{bucket}/t",
            hudi_s3_options(s3_endpoint),
            table_type,
            versions,
            retained,
            picks,
            crash_inflight,
        )


def _pending_clean_history(
    location: str,
    hudi_options: dict[str, str],
    table_type: str,
    versions: int,
    retained: int,
    picks: list[int],
    crash_inflight: bool,
) -> None:
    table = LakeTable.create(
        location,
        name="p",
        table_type=table_type,
        record_key_fields=("key",),
        precombine_field="ts",
    )
    snapshots: dict[str, list[tuple]] = {}
    for ts in range(versions):
        batch = pa.table(
            {"key": KEYS, "city": ["x"] * 3, "ts": pa.array([ts] * 3, pa.int64()), "value": [ts] * 3}
        )
        written = write(table, batch, "upsert").instant  # before the read: d[k()] = v() runs v() first
        snapshots[written] = _rows(read_snapshot(table))
        if table_type == "mor" and ts:
            scheduled, done = run_compaction(table, force=True)
            assert done.outcome is CompactionOutcome.COMPLETED
            snapshots[scheduled.instant] = _rows(read_snapshot(table))
    pending = run_clean(table, {"hoodie.cleaner.commits.retained": str(retained)}, mode="schedule")
    planned = {
        p for paths in (pending.plan.files_per_partition if pending.plan else {}).values() for p in paths
    }
    if crash_inflight and pending.instant:
        requested = table.timeline().get(pending.instant)
        table.store.transition_to_inflight(requested, table.timeline().read_bytes(requested))
    protected: set[str] = set()
    instants = sorted(snapshots)
    for chosen in sorted({instants[pick % len(instants)] for pick in picks}):
        point = create_savepoint(table, chosen)
        protected |= point.files
        assert bool(point.overrides) == bool(point.files & planned)
        event(f"savepoint overrides the pending clean: {bool(point.overrides)}")
    result = run_clean(table, mode="execute")
    assert set(result.kept_for_savepoints) == planned & protected
    event(f"kept for savepoints: {bool(result.kept_for_savepoints)}; deleted: {result.deleted_files > 0}")
    for sp in table.timeline().savepoints():
        assert _rows(read_snapshot(table, as_of=sp.timestamp)) == snapshots[sp.timestamp]
        assert _hudi_rs(location, sp.timestamp, hudi_options) == snapshots[sp.timestamp]
