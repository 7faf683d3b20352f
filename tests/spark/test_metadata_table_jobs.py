"""The Spark jobs on a Spark-written table with Hudi's metadata table added: the write, compaction and
clean jobs refuse in the driver before anything is written (the tree byte-identical); the write job
with ``--option hoodie.metadata.enable=false`` drops the metadata table as Hudi does, then writes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hudi import HudiTableBuilder
from metadata_table_support import add_metadata_table, tree_digest

from airflow_lake_provider.lake.errors import TableConfigError
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable

pytestmark = pytest.mark.spark
MOR = "morparquet_v6_simplekeygen_nonhivestyle"


def _job(name: str, table: Path, source: Path, *extra: str) -> tuple[Any, list[str]]:
    from airflow_lake_provider.spark_jobs import clean, compact, write

    if name == "write":
        return write, ["--table", str(table), "--input", str(source), "--operation", "upsert", *extra]
    if name == "compact":
        return compact, ["--table", str(table), *extra]
    return clean, [
        "--table",
        str(table),
        "--option",
        "hoodie.cleaner.policy=KEEP_LATEST_FILE_VERSIONS",
        *extra,
    ]


def _rows(table: pa.Table) -> list[tuple]:
    return sorted((r["_hoodie_partition_path"], r["id"], r["name"]) for r in table.to_pylist())


@pytest.mark.parametrize(
    ("job", "drop"), [("write", False), ("compact", False), ("clean", False), ("write", True)]
)
def test_job_refuses_or_drops_the_metadata_table(
    spark: Any, hudi_table_zip: Callable[[str], Path], tmp_path: Path, job: str, drop: bool
) -> None:
    path = hudi_table_zip(MOR)
    add_metadata_table(path)
    existing = read_snapshot(LakeTable.open(path))
    source = tmp_path / "in.parquet"
    # One existing key (id 1, partition 10) updated with the table's own schema.
    first = existing.filter(pa.compute.equal(existing.column("id"), 1)).drop_columns(
        [c for c in existing.column_names if c.startswith("_hoodie_")]
    )
    pq.write_table(first.set_column(first.schema.get_field_index("name"), "name", pa.array(["Zed"])), source)
    module, args = _job(job, path, source, *(["--option", "hoodie.metadata.enable=false"] if drop else []))
    before = tree_digest(path)
    if not drop:
        action = {"write": r"write \(upsert\)", "compact": "compaction execute", "clean": "clean"}[job]
        with pytest.raises(TableConfigError, match=rf"^{action} refused: {path} has Hudi's metadata table"):
            module.run(module.parse_args(args), spark)
        assert tree_digest(path) == before
        return
    result = module.run(module.parse_args(args), spark)
    assert result["outcome"] == "COMMITTED" and result["updated"] == 1
    assert not (path / ".hoodie" / "metadata").exists()
    want = sorted((p, i, "Zed" if i == 1 else n) for p, i, n in _rows(existing))
    assert _rows(read_snapshot(LakeTable.open(path))) == want
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    assert _rows(pa.Table.from_batches(batches)) == want


def _mdt_instant(path: Path, instant: str) -> tuple[list[str], list[str]]:
    """The MDT's timeline files of ``instant`` and its log files written at ``instant``."""
    timeline = sorted(p.name for p in (path / ".hoodie/metadata/.hoodie/timeline").glob(f"{instant}*"))
    logs = sorted(
        str(p.relative_to(path / ".hoodie/metadata"))
        for p in (path / ".hoodie/metadata").glob(f"*/.*_{instant}.log.*")
    )
    return timeline, logs


@pytest.mark.slow
def test_lake_compact_and_clean_on_spark_keep_the_metadata_table_under_the_opt_in(
    hudi_table_zip: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """``lake compact --spark`` and ``lake clean --spark`` (spark-submit, local[2]) on a copy of a
    Spark-written v9 MOR table with an MDT, given ``lake.metadata-table.maintain=true``: the job gets
    the option, its driver writes the MDT deltacommit once, at commit time (one requested, inflight
    and completed deltacommit, one log file per maintained MDT partition), before the data instant
    completes; hudi-rs, listing through the MDT, reads the rows it read before, and ``lake
    metadata-table --check`` finds no difference."""
    from airflow_lake_provider.lake.cli import main
    from tests.unit.lake.table.metadata.test_services import (
        ONE_VERSION,
        _data_completion,
        _mdt_completion,
        _prepared,
    )
    from tests.unit.lake.table.metadata.test_services import _rows as rows

    path = _prepared(hudi_table_zip, "mor_avro_v9_txns_simple_meta")
    kept = LakeTable.open(path).config.properties["hoodie.table.metadata.partitions"].split(",")
    before = rows(pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read()))
    opt = ["--option", "lake.metadata-table.maintain=true"]

    assert main(["compact", str(path), "--mode", "run", "--force", "--spark", *opt]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["outcome"] == "COMPLETED", done
    c = done["schedule"]["instant"]
    assert done["execute"]["options"] == {"lake.metadata-table.maintain": "true"}

    options = [a for k, v in ONE_VERSION.items() for a in ("--option", f"{k}={v}")]
    assert main(["clean", str(path), "--spark", *options]) == 0
    cleaned = json.loads(capsys.readouterr().out)
    assert cleaned["outcome"] == "CLEANED" and cleaned["deleted_files"] > 0, cleaned
    t = cleaned["instant"]

    for instant, action, partitions in ((c, "commit", kept), (t, "clean", ["files", "column_stats"])):
        completion = _mdt_completion(path, instant)
        assert completion < _data_completion(path, instant, action)
        timeline, logs = _mdt_instant(path, instant)
        assert timeline == [
            f"{instant}.deltacommit.inflight",
            f"{instant}.deltacommit.requested",
            f"{instant}_{completion}.deltacommit",
        ]
        assert sorted({log.split("/")[0] for log in logs}) == sorted(partitions), logs
        groups = [log.split("/")[1].split("_")[0] for log in logs]
        assert len(groups) == len(set(groups)), logs  # one log file per MDT file group
    after = rows(pa.Table.from_batches(HudiTableBuilder.from_base_uri(str(path)).build().read()))
    assert after == before == rows(read_snapshot(LakeTable.open(path)))
    assert main(["metadata-table", str(path), "--check"]) == 0
    assert json.loads(capsys.readouterr().out)["consistent"] is True
