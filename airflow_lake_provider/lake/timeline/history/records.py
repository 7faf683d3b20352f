"""The rows of the LSM history's parquet files: Hudi 1.x's ``HoodieLSMTimelineInstant`` records.

Java writes them through avro-parquet, so each file's footer carries the Avro writer schema under
``parquet.avro.schema`` (and ``writer.model.name=avro``); Java's ``AvroParquetReader`` reads the
records by that schema. We write the same parquet columns (avro-parquet's mapping of the Avro
schema: nullable strings as ``optional binary (STRING)``, nullable bytes as ``optional binary``,
the int as ``required int32``), the same footer keys, and gzip, Hudi's default codec. One
difference Java does not read: Arrow names the parquet root ``schema`` where avro-parquet names it
after the record.

``metadata`` holds the completed instant file's bytes as they were in the active timeline (absent
for an empty file); ``plan`` holds the bytes of the requested file of a clean, compaction or log
compaction, and of a replacecommit or clustering the inflight file's bytes if it has any, else its
requested file's (Hudi's ``MetadataConversionUtils.createLSMTimelineInstant``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lake_provider.lake.timeline.avro import load_schema_text

SCHEMA_STEM = "HoodieLSMTimelineInstant"
AVRO_SCHEMA_KEY = "parquet.avro.schema"
MODEL_KEY = "writer.model.name"
# Hudi's LSM_TIMELINE_INSTANT_VERSION_1: the version every record is written with.
RECORD_VERSION = 1
COMPRESSION = "gzip"
# Rows per row group: a lookup of one instant in a compacted file reads the group whose instantTime
# statistics hold it, not the whole file (Java writes one group per 120 MB and reads either).
ROW_GROUP_ROWS = 1024

ARROW_SCHEMA = pa.schema(
    [
        pa.field("instantTime", pa.string()),
        pa.field("completionTime", pa.string()),
        pa.field("action", pa.string()),
        pa.field("metadata", pa.binary()),
        pa.field("plan", pa.binary()),
        pa.field("version", pa.int32(), nullable=False),
    ]
)
TIME_COLUMNS = ("instantTime", "completionTime", "action")


@dataclass(frozen=True)
class ArchivedInstant:
    """One completed instant of the archived timeline: its requested and completion times, action."""

    instant_time: str
    completion_time: str | None
    action: str

    @property
    def sort_key(self) -> tuple[str, str, str]:
        """Timeline order (requested time, then action; a missing completion time sorts first)."""
        return self.instant_time, self.action, self.completion_time or ""


@dataclass(frozen=True)
class ArchivedEntry:
    """An archived instant with the bytes it carried on the active timeline."""

    instant: ArchivedInstant
    metadata: bytes | None = None
    plan: bytes | None = None


# The pending actions whose requested file is the plan archived with the instant.
_PLAN_IN_REQUESTED = frozenset({"compaction", "logcompaction"})
# Those whose inflight file (when not empty) is archived as the plan, else the requested file.
_PLAN_IN_INFLIGHT = frozenset({"replacecommit", "clustering"})


def archived_entry(
    instant: ArchivedInstant,
    pending_action: str,
    completed: bytes,
    requested: bytes | None = None,
    inflight: bytes | None = None,
) -> ArchivedEntry:
    """The record Hudi archives for one completed instant, from its active timeline files' bytes.

    ``instant.action`` is the completed file's action and ``pending_action`` the requested file's
    (``compaction`` for a compaction completed as ``commit``, ``clustering`` for a clustering
    completed as ``replacecommit``); ``requested`` and ``inflight`` are None where the file is gone.
    """
    plan: bytes | None = None
    if pending_action == "clean":
        plan = requested if requested is not None else inflight  # the first pending file's
    elif pending_action in _PLAN_IN_REQUESTED:
        plan = requested
    elif pending_action in _PLAN_IN_INFLIGHT:
        plan = inflight or requested or None
    return ArchivedEntry(instant, completed or None, plan)


@cache
def avro_schema() -> dict[str, Any]:
    """The ``HoodieLSMTimelineInstant`` schema as shipped (Hudi's own ``.avsc``)."""
    return load_schema_text(SCHEMA_STEM)


@cache
def footer_schema_json() -> str:
    """The writer schema as Java puts it in the footer: the compiled class's schema, in which every
    string is a Java ``String`` (Hudi generates its Avro classes with ``stringType=String``), in
    Avro's compact JSON."""
    return json.dumps(_java_strings(avro_schema()), separators=(",", ":"))


def _java_strings(node: Any) -> Any:
    if node == "string":
        return {"type": "string", "avro.java.string": "String"}
    if isinstance(node, list):
        return [_java_strings(n) for n in node]
    if isinstance(node, dict):
        if "fields" in node:
            return {**node, "fields": [{**f, "type": _java_strings(f["type"])} for f in node["fields"]]}
        return node
    return node


def write_records(sink: IO[bytes], entries: Sequence[ArchivedEntry]) -> None:
    """Write ``entries`` (in the given order) as one parquet file of ``HoodieLSMTimelineInstant`` rows."""
    write_table(sink, to_table(entries))


def to_table(entries: Iterable[ArchivedEntry]) -> pa.Table:
    rows = list(entries)
    return pa.Table.from_pydict(
        {
            "instantTime": [e.instant.instant_time for e in rows],
            "completionTime": [e.instant.completion_time for e in rows],
            "action": [e.instant.action for e in rows],
            "metadata": [e.metadata for e in rows],
            "plan": [e.plan for e in rows],
            "version": [RECORD_VERSION] * len(rows),
        },
        schema=ARROW_SCHEMA,
    )


def write_table(sink: IO[bytes], table: pa.Table) -> None:
    """Write rows already in ``ARROW_SCHEMA`` (a compaction's concatenated inputs) as one file."""
    # Footer keys only: Arrow's own schema copy (ARROW:schema) is not something Java writes.
    with pq.ParquetWriter(sink, ARROW_SCHEMA, compression=COMPRESSION, store_schema=False) as writer:
        writer.add_key_value_metadata({AVRO_SCHEMA_KEY: footer_schema_json(), MODEL_KEY: "avro"})
        writer.write_table(table.cast(ARROW_SCHEMA), row_group_size=ROW_GROUP_ROWS)


def read_table(source: Any, columns: Sequence[str] | None = None) -> pa.Table:
    """The rows of one history file (``columns`` only), as a table in ``ARROW_SCHEMA``'s names."""
    return pq.ParquetFile(source).read(columns=list(columns) if columns is not None else None)


def read_range(
    source: Any, start: str | None, end: str | None, columns: Sequence[str] | None = None
) -> pa.Table:
    """The rows (``columns`` only) of one history file's row groups whose ``instantTime``
    statistics overlap ``[start, end]`` (every group where statistics are missing)."""
    parquet_file = pq.ParquetFile(source)
    column = parquet_file.schema_arrow.get_field_index("instantTime")
    groups = []
    for g in range(parquet_file.metadata.num_row_groups):
        stats = parquet_file.metadata.row_group(g).column(column).statistics
        if (
            stats is None
            or not stats.has_min_max
            or ((start is None or stats.max >= start) and (end is None or stats.min <= end))
        ):
            groups.append(g)
    wanted = list(columns) if columns is not None else None
    if len(groups) == parquet_file.metadata.num_row_groups:
        return parquet_file.read(columns=wanted)
    return parquet_file.read_row_groups(groups, columns=wanted)


def instants_of(table: pa.Table) -> list[ArchivedInstant]:
    times = table.column("instantTime").to_pylist()
    completions = table.column("completionTime").to_pylist()
    actions = table.column("action").to_pylist()
    return [ArchivedInstant(t, c, a) for t, c, a in zip(times, completions, actions, strict=True)]
