"""What a maintained write reads besides its data (``benchmarks/mdt_upkeep.py`` measures the cost):
the MDT timeline once per step that needs it, the table's column stats index definition once per
write (not twice per file written), the data timeline the write already holds not read again for
the partition stats. Counted over a maintained upsert of the Spark-written v9 MOR table keeping
``files``, ``column_stats`` and ``partition_stats``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from mdt_tables import keep_files_partition_only

from airflow_lake_provider.lake.storage.local import LocalStorage
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import write

MAINTAIN = {"lake.metadata-table.maintain": "true", "hoodie.cleaner.policy.failed.writes": "NEVER"}
MDT_TIMELINE = ".hoodie/metadata/.hoodie/timeline"
DATA_TIMELINE = ".hoodie/timeline"
INDEX_DEFINITION = ".hoodie/.index_defs/index.json"


def _upsert_batch(path: Path) -> pa.Table:
    """Two rows: the first key updated (a log file), one new key (a base file)."""
    rows = read_snapshot(LakeTable.open(path))
    rows = rows.drop_columns([c for c in rows.column_names if c.startswith("_hoodie_")])
    first = rows.sort_by("txn_id").slice(0, 1)
    new = first.set_column(0, "txn_id", pa.array(["reads-new-1"]))
    batch = pa.concat_tables([first, new])
    ts = pa.array([v + 1 for v in batch.column("txn_ts").to_pylist()], pa.int64())
    return batch.set_column(batch.column_names.index("txn_ts"), "txn_ts", ts)


def _counted(monkeypatch: pytest.MonkeyPatch, table: Path) -> tuple[Counter[str], Counter[str]]:
    """(reads, listings) by table-relative path, of every local storage over ``table``."""
    reads: Counter[str] = Counter()
    listings: Counter[str] = Counter()
    read, list_names = LocalStorage.read, LocalStorage.list_names

    def rel(storage: LocalStorage, path: str) -> str:
        return Path(storage._path(path)).relative_to(table).as_posix()

    def counting_read(self: LocalStorage, path: str) -> bytes:
        reads[rel(self, path)] += 1
        return read(self, path)

    def counting_list(self: LocalStorage, path: str = "") -> list[str]:
        listings[rel(self, path)] += 1
        return list_names(self, path)

    monkeypatch.setattr(LocalStorage, "read", counting_read)
    monkeypatch.setattr(LocalStorage, "list_names", counting_list)
    return reads, listings


def test_a_maintained_write_reads_the_mdt_timeline_and_index_definition_once_per_need(
    hudi_table_zip, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = keep_files_partition_only(
        hudi_table_zip("mor_avro_v9_txns_simple_meta"), ("column_stats", "partition_stats")
    )
    batch = _upsert_batch(path)
    table = LakeTable.open(path)
    reads, listings = _counted(monkeypatch, path.resolve())
    result = write(table, batch, "upsert", options=MAINTAIN)
    assert (result.inserted, result.updated) == (1, 1)
    # MDT timeline: the orphans check, under the MDT commit lock the check for crashed actions'
    # pending deltacommits, requested and inflight (one check: created together), completed, the
    # stats read (partition_stats: the write only grew its partitions); after the commit the MDT's
    # services (once, nothing due changes it; their clean planning lists the partitions over that
    # same timeline); no data archival's MDT bound (archival is not due by the commit count). Data
    # timeline: the write's own reads (before its instant, requested, inflight, completed), none
    # for the stats read nor the MDT's services (neither compaction nor archival is due); the
    # archival's. The index definition: once for the write's files.
    counts = (listings[MDT_TIMELINE], listings[DATA_TIMELINE], reads[INDEX_DEFINITION])
    assert counts == (6, 5, 1)


def test_a_write_on_a_table_without_an_mdt_asks_storage_for_it_only_in_its_guards(
    hudi_table_zip, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard before the write looks for ``.hoodie/metadata/`` (the archival after it relies on
    the write's); the MDT writer's openings and the MDT's services after the commit see from the
    properties (no ``files`` partition listed) that none is kept and do not ask again (on S3, each
    would be a request: 5 before, for every write)."""
    path = hudi_table_zip("mor_avro_v9_txns_simple_nometa").resolve()
    batch = _upsert_batch(path)
    asked: Counter[str] = Counter()
    exists = LocalStorage.exists

    def counting_exists(self: LocalStorage, rel: str) -> bool:
        asked[Path(self._path(rel)).relative_to(path).as_posix()] += 1
        return exists(self, rel)

    monkeypatch.setattr(LocalStorage, "exists", counting_exists)
    result = write(LakeTable.open(path), batch, "upsert")
    assert (result.inserted, result.updated) == (1, 1)
    assert asked[".hoodie/metadata"] == 1  # the write's guard


def test_a_maintained_write_does_not_read_back_the_log_files_it_wrote(
    hudi_table_zip, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The column stats of the write's new log file come from the rows its writer encoded (the
    block is not decoded back); the new base file's come from its footer."""
    path = keep_files_partition_only(
        hudi_table_zip("mor_avro_v9_txns_simple_meta"), ("column_stats", "partition_stats")
    )
    batch = _upsert_batch(path)
    table = LakeTable.open(path)
    reads, _ = _counted(monkeypatch, path.resolve())
    result = write(table, batch, "upsert", options=MAINTAIN)
    logs = [f for f in result.files if ".log." in f]
    assert len(logs) == 1 and len(result.files) == 2
    assert [reads[f] for f in logs] == [0]


@pytest.mark.parametrize("meta", [True, False])
def test_a_write_keeps_its_log_rows_only_for_a_kept_mdt(
    hudi_table_zip, monkeypatch: pytest.MonkeyPatch, meta: bool
) -> None:
    """The rows of the logs a write appends are held until its commit only for the MDT's column
    stats: without an MDT they are not kept (a large upsert would hold all its rows at once)."""
    from airflow_lake_provider.lake.table.write import writer as writer_module

    name = "mor_avro_v9_txns_simple_meta" if meta else "mor_avro_v9_txns_simple_nometa"
    path = hudi_table_zip(name)
    if meta:
        path = keep_files_partition_only(path, ("column_stats", "partition_stats"))
    jobs: list[writer_module._WriteJob] = []
    real = writer_module._WriteJob

    class Recorded(real):  # type: ignore[misc,valid-type]
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            jobs.append(self)

    monkeypatch.setattr(writer_module, "_WriteJob", Recorded)
    result = write(LakeTable.open(path), _upsert_batch(path), "upsert", options=MAINTAIN)
    logs = [f for f in result.files if ".log." in f]
    assert len(logs) == 1 and len(jobs) == 1
    assert sorted(jobs[0].log_rows) == (logs if meta else [])
