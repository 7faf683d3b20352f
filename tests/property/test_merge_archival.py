"""Random histories of writes, merge-small-files partition commits, cleans under both policies,
savepoints made and deleted, and archivals (every write archives at its end too, with a short active
timeline): after every step our reader, hudi-rs and an in-memory model read exactly the same rows
(archival never moves out a replacecommit whose replaced files are still on disk, or every merged
row is read twice), and a sensor's poke counts exactly the writes each partition got, archived ones
included (from the commit files, read right after each write).

The last test of the module checks, from the statistics the histories collected, that they took
the paths they claim (printed at the end of the run).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pyarrow as pa
import pytest
from hudi import HudiTableBuilder
from hypothesis import given, settings
from hypothesis import strategies as st
from property_support import SUMMARY, derandomized, example_dir, examples, tally

from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.partition_commit.executor import commit_partitions
from airflow_lake_provider.lake.services.savepoint import create_savepoint, delete_savepoint
from airflow_lake_provider.lake.table.archival.executor import run_archival
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write

CITIES = ["a", "b"]
KEYS = [f"k{i}" for i in range(10)]  # a key's partition is fixed: CITIES[i % 2]
KEEP = {"hoodie.keep.min.commits": "2", "hoodie.keep.max.commits": "4"}
MERGE = {
    "sink.partition-commit.policy.kind": "merge-small-files",
    "lake.partition-commit.late-data.recommit": "true",
}
STATS = tally("merge archival")


def _city(key: str) -> str:
    return CITIES[int(key[1:]) % 2]


write_st = st.tuples(
    st.just("write"),
    st.sampled_from(["insert", "insert", "upsert", "upsert", "delete"]),
    st.lists(st.sampled_from(KEYS), min_size=1, max_size=4, unique=True),
)
clean_st = st.tuples(
    st.just("clean"), st.sampled_from(["KEEP_LATEST_FILE_VERSIONS", "KEEP_LATEST_COMMITS"]), st.integers(1, 2)
)


@st.composite
def histories(draw: st.DrawFn, max_rounds: int = 8) -> list[tuple]:
    """Rounds of 1-3 writes, then maybe a savepoint, a merge (partition commit), a clean, a savepoint
    deletion, an archival and a poke: the order in which a savepoint keeps replaced files from a
    clean and goes before an archival comes up often."""
    steps: list[tuple] = []
    for _ in range(draw(st.integers(3, max_rounds))):
        steps += draw(st.lists(write_st, min_size=1, max_size=3))
        for step, percent in (
            (("savepoint",), 35),
            (("merge",), 60),
            (draw(clean_st), 60),
            (("unsavepoint",), 50),
            (("archive",), 70),
            (("poke",), 40),
        ):
            if draw(st.integers(0, 99)) < percent:
                steps.append(step)
    return steps


def _rows(t: pa.Table) -> list[tuple]:
    if t.num_rows == 0:
        return []
    return sorted(zip(t["city"].to_pylist(), t["id"].to_pylist(), t["ts"].to_pylist(), strict=True))


def _timeline_dir(table: LakeTable) -> Path:
    return table.base_path / table.layout.folder  # .hoodie (v6) or .hoodie/timeline (v8)


def _time_of(name: str) -> str:
    """The instant time of a timeline file name (``<t>.<action>``, or ``<t>_<completion>.<action>``)."""
    return name.split(".")[0].split("_")[0]


def _metadata(path: Path) -> dict:
    """A completed commit file's metadata: JSON (v6) or Avro (v8), read without the code under test."""
    data = path.read_bytes()
    if data.startswith(b"Obj\x01"):
        (record,) = list(fastavro.reader(io.BytesIO(data)))
        return record
    return json.loads(data)


def _replaced_on_disk(table: LakeTable) -> set[str]:
    """Active replacecommits some of whose replaced file groups still have files, from the commit
    files and the partition listings (not from the code under test)."""
    live = set()
    for path in _timeline_dir(table).glob("*.replacecommit"):
        meta = _metadata(path)
        for partition, ids in (meta.get("partitionToReplaceFileIds") or {}).items():
            names = [p.name for p in (table.base_path / partition).iterdir()]
            if any(n.startswith((f"{i}_", f".{i}_")) for i in ids for n in names):
                live.add(_time_of(path.name))
    return live


def _active_times(table: LakeTable) -> set[str]:
    return {_time_of(p.name) for p in _timeline_dir(table).iterdir() if p.is_file()}


# Version 8 too (Hudi 1.x: LSM history, 1.x clusterings).
@pytest.mark.parametrize("version", [6, 8])
@settings(max_examples=examples(25), derandomize=derandomized(), deadline=None)
@given(steps=histories())
def test_merges_archival_and_savepoints_keep_rows_and_the_partition_index_exact(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple], version: int
) -> None:
    root: Path = example_dir(tmp_path_factory, "merge-archival")
    table = LakeTable.create(
        root / "t",
        name="t",
        table_type="cow",
        record_key_fields=("id",),
        precombine_field="ts",
        partition_fields=("city",),
        table_version=version,
    )
    model: dict[str, tuple[str, str, int]] = {}  # key -> (city, key, ts)
    written: dict[str, set[str]] = {}  # partition -> write instants (from the commit files)
    polled: set[str] = set()  # write instants the last poke could see in the active timeline
    kept_by_deleted_savepoint: set[str] = set()  # replacecommits a deleted savepoint kept files for
    replaces: set[str] = set()  # every replacecommit made
    ts = 0
    STATS["examples"] += 1
    for step in steps:
        kind = step[0]
        if kind == "write":
            _, op, keys = step
            if op == "insert":
                keys = [k for k in keys if k not in model]  # an insert of a stored key would duplicate it
            if not keys:
                continue
            ts += 1
            batch = pa.table(
                {
                    "id": keys,
                    "ts": pa.array([ts] * len(keys), pa.int64()),
                    "city": [_city(k) for k in keys],
                    "v": [ts] * len(keys),
                }
            )
            live = _replaced_on_disk(table)
            result = write(table, batch, op, options=KEEP)  # archives at its end
            STATS[f"{op}s"] += 1
            moved = set(result.archived)
            assert not moved & live, f"a write archived {sorted(moved & live)} with replaced files on disk"
            STATS["replacecommits archived"] += len(moved & replaces)
            (commit_file,) = _timeline_dir(table).glob(f"{result.instant}*.commit")
            commit = _metadata(commit_file)
            for partition in commit["partitionToWriteStats"]:
                written.setdefault(partition, set()).add(result.instant)
            for k in keys:
                if op == "delete":
                    model.pop(k, None)
                else:
                    model[k] = (_city(k), k, ts)
        elif kind == "merge" and written:
            before = {p.name for p in _timeline_dir(table).glob("*.replacecommit")}
            commit_partitions(table, sorted(written), MERGE, require_existing=False)
            after = {p.name for p in _timeline_dir(table).glob("*.replacecommit")}
            replaces |= {_time_of(name) for name in after - before}
            STATS["merges"] += len(after - before)
        elif kind == "clean":
            _, policy, retained = step
            key = "fileversions" if policy == "KEEP_LATEST_FILE_VERSIONS" else "commits"
            cleaned = run_clean(
                table, {"hoodie.cleaner.policy": policy, f"hoodie.cleaner.{key}.retained": str(retained)}
            )
            STATS[f"cleans by {key} that deleted files"] += cleaned.deleted_files > 0
        elif kind == "savepoint":
            timeline = table.timeline()
            last = timeline.last_completed_commit
            if last is not None and last.timestamp not in {s.timestamp for s in timeline.savepoints()}:
                create_savepoint(table, last.timestamp)
                STATS["savepoints made"] += 1
        elif kind == "unsavepoint":
            points = table.timeline().savepoints()
            if points:
                live = _replaced_on_disk(table)
                delete_savepoint(table, points[0].timestamp)
                STATS["savepoints deleted"] += 1
                if live:
                    kept_by_deleted_savepoint |= live
                    STATS["savepoints deleted while replaced files were on disk"] += 1
        elif kind == "archive":
            live = _replaced_on_disk(table)
            archived = run_archival(table, KEEP)
            moved = set(archived.archived)
            assert not moved & live, (
                f"archived replacecommit(s) {sorted(moved & live)} with replaced files on disk"
            )
            STATS["replacecommits archived"] += archived.actions.get("replacecommit", 0)
            held = archived.limited_by or archived.reason
            if held.startswith("replacecommit "):
                STATS["archivals held back by a replacecommit with replaced files"] += 1
                if held.split()[1].rstrip(":") in kept_by_deleted_savepoint:
                    STATS["... whose files a deleted savepoint had kept"] += 1
        elif kind == "poke":
            active = _active_times(table)
            poke = commit_partitions(table, CITIES, dry_run=True, require_existing=False).to_dict()
            for city in CITIES:
                writes = written.get(city, set())
                got = poke["partitions"][city]
                if not writes:
                    assert got["decision"] == "MISSING", (city, got)
                    continue
                assert (got["writes"], got["first_write"]) == (len(writes), min(writes)), (city, got)
            unseen = {w for ws in written.values() for w in ws} - polled - active
            STATS["pokes that indexed writes archived since the last poke"] += bool(unseen)
            polled = {w for ws in written.values() for w in ws}
        expected = sorted(model.values())
        assert _rows(read_snapshot(table)) == expected, f"ours after {step}"
        hudi = HudiTableBuilder.from_base_uri(str(table.base_path)).build().read()
        assert (_rows(pa.Table.from_batches(hudi)) if hudi else []) == expected, f"hudi-rs after {step}"


def test_merge_archival_histories_exercised_what_they_claim() -> None:
    """Runs after the history test: merges ran, both clean policies deleted files, savepoints kept
    replaced files and were deleted, archival held replacecommits back (also after such a deletion)
    and archived them once cleaned, and pokes indexed writes archived before they saw them."""
    if STATS["examples"] < 10:
        pytest.skip("the history test did not run (or ran too few examples) in this session")
    for what in (
        "merges",
        "cleans by fileversions that deleted files",
        "cleans by commits that deleted files",
        "savepoints deleted while replaced files were on disk",
        "archivals held back by a replacecommit with replaced files",
        "... whose files a deleted savepoint had kept",
        "replacecommits archived",
        "pokes that indexed writes archived since the last poke",
    ):
        SUMMARY.append(f"merge archival: {what}: {STATS[what]}")
        assert STATS[what], f"never happened: {what}"
