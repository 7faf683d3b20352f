"""The Hudi 1.x test tables that have a metadata table (``tests/data/hudi-tables-1x``), and the
HFiles and HFILE_DATA log blocks in them."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

from tree_digest import tree_digest

DATA_1X = Path(__file__).parent / "data" / "hudi-tables-1x"
# Every zip of hudi-tables-1x whose table has .hoodie/metadata/files (all but the v8 COW tables and
# the *_nometa ones).
MDT_TABLES = (
    "cow_v9_lance_nonpartitioned",
    "cow_v9_lance_txns_nonpart",
    "cow_v9_lance_txns_simple",
    "cow_v9_timebasedkeygen_epochmillis",
    "cow_v9_timebasedkeygen_nonhivestyle",
    "cow_v9_timebasedkeygen_unixtimestamp",
    "cow_v9_txns_complex_meta",
    "cow_v9_txns_nonpart_meta",
    "cow_v9_txns_simple_meta",
    "cow_v9_txns_simple_overwrite",
    "mdt_basic_mor_avro_v8_nonpartitioned",
    "mor_avro_v9_lance_nonhivestyle",
    "mor_avro_v9_nonpartitioned_rollback",
    "mor_avro_v9_timebasedkeygen_nonhivestyle",
    "mor_avro_v9_txns_complex_meta",
    "mor_avro_v9_txns_nonpart_meta",
    "mor_avro_v9_txns_simple_meta",
    "mor_avro_v9_txns_simple_overwrite",
)


def mdt_files(table: Path, suffix: str) -> Iterator[Path]:
    """Files under the table's .hoodie/metadata/ whose names end with / contain ``suffix``."""
    for path in sorted((table / ".hoodie" / "metadata").rglob("*")):
        if path.is_file() and suffix in path.name and "/.hoodie/metadata/.hoodie/" not in str(path):
            yield path


def keep_files_partition_only(table: Path, also: tuple[str, ...] = ()) -> Path:
    """Drop every MDT partition but ``files`` (and those in ``also`` the table has) from ``table``
    as Hudi drops an index partition (``HoodieBackedTableMetadataWriter.dropMetadataPartitions``):
    ``hoodie.table.metadata.partitions`` first, then the partition's folder (the test tables have no
    pending ``indexing`` instant)."""
    props = table / ".hoodie" / "hoodie.properties"
    lines = props.read_text().splitlines()
    key = "hoodie.table.metadata.partitions="
    (listed,) = [line.split("=", 1)[1].split(",") for line in lines if line.startswith(key)]
    assert "files" in listed
    kept = [p for p in listed if p == "files" or p in also]
    props.write_text(
        "\n".join(key + ",".join(kept) if line.startswith(key) else line for line in lines) + "\n"
    )
    for folder in (table / ".hoodie" / "metadata").iterdir():
        if folder.is_dir() and folder.name not in (*kept, ".hoodie"):
            shutil.rmtree(folder)
    return table


def mdt_digest(table: Path) -> dict[str, str]:
    """The table's MDT files and their digests (not our instant clock's lock file under its
    ``.hoodie/.aux/``)."""
    digest = tree_digest(table / ".hoodie" / "metadata")
    return {k: v for k, v in digest.items() if not k.startswith(".hoodie/.aux/")}


def mdt_files_of(table: Path, instant: str) -> list[str]:
    """Every file of ``table``'s MDT named with ``instant`` (timeline files and log files), relative
    to the MDT's folder."""
    mdt = table / ".hoodie/metadata"
    return sorted(str(p.relative_to(mdt)) for p in mdt.rglob(f"*{instant}*") if p.is_file())
