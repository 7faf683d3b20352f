"""hudi-rs as the referee of the MDT ``files`` partition bytes we write.

hudi-rs (0.5) lists a v8/v9 table through its metadata table whenever ``hoodie.table.metadata.partitions``
holds ``files`` (``Table::is_metadata_table_enabled``; no read option needed): it merges the latest
slice of ``files-0000-0`` (HFile base file, HFILE_DATA log blocks) in
``read_metadata_table_files_partition``, not a storage listing. So:
- v9 (Hudi 1.1, HUDI dialect): the MDT base file re-encoded by our writer is Java's, byte for byte;
  then an MDT compaction of our own (a new base file we write, holding the merged listing, at a new
  MDT commit) is read unchanged, and with a data file left out of it that file's rows disappear;
- v8 (Hudi 1.0, HBASE dialect): the same with the HFILE_DATA block of the MDT's last log file;
- a listing of a file that is not in storage makes hudi-rs fail naming it: it really lists through
  the MDT (a fallback to storage listing would read the table unchanged).
The reference for "rows disappear" is our own reader, which lists storage, on a copy of the table
with the file deleted.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hudi import HudiTableBuilder

from airflow_lake_provider.lake.format.hfile import HFileContent, read_hfile, write_hfile
from airflow_lake_provider.lake.log_file.hfile_block import (
    SCHEMA_INFO,
    decode_hfile_block,
    decode_hfile_cells,
    encode_records,
    hfile_data_block,
    hfile_of_block,
)
from airflow_lake_provider.lake.log_file.log_format import BlockType, HeaderKey, parse_log_bytes
from airflow_lake_provider.lake.storage import open_storage
from airflow_lake_provider.lake.table.metadata.files import read_files_partition
from airflow_lake_provider.lake.table.reader import read_snapshot
from airflow_lake_provider.lake.table.table import LakeTable

Records = list[tuple[str, dict[str, Any]]]

V9 = "mor_avro_v9_txns_simple_meta"  # Hudi 1.1: the HUDI dialect; the base file lists the first writes
# The clustering's base file in region=apac: 4 of the 12 rows, listed by an MDT log block.
V9_APAC = "e5de8884-c15f-4225-8adf-4f15b351534b-0_0-248-635_20260307162619269.parquet"
V8 = "mdt_basic_mor_avro_v8_nonpartitioned"  # Hudi 1.0: the HBASE dialect
V8_LOG = ".ccfdc9b6-b2d0-438f-a236-40b797bf07ea-0_20260101054337037.log.1_0-167-518"  # the last write
GHOST = "0badf00d-0000-0000-0000-000000000000-0_0-1-1_20260101054316354.parquet"


def _rows(table: pa.Table) -> list[str]:
    return sorted(repr(row) for row in table.to_pylist())


def _hudi_rs(path: Path) -> list[str]:
    batches = HudiTableBuilder.from_base_uri(str(path)).build().read()
    return _rows(pa.Table.from_batches(batches))


def _ours(path: Path) -> list[str]:
    """Our snapshot read, which lists storage (no MDT)."""
    return _rows(read_snapshot(LakeTable.open(path)))


def _without_files(files: Sequence[Path], table: Path, into: Path) -> Path:
    """A copy of ``table`` with ``files`` (paths under it) deleted: the listing reference."""
    shutil.copytree(table, into)
    for path in files:
        (into / path.relative_to(table)).unlink()
    return into


def _drop(records: Records, key: str, names: Sequence[str]) -> Records:
    out = []
    for k, record in records:
        if k == key:
            files = {n: i for n, i in record["filesystemMetadata"].items() if n not in names}
            assert len(files) == len(record["filesystemMetadata"]) - len(names)
            record = {**record, "filesystemMetadata": files}
        out.append((k, record))
    return out


def _live(files: dict[str, int]) -> dict[str, dict[str, Any]]:
    return {name: {"size": size, "isDeleted": False} for name, size in files.items()}


def _add(records: Records, key: str, name: str, size: int) -> Records:
    return [
        (k, {**r, "filesystemMetadata": {**r["filesystemMetadata"], **_live({name: size})}})
        if k == key
        else (k, r)
        for k, r in records
    ]


def _rewrite_base(base: Path, edit: Callable[[Records], Records]) -> None:
    """Write the MDT base HFile again with our writer, its records passed through ``edit``."""
    data = base.read_bytes()
    hfile = read_hfile(data, str(base))
    schema = hfile.content.info(SCHEMA_INFO)
    records = [(k, dict(r)) for k, r in decode_hfile_cells(hfile, schema, str(base))]
    cells = tuple(encode_records(edit(records), schema.decode()))
    content = HFileContent(cells, hfile.content.file_info, hfile.content.meta_blocks)
    base.write_bytes(write_hfile(content, hfile.settings()))


def _rewrite_log(log: Path, edit: Callable[[Records], Records]) -> None:
    """Write the MDT log file's (single) HFILE_DATA block again with our writer, edited."""
    (block,) = parse_log_bytes(log.read_bytes(), str(log))
    assert block.block_type is BlockType.HFILE_DATA
    schema = block.header[HeaderKey.SCHEMA]
    records = [(k, dict(r)) for k, r in decode_hfile_block(block)]
    schema_first = next(iter(block.header)) is HeaderKey.SCHEMA
    settings = hfile_of_block(block).settings()
    instant = block.header[HeaderKey.INSTANT_TIME]
    log.write_bytes(hfile_data_block(edit(records), schema, instant, settings, schema_first=schema_first))


def _compact_mdt(table: Path, at: str, done: str) -> Path:
    """An MDT compaction of our own: a new ``files`` base file at instant ``at`` holding the merged
    listing (the records of the old base file with their merged file maps), completed at ``done``
    (the plan and commit files are copies of the table's MDT compaction's). Every existing MDT log
    completed earlier, so the new slice is the base file alone. Returns the new base file."""
    listing = read_files_partition(open_storage(table))
    old = table / listing.base_file
    timeline = table / ".hoodie/metadata/.hoodie/timeline"
    (prior,) = sorted(timeline.glob("*.compaction.requested"))
    stamp = prior.name.split(".")[0]
    for suffix in ("compaction.requested", "compaction.inflight"):
        shutil.copyfile(timeline / f"{stamp}.{suffix}", timeline / f"{at}.{suffix}")
    (commit,) = timeline.glob(f"{stamp}_*.commit")
    shutil.copyfile(commit, timeline / f"{at}_{done}.commit")
    new = old.parent / f"files-0000-0_0-0-0_{at}.hfile"
    shutil.copyfile(old, new)

    def merged(records: Records) -> Records:
        files = {"__all_partitions__": dict.fromkeys(listing.partitions, 0), **listing.files}
        return [(k, {**r, "filesystemMetadata": _live(dict(files[k]))}) for k, r in records]

    _rewrite_base(new, merged)
    assert read_files_partition(open_storage(table)).base_file == str(new.relative_to(table))
    return new


def test_hudi_rs_reads_the_v9_base_hfile_we_write(hudi_table_zip, tmp_path: Path) -> None:
    table = hudi_table_zip(V9)
    base = table / read_files_partition(open_storage(table)).base_file
    original = base.read_bytes()
    _rewrite_base(base, lambda records: records)
    assert base.read_bytes() == original  # our writer's bytes are Java's
    unchanged = _hudi_rs(table)
    assert unchanged == _ours(table)
    assert len(unchanged) == 12

    ours = _compact_mdt(table, "20260307162630000", "20260307162630500")
    written = ours.read_bytes()
    assert _hudi_rs(table) == unchanged

    _rewrite_base(ours, lambda records: _drop(records, "region=apac", [V9_APAC]))
    gone = _without_files([table / "region=apac" / V9_APAC], table, tmp_path / "gone")
    expected = _ours(gone)
    assert len(expected) == len(unchanged) - 4
    assert _hudi_rs(table) == expected

    ours.write_bytes(written)
    _rewrite_base(ours, lambda records: _add(records, "region=apac", GHOST, 1000))
    with pytest.raises(Exception, match=GHOST.split("_")[0]):
        _hudi_rs(table)


def test_hudi_rs_reads_the_v8_hfile_log_block_we_write(hudi_table_zip, tmp_path: Path) -> None:
    table = hudi_table_zip(V8)
    (log_rel,) = read_files_partition(open_storage(table)).log_files
    log = table / log_rel
    original = log.read_bytes()
    _rewrite_log(log, lambda records: records)
    assert log.read_bytes() == original
    unchanged = _hudi_rs(table)
    assert unchanged == _ours(table)

    _rewrite_log(log, lambda records: _drop(records, ".", [V8_LOG]))
    expected = _ours(_without_files([table / V8_LOG], table, tmp_path / "gone"))
    assert expected != unchanged
    assert _hudi_rs(table) == expected

    log.write_bytes(original)
    _rewrite_log(log, lambda records: _add(records, ".", GHOST, 1000))
    with pytest.raises(Exception, match=GHOST.split("_")[0]):
        _hudi_rs(table)
