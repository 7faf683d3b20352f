"""Test tables with Hudi's metadata table (MDT) added, as a 0.14/0.15 Spark writer leaves them; the
tree digest (to prove a refused action changed nothing) is re-exported from ``tree_digest``."""

from __future__ import annotations

from pathlib import Path

from tree_digest import tree_digest  # noqa: F401 (the MDT tests take both from here)

# Every Spark-written table of tests/data/hudi-tables (zip names without .zip).
SPARK_TABLES = tuple(sorted(p.stem for p in (Path(__file__).parent / "data" / "hudi-tables").glob("*.zip")))

# What ``add_metadata_table`` puts under .hoodie/metadata/ (a stand-in for a real MDT: our code
# never reads these files, it only detects and deletes them).
MDT_FILES = {
    ".hoodie/hoodie.properties": b"hoodie.table.name=t_metadata\nhoodie.table.type=MERGE_ON_READ\n",
    ".hoodie/00000000000000010.deltacommit": b"{}",
    ".hoodie/20250101000000000.deltacommit.requested": b"",
    ".hoodie/20250101000000000.deltacommit.inflight": b"{}",
    ".hoodie/20250101000000000.deltacommit": b"{}",
    "files/.files-0000-0_00000000000000010.log.1_0-0-0": b"#HUDI#delete-block",
    "files/files-0000-0_0-0-0_00000000000000010.hfile": b"HFILE",
}


def add_metadata_table(table: Path, *, partitions: str = "files", files: bool = True) -> None:
    """Append ``hoodie.table.metadata.partitions`` to the table's properties and create
    ``.hoodie/metadata/files/`` (with ``MDT_FILES`` in it when ``files``)."""
    props = table / ".hoodie" / "hoodie.properties"
    text = props.read_text()
    props.write_text(
        text + ("" if text.endswith("\n") else "\n") + f"hoodie.table.metadata.partitions={partitions}\n"
    )
    mdt = table / ".hoodie" / "metadata"
    (mdt / "files").mkdir(parents=True, exist_ok=True)
    for rel, data in MDT_FILES.items() if files else ():
        (mdt / rel).parent.mkdir(parents=True, exist_ok=True)
        (mdt / rel).write_bytes(data)
