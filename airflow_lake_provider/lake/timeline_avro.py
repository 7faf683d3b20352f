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

import fastavro
from fastavro.types import NamedSchemas  # noqa: F401  (documents the shape of named schemas)

from airflow_lake_provider.lake.errors import CorruptTimelineFileError

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
    "HoodieSavePointMetadata",
    "HoodieSliceInfo",
    "HoodieClusteringGroup",
    "HoodieClusteringStrategy",
    "HoodieClusteringPlan",
    "HoodieRequestedReplaceMetadata",
    "HoodieCommitMetadata",
    "HoodieReplaceCommitMetadata",
)
# Record full names by the short names the core uses.
CLEANER_PLAN = "org.apache.hudi.avro.model.HoodieCleanerPlan"
CLEAN_METADATA = "org.apache.hudi.avro.model.HoodieCleanMetadata"
COMPACTION_PLAN = "org.apache.hudi.avro.model.HoodieCompactionPlan"
ROLLBACK_PLAN = "org.apache.hudi.avro.model.HoodieRollbackPlan"
ROLLBACK_METADATA = "org.apache.hudi.avro.model.HoodieRollbackMetadata"
SAVEPOINT_METADATA = "org.apache.hudi.avro.model.HoodieSavepointMetadata"
REQUESTED_REPLACE_METADATA = "org.apache.hudi.avro.model.HoodieRequestedReplaceMetadata"


def load_schema_text(stem: str) -> dict[str, Any]:
    """The JSON of one shipped ``.avsc`` file, its licence comment stripped."""
    text = resources.files("airflow_lake_provider.lake").joinpath("schemas").joinpath(f"{stem}.avsc").read_text("utf-8")
    return json.loads(_COMMENT_RE.sub("", text))


@cache
def _parsed() -> tuple[dict[str, Any], dict[str, Any]]:
    named: dict[str, Any] = {}
    top: dict[str, Any] = {}
    for stem in _SCHEMA_FILES:
        raw = load_schema_text(stem)
        parsed = fastavro.parse_schema(raw, named_schemas=named)
        top[f"{raw.get('namespace', '')}.{raw['name']}".lstrip(".")] = parsed
    return top, named


def schema(full_name: str) -> dict[str, Any]:
    """The parsed schema of a Hudi timeline record, e.g. :data:`CLEANER_PLAN`."""
    top, named = _parsed()
    if full_name in top:
        return top[full_name]
    return named[full_name]


def write_avro(full_name: str, record: Mapping[str, Any]) -> bytes:
    """Serialise one record as an Avro object container file (codec null), as Hudi writes them."""
    buf = io.BytesIO()
    fastavro.writer(buf, schema(full_name), [dict(record)], codec="null", validator=True)
    return buf.getvalue()


def read_avro(data: bytes, source: str) -> dict[str, Any]:
    """Read the single record of an Avro timeline file; ``source`` names it in errors."""
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
