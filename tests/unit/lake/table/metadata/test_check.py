"""``lake metadata-table --check`` on the stats partitions: ``column_stats`` and ``partition_stats``
compared with a recomputation from the data files (a Spark-written v9 table whose MDT keeps both)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from mdt_tables import keep_files_partition_only

from airflow_lake_provider.lake.cli import main
from airflow_lake_provider.lake.services.clean.executor import run_clean
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.writer import write
from tests.unit.lake.table.metadata.test_commit import INDEXES, MAINTAIN, TABLES, _batch

NAME = "cow_v9_txns_simple_meta"


def _report(path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:  # noqa: ANN001
    capsys.readouterr()
    rc = main(["metadata-table", str(path), "--check"])
    return rc, json.loads(capsys.readouterr().out)


def test_check_compares_the_stats_partitions_with_a_recomputation(hudi_table_zip, capsys) -> None:
    path = keep_files_partition_only(hudi_table_zip(NAME), INDEXES)
    rc, report = _report(path, capsys)
    assert rc == 0 and report["consistent"] is True
    assert report["column_stats"] == {
        "consistent": True,
        "files": 17,
        "missing_files": [],
        "stats_mismatches": [],
        "unreadable_files": [],
        "unverifiable_files": [],
    }
    assert report["partition_stats"] == {
        "consistent": True,
        "partitions": 3,
        "missing_partitions": [],
        "stats_mismatches": [],
        "unreadable_partitions": [],
        "unverifiable_partitions": [],
    }
    # A maintained write, then its stats logs lost: its new files have no column stats (the file it
    # rewrote neither: a new file slice), and its partition's stats are the write's before.
    key, ordering, _partition, new_keys = TABLES[NAME]
    snapshot = read_snapshot(LakeTable.open(path))
    batch = _batch(snapshot, key, ordering, [0, 0], [snapshot.column(key).to_pylist()[0], new_keys[0]])
    done = write(LakeTable.open(path), batch, "upsert", options=MAINTAIN)
    written = sorted(s.path for s in done.metadata.write_stats())
    assert len(written) == 2 and all(p.startswith("region=apac/") for p in written)
    for log in (path / ".hoodie/metadata").glob(f"*stats/.*_{done.instant}.log.*"):
        log.unlink()
    rc, report = _report(path, capsys)
    assert rc == 1 and report["consistent"] is False
    assert (report["missing_files"], report["extra_files"], report["size_mismatches"]) == ([], [], [])
    assert report["column_stats"] == {
        "consistent": False,
        "files": 19,
        "missing_files": written,
        "stats_mismatches": [],
        "unreadable_files": [],
        "unverifiable_files": [],
    }
    assert report["partition_stats"] == {
        "consistent": False,
        "partitions": 3,
        "missing_partitions": [],
        "stats_mismatches": ["region=apac"],
        "unreadable_partitions": [],
        "unverifiable_partitions": [],
    }
    assert report["pending_instants"] == []
    # A pending action is named beside the differences (one that crashed may explain them).
    (path / ".hoodie/timeline/20991231000000000.commit.requested").write_bytes(b"")
    rc, report = _report(path, capsys)
    assert rc == 1 and report["pending_instants"] == ["commit 20991231000000000 (requested)"]


def test_check_of_an_mdt_of_files_alone_has_no_stats_sections(hudi_table_zip, capsys) -> None:
    path = keep_files_partition_only(hudi_table_zip(NAME))
    rc, report = _report(path, capsys)
    assert rc == 0 and "column_stats" not in report and "partition_stats" not in report


def test_a_partition_whose_last_write_replaced_groups_a_clean_removed_is_not_recomputed(
    hudi_table_zip, capsys
) -> None:
    """region=apac's last write is the fixture's replacecommit, whose record covers the file groups it
    replaced; a clean removes those, so the record (rightly kept) cannot be recomputed: listed as
    unverifiable, not as a mismatch (found by an adversarial run: every history failed --check
    after its first clean)."""
    path = keep_files_partition_only(hudi_table_zip(NAME), INDEXES)
    key, ordering, _partition, new_keys = TABLES[NAME]
    snapshot = read_snapshot(LakeTable.open(path))
    batch = _batch(snapshot, key, ordering, [0], [new_keys[0]])
    batch = batch.set_column(batch.column_names.index("region"), "region", pa.array(["p3"]))
    write(LakeTable.open(path), batch, "insert", options=MAINTAIN)
    assert run_clean(LakeTable.open(path), {**MAINTAIN, "hoodie.cleaner.commits.retained": "1"}).deleted_files
    rc, report = _report(path, capsys)
    assert rc == 0, report
    assert report["partition_stats"]["unverifiable_partitions"] == [
        "region=apac: its last write 20260307162454799 replaced file groups a clean has removed since"
    ]
    assert report["partition_stats"]["stats_mismatches"] == []
