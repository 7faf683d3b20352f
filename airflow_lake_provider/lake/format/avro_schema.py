"""Conversion between Arrow schemas and the Avro schemas Hudi stores in commits and log blocks.

Hudi keeps the writer schema as Avro JSON (commit metadata, the SCHEMA header of every log block)
while this core works on Arrow tables. The mapping here is the one hudi-rs reads back without
surprises: nullable columns are ``["null", T]`` unions, timestamps are UTC instants
(``timestamp-millis``/``timestamp-micros``, never ``local-timestamp-*``, which hudi-rs cannot read)
and nested structs become named records whose names follow the field path, as Spark names them.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from airflow_lake_provider.lake.errors import SchemaError

log = logging.getLogger(__name__)

META_FIELDS: tuple[str, ...] = (
    "_hoodie_commit_time",
    "_hoodie_commit_seqno",
    "_hoodie_record_key",
    "_hoodie_partition_path",
    "_hoodie_file_name",
)

_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

_PRIMITIVES: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}

# Logical types whose Arrow type is a plain reinterpretation of the underlying int/long.
# "raw" decoding (fastavro fallback) keeps the integer and casts afterwards, which avoids
# building one Python datetime per value.
_INT_LOGICAL: dict[tuple[str, str], tuple[pa.DataType, pa.DataType]] = {
    ("int", "date"): (pa.date32(), pa.int32()),
    ("int", "time-millis"): (pa.time32("ms"), pa.int32()),
    ("long", "time-micros"): (pa.time64("us"), pa.int64()),
    ("long", "timestamp-millis"): (pa.timestamp("ms", tz="UTC"), pa.int64()),
    ("long", "timestamp-micros"): (pa.timestamp("us", tz="UTC"), pa.int64()),
    ("long", "timestamp-nanos"): (pa.timestamp("ns", tz="UTC"), pa.int64()),
    ("long", "local-timestamp-millis"): (pa.timestamp("ms"), pa.int64()),
    ("long", "local-timestamp-micros"): (pa.timestamp("us"), pa.int64()),
    ("long", "local-timestamp-nanos"): (pa.timestamp("ns"), pa.int64()),
}

_MAX_DECIMAL128_PRECISION = 38
_MAX_DECIMAL256_PRECISION = 76


# --------------------------------------------------------------------------------------------
# Arrow -> Avro
# --------------------------------------------------------------------------------------------


def arrow_to_avro(schema: pa.Schema, record_name: str, namespace: str) -> dict[str, Any]:
    """Convert an Arrow schema to a Hudi-compatible Avro record schema.

    Nullable fields become ``["null", T]`` unions with ``"default": None``. Nested structs become
    records named after their field, in a namespace made of the enclosing record's full name, so
    every named type is unique.

    :param schema: the Arrow schema to convert.
    :param record_name: the Avro record name (Hudi uses ``<table>_record``).
    :param namespace: the Avro namespace (Hudi uses ``hoodie.<table>``); may be empty.
    :returns: the Avro schema as a JSON-compatible dict.
    :raises SchemaError: for an unsupported Arrow type or a name Avro does not allow.
    """
    _check_name(record_name, "record name")
    if namespace:
        for part in namespace.split("."):
            _check_name(part, f"namespace {namespace!r}")
    full_name = f"{namespace}.{record_name}" if namespace else record_name
    fields = [_arrow_field_to_avro(f, full_name, f.name) for f in schema]
    out: dict[str, Any] = {"type": "record", "name": record_name}
    if namespace:
        out["namespace"] = namespace
    out["fields"] = fields
    return out


def check_table_names(table_name: str, fields: Sequence[str]) -> None:
    """Refuse a table name or field name its writes could not use: the data schema is an Avro record
    ``<table name>_record`` in namespace ``hoodie.<table name>``, its fields named by their columns."""
    _check_name(f"{table_name}_record", f"table name {table_name!r}: record name")
    for field_name in fields:
        _check_name(field_name, "field")


def _check_name(name: str, what: str) -> None:
    if not _AVRO_NAME.match(name):
        raise SchemaError(f"{what} {name!r} is not a valid Avro name ([A-Za-z_][A-Za-z0-9_]*)")


def _arrow_field_to_avro(f: pa.Field, parent_full_name: str, path: str) -> dict[str, Any]:
    _check_name(f.name, f"field {path!r}:")
    avro_type = _arrow_type_to_avro(f.type, parent_full_name, f.name, path)
    if f.nullable:
        return {"name": f.name, "type": ["null", avro_type], "default": None}
    return {"name": f.name, "type": avro_type}


def _arrow_type_to_avro(t: pa.DataType, parent_full_name: str, name: str, path: str) -> Any:
    """Map one Arrow type; ``parent_full_name``/``name`` name any record or fixed it creates."""
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_int32(t):
        return "int"
    if pa.types.is_int64(t):
        return "long"
    if pa.types.is_float32(t):
        return "float"
    if pa.types.is_float64(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytes"
    if pa.types.is_fixed_size_binary(t):
        return {"type": "fixed", "name": name, "namespace": parent_full_name, "size": t.byte_width}
    if pa.types.is_date32(t):
        return {"type": "int", "logicalType": "date"}
    if pa.types.is_timestamp(t) and t.unit in ("ms", "us"):
        # Always the UTC-instant flavour: hudi-rs panics on local-timestamp-*, and it reads
        # timestamp-* back as tz=UTC whether the Arrow column was naive or zoned.
        logical = "timestamp-millis" if t.unit == "ms" else "timestamp-micros"
        return {"type": "long", "logicalType": logical}
    if pa.types.is_decimal128(t):
        return {"type": "bytes", "logicalType": "decimal", "precision": t.precision, "scale": t.scale}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = t.value_field
        item_type = _arrow_type_to_avro(item.type, parent_full_name, name, f"{path}[]")
        return {"type": "array", "items": ["null", item_type] if item.nullable else item_type}
    if pa.types.is_map(t):
        if not (pa.types.is_string(t.key_type) or pa.types.is_large_string(t.key_type)):
            raise SchemaError(f"field {path!r}: Avro maps need string keys, got map key type {t.key_type}")
        item = t.item_field
        value_type = _arrow_type_to_avro(item.type, parent_full_name, name, f"{path}{{}}")
        return {"type": "map", "values": ["null", value_type] if item.nullable else value_type}
    if pa.types.is_struct(t):
        full_name = f"{parent_full_name}.{name}"
        fields = [
            _arrow_field_to_avro(t.field(i), full_name, f"{path}.{t.field(i).name}")
            for i in range(t.num_fields)
        ]
        return {"type": "record", "name": name, "namespace": parent_full_name, "fields": fields}
    hint = " (cast it to timestamp[us] first)" if pa.types.is_timestamp(t) else ""
    raise SchemaError(f"field {path!r}: Arrow type {t} has no Hudi Avro mapping{hint}")


# --------------------------------------------------------------------------------------------
# Avro -> Arrow
# --------------------------------------------------------------------------------------------


@dataclass
class _Names:
    """Named Avro types seen so far (full name -> Arrow type); ``None`` while being defined."""

    types: dict[str, pa.DataType | None] = field(default_factory=dict)


def avro_to_arrow(avro: Mapping[str, Any] | str) -> pa.Schema:
    """Convert an Avro record schema (dict or JSON text) to an Arrow schema.

    Unions with ``null`` in either position become nullable fields; ``timestamp-*`` become
    ``timestamp[..., tz=UTC]`` (what hudi-rs returns), ``local-timestamp-*`` naive timestamps,
    enums strings, decimals (bytes or fixed) ``decimal128``/``decimal256`` and fixed
    ``fixed_size_binary``. Unknown logical types fall back to their underlying type, as the Avro
    specification requires.

    :param avro: the Avro schema, a top-level record.
    :returns: the Arrow schema with one field per record field, in order.
    :raises SchemaError: if the schema is not valid JSON, not a record, or uses a type Arrow
        cannot represent (unions of several non-null types, recursive records, unknown names).
    """
    return _avro_record_to_schema(avro, raw=False)


def avro_to_arrow_raw(avro: Mapping[str, Any] | str) -> pa.Schema:
    """Like :func:`avro_to_arrow` but keep int/long logical types (dates, times, timestamps) as
    their plain integer storage type; used by decoders that produce raw integers and cast after.

    :param avro: the Avro schema, a top-level record.
    :returns: the Arrow schema with integer columns in place of temporal ones.
    """
    return _avro_record_to_schema(avro, raw=True)


def parse_avro_json(avro: Mapping[str, Any] | str) -> dict[str, Any]:
    """Return the schema as a dict, parsing JSON text.

    :param avro: a schema dict or its JSON text.
    :raises SchemaError: if the text is not JSON or the schema is not a record.
    """
    if isinstance(avro, str):
        try:
            parsed = json.loads(avro)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise SchemaError(f"Avro schema is not valid JSON ({exc}): {avro[:200]!r}") from exc
    else:
        parsed = avro
    if not isinstance(parsed, Mapping) or parsed.get("type") != "record":
        raise SchemaError(f"Avro schema must be a record, got {str(parsed)[:200]!r}")
    return dict(parsed)


def _avro_record_to_schema(avro: Mapping[str, Any] | str, *, raw: bool) -> pa.Schema:
    rec = parse_avro_json(avro)
    struct = _avro_type_to_arrow(rec, "", _Names(), raw, rec.get("name", "<record>"))
    return pa.schema(list(struct))


def _full_name(name: str, namespace: str) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def _split_union(branches: list[Any], path: str) -> tuple[Any, bool]:
    """Return (the single non-null branch, whether null is allowed)."""
    non_null = [b for b in branches if b != "null"]
    nullable = len(non_null) != len(branches)
    if len(non_null) != 1:
        raise SchemaError(
            f"field {path!r}: union {json.dumps(branches)[:200]} has {len(non_null)} non-null branches; "
            "only [null, T] unions map to Arrow"
        )
    return non_null[0], nullable


def _avro_type_to_arrow(t: Any, namespace: str, names: _Names, raw: bool, path: str) -> pa.DataType:
    if isinstance(t, list):
        inner, _ = _split_union(t, path)
        return _avro_type_to_arrow(inner, namespace, names, raw, path)
    if isinstance(t, str):
        if t in _PRIMITIVES:
            return _PRIMITIVES[t]
        if t == "null":
            raise SchemaError(f"field {path!r}: a bare 'null' type has no Arrow column type")
        return _resolve_reference(t, namespace, names, path)
    if not isinstance(t, Mapping):
        raise SchemaError(f"field {path!r}: {t!r} is not an Avro type")
    kind = t.get("type")
    logical = t.get("logicalType")
    if kind in ("int", "long") and logical is not None and (kind, logical) in _INT_LOGICAL:
        arrow_type, storage = _INT_LOGICAL[(kind, logical)]
        return storage if raw else arrow_type
    if logical == "decimal" and kind in ("bytes", "fixed"):
        arrow_type = _decimal_type(t, path)
        if kind == "fixed":
            _register(t, namespace, names, arrow_type, path)
        return arrow_type
    if isinstance(kind, str) and kind in _PRIMITIVES:
        if logical is not None and logical != "uuid":
            log.debug("field %s: unknown logical type %s, using %s", path, logical, kind)
        return _PRIMITIVES[kind]
    if kind == "record" or kind == "error":
        full = _register(t, namespace, names, None, path)
        inner_ns = full.rpartition(".")[0]
        fields = []
        for f in t.get("fields", []):
            fname = f.get("name")
            if not isinstance(fname, str):
                raise SchemaError(f"field {path!r}: record field without a name: {f!r}")
            ftype = f.get("type")
            fpath = f"{path}.{fname}"
            nullable = isinstance(ftype, list) and "null" in ftype
            fields.append(pa.field(fname, _avro_type_to_arrow(ftype, inner_ns, names, raw, fpath), nullable))
        struct = pa.struct(fields)
        names.types[full] = struct
        return struct
    if kind == "enum":
        _register(t, namespace, names, pa.string(), path)
        return pa.string()
    if kind == "fixed":
        size = t.get("size")
        if not isinstance(size, int) or size < 0:
            raise SchemaError(f"field {path!r}: fixed type without a valid size: {t!r}")
        arrow_type = pa.binary(size)
        _register(t, namespace, names, arrow_type, path)
        return arrow_type
    if kind == "array":
        items = t.get("items")
        item_nullable = isinstance(items, list) and "null" in items
        item_type = _avro_type_to_arrow(items, namespace, names, raw, f"{path}[]")
        return pa.list_(pa.field("item", item_type, item_nullable))
    if kind == "map":
        values = t.get("values")
        value_nullable = isinstance(values, list) and "null" in values
        value_type = _avro_type_to_arrow(values, namespace, names, raw, f"{path}{{}}")
        return pa.map_(pa.string(), pa.field("value", value_type, value_nullable))
    if isinstance(kind, (str, list, Mapping)) and kind != t:
        # {"type": "string"} style wrappers and {"type": {...}} nesting.
        return _avro_type_to_arrow(kind, namespace, names, raw, path)
    raise SchemaError(f"field {path!r}: unsupported Avro type {json.dumps(t)[:200]}")


def _decimal_type(t: Mapping[str, Any], path: str) -> pa.DataType:
    precision = t.get("precision")
    scale = t.get("scale", 0)
    if not isinstance(precision, int) or not isinstance(scale, int) or precision < 1 or scale < 0:
        raise SchemaError(f"field {path!r}: decimal with invalid precision/scale: {json.dumps(t)[:200]}")
    if precision <= _MAX_DECIMAL128_PRECISION:
        return pa.decimal128(precision, scale)
    if precision <= _MAX_DECIMAL256_PRECISION:
        return pa.decimal256(precision, scale)
    raise SchemaError(f"field {path!r}: decimal precision {precision} exceeds {_MAX_DECIMAL256_PRECISION}")


def _register(
    t: Mapping[str, Any], namespace: str, names: _Names, arrow_type: pa.DataType | None, path: str
) -> str:
    name = t.get("name")
    if not isinstance(name, str) or not name:
        raise SchemaError(f"field {path!r}: named Avro type without a name: {json.dumps(t)[:200]}")
    ns = t.get("namespace")
    full = _full_name(name, ns if isinstance(ns, str) else namespace)
    names.types[full] = arrow_type
    return full


def _resolve_reference(ref: str, namespace: str, names: _Names, path: str) -> pa.DataType:
    for candidate in (_full_name(ref, namespace), ref):
        if candidate in names.types:
            found = names.types[candidate]
            if found is None:
                raise SchemaError(f"field {path!r}: recursive Avro type {candidate!r} cannot map to Arrow")
            return found
    raise SchemaError(f"field {path!r}: unknown Avro type name {ref!r}")


# --------------------------------------------------------------------------------------------
# Meta fields
# --------------------------------------------------------------------------------------------


def with_meta_fields(avro: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of the record schema with the five Hudi meta fields first.

    Meta fields already present are kept where they are (not duplicated).

    :param avro: an Avro record schema dict.
    :returns: a new dict; the input is not modified.
    """
    out = copy.deepcopy(dict(avro))
    fields = list(out.get("fields", []))
    present = {f.get("name") for f in fields}
    meta = [{"name": n, "type": ["null", "string"], "default": None} for n in META_FIELDS if n not in present]
    out["fields"] = meta + fields
    return out


def strip_meta_fields(avro: Mapping[str, Any]) -> dict[str, Any]:
    """Return a copy of the record schema without the Hudi meta fields.

    :param avro: an Avro record schema dict.
    :returns: a new dict; the input is not modified.
    """
    out = copy.deepcopy(dict(avro))
    out["fields"] = [f for f in out.get("fields", []) if f.get("name") not in META_FIELDS]
    return out


def meta_arrow_fields() -> list[pa.Field]:
    """Return the five meta columns as nullable Arrow string fields, in Hudi's order."""
    return [pa.field(n, pa.string()) for n in META_FIELDS]
