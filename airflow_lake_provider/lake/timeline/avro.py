"""Avro timeline files (plans and metadata) as Avro object container files under Hudi's schemas.

The ``.avsc`` files shipped in ``schemas/`` are Apache Hudi's own; Java reads these files with
schema resolution, so writing under them keeps Java parity.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

from airflow_lake_provider.lake.errors import CorruptTimelineFileError

# fastavro is imported by the functions that use it: a fresh `lake read` of a table whose timeline
# holds no Avro file to read never loads it.

_COMMENT_RE = re.compile(r"/\*.*?\*/", re.DOTALL)
# Parse order: a schema may reference named types defined in schemas before it.
_SCHEMA_FILES = (
    "HoodieInstantInfo",
    "HoodieCleanPartitionMetadata",
    "HoodieCleanMetadata",
    "HoodieCleanerPlan",
    "HoodieCompactionOperation",
    "HoodieCompactionStrategy",
    "HoodieRollbackMetadata",
    "HoodieRollbackPlan",
    "HoodieRestorePlan",
    "HoodieRestoreMetadata",
    "HoodieSavePointMetadata",
    "HoodieSliceInfo",
    "HoodieClusteringGroup",
    "HoodieClusteringStrategy",
    "HoodieClusteringPlan",
    "HoodieRequestedReplaceMetadata",
    "HoodieCommitMetadata",
    "HoodieReplaceCommitMetadata",
    "HoodieArchivedMetaEntry",
)
# The archived-timeline entry names two record types whose schemas are not shipped. We never write
# those branches (they stay null), so stand-ins with the same names keep the entry schema whole.
_STAND_INS = tuple(
    {
        "type": "record",
        "name": name,
        "namespace": "org.apache.hudi.avro.model",
        "doc": "stand-in: this branch is never written by this package",
        "fields": [{"name": "version", "type": ["int", "null"], "default": 1}],
    }
    for name in ("HoodieCompactionMetadata", "HoodieIndexCommitMetadata")
)
# Record full names by the short names the core uses.
CLEANER_PLAN = "org.apache.hudi.avro.model.HoodieCleanerPlan"
CLEAN_METADATA = "org.apache.hudi.avro.model.HoodieCleanMetadata"
COMPACTION_PLAN = "org.apache.hudi.avro.model.HoodieCompactionPlan"
ROLLBACK_PLAN = "org.apache.hudi.avro.model.HoodieRollbackPlan"
ROLLBACK_METADATA = "org.apache.hudi.avro.model.HoodieRollbackMetadata"
RESTORE_PLAN = "org.apache.hudi.avro.model.HoodieRestorePlan"
RESTORE_METADATA = "org.apache.hudi.avro.model.HoodieRestoreMetadata"
SAVEPOINT_METADATA = "org.apache.hudi.avro.model.HoodieSavepointMetadata"
REQUESTED_REPLACE_METADATA = "org.apache.hudi.avro.model.HoodieRequestedReplaceMetadata"
COMMIT_METADATA = "org.apache.hudi.avro.model.HoodieCommitMetadata"
REPLACE_COMMIT_METADATA = "org.apache.hudi.avro.model.HoodieReplaceCommitMetadata"
ARCHIVED_META_ENTRY = "org.apache.hudi.avro.model.HoodieArchivedMetaEntry"


def load_schema_text(stem: str) -> dict[str, Any]:
    """The JSON of one shipped ``.avsc`` file, its licence comment stripped."""
    text = (
        resources.files("airflow_lake_provider.lake.format")
        .joinpath("schemas")
        .joinpath(f"{stem}.avsc")
        .read_text("utf-8")
    )
    return json.loads(_COMMENT_RE.sub("", text))


def _inline(node: Any, named: dict[str, Any], defined: set[str]) -> Any:
    """Replace references to types defined in other files by their definitions (first use only).

    A container file's header must carry a self-contained writer schema, or no reader can use it.
    """
    if isinstance(node, str):
        if node in named and node not in defined:
            return _inline(named[node], named, defined)
        return node
    if isinstance(node, list):
        return [_inline(n, named, defined) for n in node]
    if isinstance(node, dict):
        if node.get("type") in ("record", "enum", "fixed") and "name" in node:
            defined.add(node["name"])
        out = dict(node)
        if "fields" in out:
            out["fields"] = [{**f, "type": _inline(f["type"], named, defined)} for f in out["fields"]]
        for key in ("items", "values"):
            if key in out:
                out[key] = _inline(out[key], named, defined)
        if isinstance(out.get("type"), (dict, list)):
            out["type"] = _inline(out["type"], named, defined)
        return out
    return node


@cache
def _parsed() -> dict[str, Any]:
    import fastavro

    named: dict[str, Any] = {}
    top: dict[str, Any] = {}
    for stand_in in _STAND_INS:
        fastavro.parse_schema(stand_in, named_schemas=named)
    for stem in _SCHEMA_FILES:
        raw = load_schema_text(stem)
        fastavro.parse_schema(raw, named_schemas=named)
        top[f"{raw.get('namespace', '')}.{raw['name']}".lstrip(".")] = raw
    expanded = {}
    for full_name in list(top) + [n for n in named if n not in top]:
        parsed = fastavro.parse_schema(top.get(full_name, named.get(full_name)), named_schemas=dict(named))
        expanded[full_name] = fastavro.parse_schema(_inline(parsed, named, set()), _write_hint=True)
    return expanded


def schema(full_name: str) -> dict[str, Any]:
    """The self-contained parsed schema of a Hudi timeline record, e.g. :data:`CLEANER_PLAN`."""
    return _parsed()[full_name]


def write_avro(full_name: str, record: Mapping[str, Any]) -> bytes:
    """Serialise one record as an Avro object container file (codec null), as Hudi writes them."""
    import fastavro

    buf = io.BytesIO()
    # No validator: the writer refuses a record that does not fit the schema all the same (wrong
    # type, missing field, no union branch), and validating first made every write 4x slower.
    fastavro.writer(buf, schema(full_name), [dict(record)], codec="null")
    return buf.getvalue()


# Hudi 1.x's schemas (table versions 8 and 9) where they differ from 0.x's, as the writer schemas of
# Spark-written tables carry them: self-contained, so they are parsed apart from the 0.x set above.
# The rollback metadata gained ``logFilesFromFailedCommit`` per partition (restore metadata embeds
# it); the compaction plan ``strategy``, ``preserveHoodieMetadata`` and ``missingSchedulePartitions``;
# a clustering's plan is a 1.x requested-replace record; the rollback and restore plans, the cleaner
# plan, clean metadata and savepoint schemas are unchanged.
SCHEMAS_1X = {
    COMMIT_METADATA: "HoodieCommitMetadata.1x",
    REPLACE_COMMIT_METADATA: "HoodieReplaceCommitMetadata.1x",
    ROLLBACK_METADATA: "HoodieRollbackMetadata.1x",
    RESTORE_METADATA: "HoodieRestoreMetadata.1x",
    COMPACTION_PLAN: "HoodieCompactionPlan.1x",
    REQUESTED_REPLACE_METADATA: "HoodieRequestedReplaceMetadata.1x",  # a clustering's plan
}
# Commit metadata records (``read_commit_metadata`` reads only these).
_COMMIT_RECORDS_1X = frozenset({COMMIT_METADATA, REPLACE_COMMIT_METADATA})


@cache
def schema_1x(full_name: str) -> dict[str, Any]:
    """The parsed Hudi 1.x schema of a record whose schema changed in 1.x (see :data:`SCHEMAS_1X`)."""
    import fastavro

    return fastavro.parse_schema(load_schema_text(SCHEMAS_1X[full_name]), _write_hint=True)


def write_avro_for(full_name: str, record: Mapping[str, Any], hudi_1x: bool) -> bytes:
    """Serialise one plan or metadata record as the table's Hudi line writes it: under the 1.x schema
    when ``hudi_1x`` (layout 2) and the record changed in 1.x, else under the 0.x one."""
    if hudi_1x and full_name in SCHEMAS_1X:
        return write_avro_1x(full_name, record)
    return write_avro(full_name, record)


def write_avro_1x(full_name: str, record: Mapping[str, Any]) -> bytes:
    """Serialise one record under Hudi 1.x's schema (codec null), as Hudi 1.x writes completed and
    inflight commit files, compaction plans and rollback/restore metadata."""
    import fastavro

    buf = io.BytesIO()
    fastavro.writer(buf, schema_1x(full_name), [dict(record)], codec="null")  # (no validator: above)
    return buf.getvalue()


def read_commit_metadata(data: bytes, source: str) -> dict[str, Any]:
    """The record of a layout-2 commit metadata file, resolved to Hudi 1.x's schema of its record
    type (``HoodieCommitMetadata``, or ``HoodieReplaceCommitMetadata`` for a completed replace)."""
    import fastavro

    if not data:
        raise CorruptTimelineFileError(f"{source}: the Avro commit metadata file is empty")
    try:
        reader = fastavro.reader(io.BytesIO(data))
        name = str(reader.writer_schema.get("name", "")) if isinstance(reader.writer_schema, dict) else ""
        full_name = name if "." in name else f"org.apache.hudi.avro.model.{name}"
        if full_name not in _COMMIT_RECORDS_1X:
            raise CorruptTimelineFileError(
                f"{source}: holds a {name or 'nameless'} record, not commit metadata"
            )
        records = list(fastavro.reader(io.BytesIO(data), reader_schema=schema_1x(full_name)))
    except CorruptTimelineFileError:
        raise
    except Exception as exc:  # fastavro raises many types for garbage input
        raise CorruptTimelineFileError(f"{source}: not a readable Avro container file ({exc})") from exc
    if len(records) != 1 or not isinstance(records[0], dict):
        raise CorruptTimelineFileError(f"{source}: expected one Avro record, found {len(records)}")
    return records[0]


def read_avro_fields(data: bytes, source: str, full_name: str, skip: tuple[str, ...]) -> dict[str, Any]:
    """Read the single record without decoding the fields in ``skip`` (large maps of file names)."""
    import fastavro

    reader_schema = {k: v for k, v in schema(full_name).items() if not k.startswith("__")}
    reader_schema["fields"] = [f for f in reader_schema["fields"] if f["name"] not in skip]
    try:
        records = list(fastavro.reader(io.BytesIO(data), reader_schema=reader_schema))
    except Exception as exc:  # fastavro raises many types for garbage input
        raise CorruptTimelineFileError(f"{source}: not a readable Avro container file ({exc})") from exc
    if len(records) != 1 or not isinstance(records[0], dict):
        raise CorruptTimelineFileError(f"{source}: expected one Avro record, found {len(records)}")
    return records[0]


def read_avro(data: bytes, source: str) -> dict[str, Any]:
    """Read the single record of an Avro timeline file; ``source`` names it in errors."""
    import fastavro

    try:
        records = list(fastavro.reader(io.BytesIO(data)))
    except Exception as exc:  # fastavro raises many types for garbage input
        raise CorruptTimelineFileError(f"{source}: not a readable Avro container file ({exc})") from exc
    if len(records) != 1:
        raise CorruptTimelineFileError(f"{source}: expected one Avro record, found {len(records)}")
    record = records[0]
    if not isinstance(record, dict):
        raise CorruptTimelineFileError(f"{source}: the Avro record is not a record")
    return record
