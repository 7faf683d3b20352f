"""Random histories of maintained writes, compactions and cleans (``lake.metadata-table.maintain``) on
copies of Spark-written v8/v9 tables whose metadata table keeps ``files``, ``column_stats`` and
``partition_stats``: after every insert, upsert, delete, compaction and clean, hudi-rs (listing
through the MDT) reads exactly our rows, our keys are the model's, the files partition equals a full
listing and the stats partitions equal a recomputation (once a clean ran, the partition stats are
left out: a clean keeps them as the partition's last write computed them, file groups a Spark
clustering replaced included, as Java's does)."""

from __future__ import annotations

import shutil
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mdt_tables import DATA_1X, keep_files_partition_only
from property_support import example_dir, examples, tally

from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.services.compaction.executor import run_compaction
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write import write
from tests.unit.lake.table.metadata.test_commit import (
    INDEXES,
    MAINTAIN,
    assert_consistent,
    assert_index_consistent,
)

MOR_V8 = "mdt_basic_mor_avro_v8_nonpartitioned"
# (zip, record key, ordering field, new keys drawn from)
TABLES = {
    "cow_v9_txns_simple_meta": ("txn_id", "txn_ts", ["p-0", "p-1", "p-2"]),
    MOR_V8: ("id", "longField", [9000, 9001, 9002]),
}
FILES_ONLY = ":files"  # a TABLES name plus this: its MDT keeps files alone
STATS = tally("maintained metadata table writes")
ONE_VERSION = {
    **MAINTAIN,
    "hoodie.cleaner.policy": "KEEP_LATEST_FILE_VERSIONS",
    "hoodie.cleaner.fileversions.retained": "1",
}
_TEMPLATES: dict[str, Path] = {}


def _template(factory, name: str) -> Path:
    """The table unzipped once per run, its MDT down to the kept partitions (``files`` alone for a
    name ending in ``FILES_ONLY``)."""
    if name not in _TEMPLATES:
        zipped, files_only = name.removesuffix(FILES_ONLY), name.endswith(FILES_ONLY)
        into = factory.mktemp(f"mdt-{zipped}")
        with zipfile.ZipFile(DATA_1X / f"{zipped}.zip") as zf:
            for member in zf.infolist():
                if not member.filename.startswith("__MACOSX"):
                    zf.extract(member, into)
        (table,) = [p for p in into.iterdir() if p.is_dir() and p.name != "__MACOSX"]
        _TEMPLATES[name] = keep_files_partition_only(table, () if files_only else INDEXES)
    return _TEMPLATES[name]


steps_st = st.lists(
    st.tuples(
        st.sampled_from(["insert", "upsert", "delete", "compact", "clean"]),
        st.integers(0, 5),
        st.integers(0, 2),
    ),
    min_size=1,
    max_size=5,
)


def _service(path: Path, operation: str, logged_deletes: dict) -> str:
    """Run a maintained compaction (forgetting the logged deletes of the groups it compacted: their
    keys left the base file with them) or clean; its outcome."""
    if operation == "clean":
        return run_clean(LakeTable.open(path), ONE_VERSION).outcome.value
    scheduled, done = run_compaction(LakeTable.open(path), MAINTAIN, force=True)
    compacted = {op.file_id for op in scheduled.plan.operations} if scheduled.plan else set()
    for gone in [k for k, (_, group) in logged_deletes.items() if group in compacted]:
        del logged_deletes[gone]
    return done.outcome.value


@settings(max_examples=examples(25), deadline=None)
# Every row deleted, then an insert (the first row's values under a fresh key).
@example(name=MOR_V8, steps=[("delete", 0, 0)] * 3 + [("insert", 0, 0)])
# 9002 inserted as a copy of key 1 (ordering v+1), deleted (v+2, logged), inserted again as that
# copy (v+1): it stays deleted on merge-on-read.
@example(name=MOR_V8, steps=[("insert", 0, 2), ("delete", 3, 0), ("insert", 0, 2)])
# The same, compacted before the second insert: the delete leaves with the base file, the key is back.
@example(name=MOR_V8, steps=[("insert", 0, 2), ("delete", 3, 0), ("compact", 0, 0), ("insert", 0, 2)])
# Old file versions cleaned between upserts of a copy-on-write table (and of its Spark clustering).
@example(name="cow_v9_txns_simple_meta", steps=[("upsert", 0, 0), ("clean", 0, 0), ("upsert", 1, 0)])
@given(name=st.sampled_from(sorted(TABLES)), steps=steps_st)
def test_maintained_write_histories_keep_the_metadata_table(tmp_path_factory, name: str, steps: list) -> None:
    key, ordering, new_keys = TABLES[name]
    path = example_dir(tmp_path_factory, "mdt") / "t"
    shutil.copytree(_template(tmp_path_factory, name), path)
    first = read_snapshot(LakeTable.open(path))
    model = set(first.column(key).to_pylist())
    template = first.drop_columns([c for c in first.column_names if c.startswith("_hoodie_")])
    template = template.sort_by(key).slice(0, 1)
    # Merge-on-read keeps a delete in its group's log until compaction (none runs here), and a later
    # write of that key goes to the same group (the index finds it in the base file; our insert of an
    # existing key is an upsert): event time, a version with a smaller ordering value than the
    # delete's loses to it and the key stays deleted, as Hudi's log merge and hudi-rs decide.
    # A compaction of the group merges the delete away (``_service``).
    logged_deletes: dict = {}  # key -> (the delete's ordering value, its file group)
    mor = LakeTable.open(path).config.is_mor
    cleaned = False
    for operation, pick, fresh in steps:
        if operation in ("compact", "clean"):
            outcome = _service(path, operation, logged_deletes)
            STATS[f"{name} {operation} {outcome}"] += 1
            cleaned = cleaned or operation == "clean"
            ours = assert_consistent(path)
            assert set(ours.column(key).to_pylist()) == model
            assert_index_consistent(path, partitions=not cleaned)
            continue
        snapshot = read_snapshot(LakeTable.open(path)).sort_by(key)
        groups = [n.lstrip(".").split("_", 1)[0] for n in snapshot.column("_hoodie_file_name").to_pylist()]
        data = snapshot.drop_columns([c for c in snapshot.column_names if c.startswith("_hoodie_")])
        # (sorted by key: ``pick`` the same row whatever the order of the (random) file ids)
        inserting = operation == "insert" or (operation == "upsert" and fresh == 0)
        if not data.num_rows and not inserting:
            continue  # every row deleted: only an insert of a fresh key (a copy of the first row's)
        at = pick % data.num_rows if data.num_rows else None
        row = data.slice(at, 1) if at is not None else template
        ordered = row.column(ordering)[0].as_py() + 1
        if inserting:
            new = new_keys[fresh]
            if new in model:
                continue  # an insert of a present key would duplicate it (as Hudi's insert does)
            row = row.set_column(
                row.column_names.index(key), key, pa.array([new], row.schema.field(key).type)
            )
            if new in logged_deletes and ordered < logged_deletes[new][0]:
                STATS[f"{name} re-inserts losing to a logged delete"] += 1
            else:
                logged_deletes.pop(new, None)
                model.add(new)
        elif operation == "delete":
            model.discard(row.column(key)[0].as_py())
            if mor:
                logged_deletes[row.column(key)[0].as_py()] = (ordered, groups[at])
        bumped = pa.array([ordered], row.schema.field(ordering).type)
        row = row.set_column(row.column_names.index(ordering), ordering, bumped)
        write(LakeTable.open(path), row, "delete" if operation == "delete" else operation, options=MAINTAIN)
        STATS[f"{name} {operation}"] += 1
        ours = assert_consistent(path)
        assert set(ours.column(key).to_pylist()) == model
        assert pc.count_distinct(ours.column(key)).as_py() == ours.num_rows
        assert_index_consistent(path, partitions=not cleaned)
