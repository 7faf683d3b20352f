"""Java reads the LSM history we write: parquet-mr (through Spark) reads its rows, Java Avro parses
the footer's writer schema back to the same text and to Hudi's schema, and Jackson lays out the
manifest as we do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from airflow_lake_provider.lake.storage import LocalStorage
from airflow_lake_provider.lake.timeline.history import records
from airflow_lake_provider.lake.timeline.history.layout import HISTORY_DIR
from airflow_lake_provider.lake.timeline.history.reader import History
from airflow_lake_provider.lake.timeline.history.records import ArchivedEntry, ArchivedInstant
from airflow_lake_provider.lake.timeline.history.writer import HistoryWriter


def t(n: int) -> str:
    return f"20250101{n:09d}"


def test_parquet_mr_reads_the_rows_and_java_avro_the_schema(tmp_path: Path, spark: Any) -> None:
    storage = LocalStorage(tmp_path)
    writer = HistoryWriter(storage, batch=2)
    for n in range(3):  # two level-0 files compact into a level-1 file; one stays at level 0
        writer.append([ArchivedEntry(ArchivedInstant(t(n), t(n + 100), "clean"), b"m%d" % n, b"\x00p")])
        writer.compact()
    names = [f.name for f in History(storage).snapshot.files]
    assert names == [f"{t(0)}_{t(1)}_1.parquet", f"{t(2)}_{t(2)}_0.parquet"]

    paths = [str(tmp_path / HISTORY_DIR / name) for name in names]
    rows = spark.read.parquet(*paths).orderBy("instantTime").collect()
    assert [r.asDict() for r in rows] == [
        {
            "instantTime": t(n),
            "completionTime": t(n + 100),
            "action": "clean",
            "metadata": bytearray(b"m%d" % n),
            "plan": bytearray(b"\x00p"),
            "version": 1,
        }
        for n in range(3)
    ]

    jvm = spark.sparkContext._jvm
    # The manifest is laid out as Jackson's default pretty printer lays it out (Hudi's writer).
    manifest = storage.read(f"{HISTORY_DIR}/manifest_{History(storage).snapshot.version}").decode()
    mapper = jvm.com.fasterxml.jackson.databind.ObjectMapper()
    assert mapper.writerWithDefaultPrettyPrinter().writeValueAsString(mapper.readTree(manifest)) == manifest

    for path in paths:
        footer = pq.ParquetFile(path).metadata.metadata[b"parquet.avro.schema"].decode()
        parsed = jvm.org.apache.avro.Schema.Parser().parse(footer)
        assert parsed.toString() == footer
        shipped = jvm.org.apache.avro.Schema.Parser().parse(
            (Path(records.__file__).parents[2] / "format/schemas/HoodieLSMTimelineInstant.avsc").read_text()
        )
        fingerprint = jvm.org.apache.avro.SchemaNormalization.parsingFingerprint64
        assert fingerprint(parsed) == fingerprint(shipped)
