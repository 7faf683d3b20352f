"""Which columns of a data file get ``column_stats`` (and ``partition_stats``) records, as Hudi 1.x
chooses them (``HoodieTableMetadataUtil.getColumnsToIndex``): those the table's ``column_stats``
index definition names (``.hoodie/.index_defs/index.json``, kept since HUDI-8232, after 1.0.0);
without one, from the table's schema (not each file's): the three meta columns, then the first 32
data columns of a type Hudi indexes. Record, array, map and enum columns, and decimals the MDT's
``DecimalWrapper`` (decimal(30, 15)) cannot hold (more than 15 integer or 15 fraction digits), are
passed over *before* the 32 are counted (``isColumnTypeSupported`` for Avro records), and no meta
column counts among them."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lake_provider.lake.format.avro_schema import META_FIELDS
from airflow_lake_provider.lake.format.properties import parse_properties
from airflow_lake_provider.lake.format.table_config import TableConfig
from airflow_lake_provider.lake.storage import HOODIE_DIR, Storage
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.layouts import TimelineLayout

INDEX_DEFS = f"{HOODIE_DIR}/.index_defs/index.json"
# Meta columns Hudi always indexes (when the table populates them).
META_COLUMNS = ("_hoodie_commit_time", "_hoodie_partition_path", "_hoodie_record_key")
MAX_COLUMNS = 32  # hoodie.metadata.index.column.stats.max.columns.to.index
# Never among the first data columns (``HOODIE_META_COLUMNS_WITH_OPERATION``): exactly these names.
_ALL_META = frozenset((*META_FIELDS, "_hoodie_operation"))
# The largest decimal a ``DecimalWrapper`` holds (an Avro decimal(30, 15)): Hudi indexes a decimal
# column only when its values fit (``precision + (15 - scale) <= 30`` and ``scale <= 15``).
_DECIMAL_MAX_PRECISION, _DECIMAL_MAX_SCALE = 30, 15
# Avro types whose columns Hudi never indexes (``isColumnTypeSupported`` for Avro records).
_UNINDEXED_AVRO = frozenset(("record", "array", "map", "enum"))


def index_version(storage: Storage, definition: Mapping[str, Any] | None = None) -> int:
    """The ``column_stats`` index version (1 or 2) the table's index definition names (V1 when the
    table has none: Hudi 1.0). ``definition``: :func:`column_stats_definition`, if already read."""
    found = column_stats_definition(storage) if definition is None else definition
    return 2 if found.get("version") == "V2" else 1


def column_stats_definition(storage: Storage) -> dict[str, Any]:
    """The table's ``column_stats`` index definition (empty when it has none): read once by a
    caller that computes the stats of several files, and passed to the functions here."""
    try:
        defs = json.loads(storage.read(INDEX_DEFS))
    except FileNotFoundError:
        return {}
    return dict((defs.get("indexDefinitions") or {}).get("column_stats") or {})


def columns_to_index(
    storage: Storage,
    schema_columns: Sequence[str],
    column_list: Sequence[str] | None = None,
    *,
    definition: Mapping[str, Any] | None = None,
    unindexable: Collection[str] = frozenset(),
) -> tuple[str, ...]:
    """The columns Hudi indexes: the ``column_stats`` index definition's source fields (Hudi 1.x
    keeps them in ``.hoodie/.index_defs/index.json``), else ``column_list``
    (``hoodie.metadata.index.column.stats.column.list``, its meta columns and ``unindexable`` ones
    left out) after the meta columns, else the meta columns and the first ``MAX_COLUMNS`` data columns
    of a type Hudi indexes: ``unindexable`` (nested, enum and too wide decimal columns) are passed
    over before counting, and no meta column counts as a data column.

    ``schema_columns``: the top-level columns in schema order, meta columns included where the
    table populates them; ``unindexable``: those (and for ``column_list``, nested ones) of a type
    Hudi does not index (:func:`avro_indexable`)."""
    found = column_stats_definition(storage) if definition is None else definition
    fields = found.get("sourceFields")
    if fields:
        return tuple(fields)
    present = [c for c in META_COLUMNS if c in schema_columns]
    if column_list:
        listed = [c for c in column_list if c not in META_COLUMNS and c not in unindexable]
        return tuple(present + list(dict.fromkeys(listed)))
    data = [c for c in schema_columns if c not in _ALL_META and c not in unindexable]
    return tuple(present + data[:MAX_COLUMNS])


def table_columns(config: TableConfig, timeline: Timeline) -> tuple[list[str], frozenset[str]] | None:
    """The columns Hudi picks indexed ones from when no index definition names them (it takes them
    from the table's schema, not from each file): the meta columns the table populates, then the
    fields of the newest commit schema; and those of them of a type Hudi does not index. None when
    no completed commit records a schema."""
    text = timeline.latest_schema()
    if not text:
        return None
    schema = json.loads(text)
    meta = list(META_COLUMNS) if config.populate_meta_fields else []
    fields = [str(f["name"]) for f in schema.get("fields") or ()]
    return meta + [f for f in fields if f not in meta], avro_unindexable(schema)


def indexed_columns(
    storage: Storage, config: TableConfig, timeline: Timeline, definition: Mapping[str, Any]
) -> tuple[str, ...] | None:
    """The columns every file of a write or clean gets ``column_stats`` of, chosen once from the
    table as Hudi chooses them (:func:`columns_to_index` over :func:`table_columns`); None when
    the table records no schema yet (each file's own columns then)."""
    if definition.get("sourceFields"):
        return tuple(definition["sourceFields"])
    found = table_columns(config, timeline)
    if found is None:
        return None
    names, unindexable = found
    return columns_to_index(storage, names, definition=definition, unindexable=unindexable)


def default_columns(
    storage: Storage, definition: Mapping[str, Any], own: Sequence[str], own_unindexable: Collection[str]
) -> tuple[str, ...]:
    """The columns of a file whose caller named none: the definition's, else those the table's
    schema gives (read from storage), else those of the file's own schema ``own``."""
    if not definition.get("sourceFields"):
        try:
            text = storage.read(f"{HOODIE_DIR}/hoodie.properties").decode("utf-8")
        except FileNotFoundError:
            text = None
        if text is not None:
            props = parse_properties(text, storage.uri(f"{HOODIE_DIR}/hoodie.properties"))
            timeline = Timeline.load(storage, TimelineLayout.from_properties(props))
            chosen = indexed_columns(storage, TableConfig.from_properties(props), timeline, definition)
            if chosen is not None:
                return chosen
    return columns_to_index(storage, own, definition=definition, unindexable=own_unindexable)


def _decimal_indexable(precision: int, scale: int) -> bool:
    return precision + (_DECIMAL_MAX_SCALE - scale) <= _DECIMAL_MAX_PRECISION and scale <= _DECIMAL_MAX_SCALE


def named_types(node: Any, into: dict[str, Any]) -> dict[str, Any]:
    """Every named type (record, enum, fixed) an Avro schema defines, by name and full name: a
    later field may name one instead of repeating it."""
    if isinstance(node, list):
        for branch in node:
            named_types(branch, into)
    elif isinstance(node, dict):
        kind = node.get("type")
        if kind in ("record", "enum", "fixed") and "name" in node:
            name = str(node["name"])
            into[name] = node
            if node.get("namespace") and "." not in name:
                into[f"{node['namespace']}.{name}"] = node
        for field in node.get("fields") or ():
            named_types(field.get("type"), into)
        for key in ("items", "values"):
            if key in node:
                named_types(node[key], into)
        if isinstance(kind, (dict, list)):
            named_types(kind, into)
    return into


def resolve_avro(field_type: Any, named: Mapping[str, Any]) -> Any:
    """The one non-null branch of a nullable union, named types looked up; None for a union of
    several non-null types (Hudi resolves only a nullable one)."""
    if isinstance(field_type, list):
        branches = [b for b in field_type if b != "null"]
        if len(branches) != 1:
            return None
        field_type = branches[0]
    if isinstance(field_type, str):
        field_type = named.get(field_type, field_type)
    if isinstance(field_type, dict) and isinstance(field_type.get("type"), (dict, list)):
        return resolve_avro(field_type["type"], named)
    return field_type


def avro_indexable(field_type: Any, named: Mapping[str, Any] | None = None) -> bool:
    """Whether Hudi 1.x keeps column stats of a column of this Avro type
    (``HoodieTableMetadataUtil.isColumnTypeSupported``, Avro records): not a record, array, map or
    enum, nor a decimal wider than a ``DecimalWrapper``. ``named``: the schema's named types."""
    resolved = resolve_avro(field_type, named or {})
    if resolved is None:
        return False
    if isinstance(resolved, str):
        return resolved not in _UNINDEXED_AVRO
    if resolved.get("logicalType") == "decimal":
        return _decimal_indexable(int(resolved["precision"]), int(resolved.get("scale", 0)))
    return resolved.get("type") not in _UNINDEXED_AVRO


def avro_unindexable(schema: Mapping[str, Any] | None) -> frozenset[str]:
    """The top-level fields of an Avro record schema whose type Hudi does not index."""
    named = named_types(schema, {}) if schema else {}
    fields = (schema or {}).get("fields") or ()
    return frozenset(str(f["name"]) for f in fields if not avro_indexable(f["type"], named))


def parquet_columns(schema: pq.ParquetSchema) -> tuple[list[str], frozenset[str]]:
    """A parquet file's top-level columns in order, and those of a type Hudi does not index
    (groups: structs, lists and maps; enums; too wide decimals)."""
    enums = {
        schema.column(i).path
        for i in range(len(schema))
        if json.loads(schema.column(i).logical_type.to_json()).get("Type") == "Enum"
    }
    arrow = schema.to_arrow_schema()
    skipped = set()
    for field in arrow:
        kind = field.type
        if pa.types.is_nested(kind) or field.name in enums:
            skipped.add(field.name)
        elif pa.types.is_decimal(kind) and not _decimal_indexable(kind.precision, kind.scale):
            skipped.add(field.name)
    return list(arrow.names), frozenset(skipped)
