"""Random maintained histories with every action that changes the table: writes, compaction, clean,
the rollback of the latest write, savepoints and restores, and data-table archival, under
``lake.metadata-table.maintain`` with the MDT's own services due after 3 deltacommits (so MDT
compactions, cleans and archivals happen inside the histories), on copies of Spark-written v8/v9
tables. After every step: hudi-rs (listing through the MDT) reads exactly our rows, our keys are the
model's, the ``files`` partition equals a full listing and ``column_stats`` equals a recomputation.

A rollback or restore that undoes an instant an MDT compaction came after keeps that instant's MDT
deltacommit; the rollback's own deletes the files it deletes, marks their column stats deleted and
brings the partitions' stats back (on the Spark-written tables' MDTs and on one of ``files`` alone,
the ``:files`` table). Any refusal must change nothing.
"""

from __future__ import annotations

import shutil

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from property_support import derandomized, example_dir, examples, fixed_seed, tally
from tree_digest import tree_digest

from airflow_lake_provider.lake.errors import RollbackError
from airflow_lake_provider.lake.services.restore import restore
from airflow_lake_provider.lake.services.savepoint import create_savepoint
from airflow_lake_provider.lake.table.archival.executor import run_archival
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.rollback.executor import rollback
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from tests.property.test_mdt_writes import FILES_ONLY, MOR_V8, TABLES, _service, _template
from tests.unit.lake.table.metadata.test_commit import MAINTAIN, assert_consistent, assert_index_consistent

STATS = tally("maintained metadata table histories")
# The MDT's services due often; archival keeping few commits; a clean keeping one commit.
OPTIONS = {
    **MAINTAIN,
    "hoodie.metadata.compact.max.delta.commits": "3",
    "hoodie.cleaner.commits.retained": "1",
    "hoodie.keep.min.commits": "2",
    "hoodie.keep.max.commits": "3",
}
ACTIONS = [
    "upsert",
    "upsert",
    "insert",
    "delete",
    "compact",
    "clean",
    "rollback",
    "savepoint",
    "restore",
    "archive",
]

steps_st = st.lists(
    st.tuples(st.sampled_from(ACTIONS), st.integers(0, 5), st.integers(0, 2)),
    min_size=2,
    max_size=9,
)


def _latest(path) -> str | None:  # noqa: ANN001
    """The latest completed commit of the data table (write, compaction, replacecommit)."""
    commits = LakeTable.open(path).timeline().completed_commits
    return commits[-1].timestamp if commits else None


def _write(path, operation: str, pick: int, fresh: int, name: str, model: set, logged: dict) -> bool:  # noqa: ANN001
    """One maintained write of one row, the model updated as in ``test_mdt_writes`` (a re-insert of a
    key whose delete is still logged in a merge-on-read group loses to it when older); False when
    there was nothing to write."""
    key, ordering, new_keys = TABLES[name.removesuffix(FILES_ONLY)]
    snapshot = read_snapshot(LakeTable.open(path)).sort_by(key)
    groups = [n.lstrip(".").split("_", 1)[0] for n in snapshot.column("_hoodie_file_name").to_pylist()]
    data = snapshot.drop_columns([c for c in snapshot.column_names if c.startswith("_hoodie_")])
    inserting = operation == "insert"
    if not data.num_rows:
        return False
    at = pick % data.num_rows
    row = data.slice(at, 1)
    ordered = row.column(ordering)[0].as_py() + 1
    if inserting:
        new = new_keys[fresh]
        if new in model:
            return False
        row = row.set_column(row.column_names.index(key), key, pa.array([new], row.schema.field(key).type))
        if new in logged and ordered < logged[new][0]:
            STATS["re-inserts losing to a logged delete"] += 1
        else:
            logged.pop(new, None)
            model.add(new)
    elif operation == "delete":
        model.discard(row.column(key)[0].as_py())
        if LakeTable.open(path).config.is_mor:
            logged[row.column(key)[0].as_py()] = (ordered, groups[at])
    bumped = pa.array([ordered], row.schema.field(ordering).type)
    row = row.set_column(row.column_names.index(ordering), ordering, bumped)
    write(LakeTable.open(path), row, operation, options=OPTIONS)
    return True


def _refused_unchanged(path, run) -> bool:  # noqa: ANN001
    """Run ``run``; True if it completed, False if it was refused with nothing changed: a rollback
    whose fallback a clean removed or that would leave no completed commit (``fallback.py``)."""
    before = tree_digest(path)
    try:
        run()
    except RollbackError as exc:
        assert "cannot roll back" in str(exc), exc
        STATS["refused (fallback)"] += 1
        after = tree_digest(path)
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        # (our instant clock's lock file is the one file a refused action may touch)
        assert {k for k in changed if "/.aux/" not in k} == set(), changed
        return False
    return True


@fixed_seed(20261127)
@settings(max_examples=examples(12), deadline=None, derandomize=derandomized())
# A savepoint, a write, then the restore: the write's MDT deltacommit goes with it.
@example(name=MOR_V8, steps=[("savepoint", 0, 0), ("upsert", 1, 0), ("insert", 0, 1), ("restore", 0, 0)])
# Writes until the MDT compacts (3 deltacommits), then the rollback of the last write: corrected.
@example(name=MOR_V8, steps=[("upsert", 0, 0), ("upsert", 1, 0), ("upsert", 2, 0), ("rollback", 0, 0)])
# A write rolled back, then a clean and the archival of what the clean allows.
@example(
    name="cow_v9_txns_simple_meta",
    steps=[("upsert", 0, 0), ("rollback", 0, 0), ("upsert", 1, 0), ("clean", 0, 0), ("archive", 0, 0)],
)
# Found by this test: a compaction, an upsert rolled back, an upsert: Spark's last log file (of the
# slice before the compaction) vanished from the files partition (MDT archival).
@example(name=MOR_V8, steps=[("compact", 1, 1), ("upsert", 0, 0), ("rollback", 1, 0), ("upsert", 4, 0)])
# On an MDT of files alone: the rollback after the MDT compaction, then a restore across one.
@example(
    name=MOR_V8 + FILES_ONLY,
    steps=[("savepoint", 0, 0), ("upsert", 0, 0), ("upsert", 1, 0), ("upsert", 2, 0), ("rollback", 0, 0)]
    + [("upsert", 3, 0), ("restore", 0, 0)],
)
@given(name=st.sampled_from(sorted([*TABLES, MOR_V8 + FILES_ONLY])), steps=steps_st)
def test_maintained_histories_with_rollback_restore_and_archival(
    tmp_path_factory, name: str, steps: list
) -> None:
    key = TABLES[name.removesuffix(FILES_ONLY)][0]
    path = example_dir(tmp_path_factory, "mdth") / "t"
    shutil.copytree(_template(tmp_path_factory, name), path)
    mdt_timeline = path / ".hoodie/metadata/.hoodie/timeline"
    mdt_compactions = len(list(mdt_timeline.glob("*.commit")))
    model = set(read_snapshot(LakeTable.open(path)).column(key).to_pylist())
    logged: dict = {}  # key -> (the delete's ordering value, its file group), as in test_mdt_writes
    # The model after each completed data instant of ours (newest last): what a rollback of the latest
    # write or a restore to a savepoint goes back to.
    states: list[tuple[str | None, set, dict]] = [(_latest(path), set(model), dict(logged))]
    writes: set[str] = set()
    point: str | None = None
    for operation, pick, fresh in steps:
        if operation in ("upsert", "insert", "delete"):
            if not _write(path, operation, pick, fresh, name, model, logged):
                continue
            writes.add(_latest(path))
        elif operation in ("compact", "clean"):
            outcome = _service(path, operation, logged)
            STATS[f"{operation} {outcome}"] += 1
        elif operation == "archive":
            STATS[f"archive {run_archival(LakeTable.open(path), OPTIONS).outcome.value}"] += 1
        elif operation == "savepoint":
            point = states[-1][0]
            if point is None or point in {i.timestamp for i in LakeTable.open(path).timeline().savepoints()}:
                continue
            create_savepoint(LakeTable.open(path), point)
            STATS["savepoint"] += 1
        elif operation == "rollback":
            latest = _latest(path)
            if latest not in writes or states[-1][0] != latest:
                continue  # only the latest instant, and only a write of ours
            table = LakeTable.open(path)
            compactions = len(list(mdt_timeline.glob("*.commit")))
            if _refused_unchanged(
                path, lambda t=table, i=latest: rollback(t, i, force=True, options=OPTIONS)
            ):
                if compactions > mdt_compactions and any(
                    p.name.split("_")[0] > latest for p in mdt_timeline.glob("*.commit")
                ):
                    STATS["rollback done after an MDT compaction"] += 1
                states.pop()
                _, restored, restored_logged = states[-1]
                model, logged = set(restored), dict(restored_logged)
                writes.discard(latest)
                STATS["rollback done"] += 1
            else:
                STATS["rollback refused"] += 1
        elif operation == "restore":
            if point is None or point not in [s[0] for s in states]:
                continue
            table = LakeTable.open(path)
            if _refused_unchanged(path, lambda t=table, p=point: restore(t, p, OPTIONS)):
                while states[-1][0] != point:
                    states.pop()
                _, restored, restored_logged = states[-1]
                model, logged = set(restored), dict(restored_logged)
                STATS["restore done"] += 1
            else:
                STATS["restore refused"] += 1
        if operation in ("upsert", "insert", "delete", "compact") and _latest(path) != states[-1][0]:
            states.append((_latest(path), set(model), dict(logged)))
        STATS[f"{name} {operation}"] += 1
        ours = assert_consistent(path)
        assert set(ours.column(key).to_pylist()) == model, (operation, steps)
        assert_index_consistent(path, partitions=False)
    STATS["MDT compactions"] += len(list(mdt_timeline.glob("*.commit"))) - mdt_compactions


def test_histories_reached_the_rare_branches() -> None:
    """The histories above really rolled back, restored, archived and had the MDT compact."""
    if not STATS or not derandomized():
        pytest.skip("the property test did not run in this session, or drew a random sequence")
    for branch in ("rollback done", "rollback done after an MDT compaction", "restore done", "savepoint"):
        assert STATS[branch] > 0, (branch, dict(STATS))
    assert STATS["archive ARCHIVED"] > 0 and STATS["MDT compactions"] > 0, dict(STATS)
