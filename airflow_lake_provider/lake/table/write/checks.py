"""What a write checks before its instant exists, and how it shapes a batch: the table's index and
key generator, the batch's columns and types, event times, storable paths, keys, partitions and
duplicates. A refusal here changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from airflow_lake_provider.lake.config import registry
from airflow_lake_provider.lake.errors import SchemaError, StorageError, TableConfigError, WriteConfigError
from airflow_lake_provider.lake.format.avro_schema import META_FIELDS, arrow_to_avro, avro_to_arrow
from airflow_lake_provider.lake.format.casting import cast_exact, same_shape
from airflow_lake_provider.lake.format.partitioning import partition_paths, record_keys
from airflow_lake_provider.lake.format.table_config import MergeMode
from airflow_lake_provider.lake.table.metadata.policy import MetadataTablePolicy
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.table.write.plan import _KEY, _ORD, _PART, Operation
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.commit_metadata import join_partition

# Event-time bookkeeping of a commit (partition commit's watermark reads the max).
EVENT_TIME_FIELD = registry.EVENT_TIME_FIELD.key
EVENT_TIME_MIN, EVENT_TIME_MAX = "lake.minEventTime", "lake.maxEventTime"
# Longer than any data, marker or temp file name a write creates (a base file name is ~70 bytes).
_LONGEST_FILE_NAME = 128
# An instant time as long as a real one, for path checks made before the instant is chosen.
_PROBE_INSTANT = "2" * 17
# Index types whose lookups this writer's bloom + range lookup gives the same answer as.
INDEX_TYPE = registry.INDEX_TYPE.key
_SAME_ANSWER_INDEXES = ("BLOOM", "SIMPLE")
METADATA_PARTITIONS = "hoodie.table.metadata.partitions"


# Key generators whose record keys and partition paths our writer derives the same way.
_KEY_GENERATORS = frozenset(
    f"{kind}{avro}KeyGenerator" for kind in ("Simple", "Complex", "Nonpartitioned") for avro in ("", "Avro")
)


def check_index(
    table: LakeTable, settings: Mapping[str, str], options: Mapping[str, str] | None = None
) -> None:
    """Refuse tables whose Hudi index this writer would leave wrong (before any instant exists).

    Our lookup is Hudi's non-global bloom index (footer key range, bloom filter, then the record-key
    column). It answers as ``BLOOM`` and ``SIMPLE`` do; a bucket index places keys by hash in
    numbered file groups, and a record index (or a global index) is kept in the metadata table,
    which this writer does not update: Java writers after ours would duplicate our keys. A write
    whose ``options`` drop the MDT (``hoodie.metadata.enable=false``) drops the record index with
    it before it starts, as Hudi does.
    """
    kind = (registry.INDEX_TYPE.read(settings) or "").upper()
    if kind and kind not in _SAME_ANSWER_INDEXES:
        raise WriteConfigError(
            f"{table.uri}: {INDEX_TYPE}={kind} is not supported by this writer (it keeps a bloom/simple "
            "index only); write this table with Spark"
        )
    partitions = str(settings.get(METADATA_PARTITIONS) or "").split(",")
    drops = (
        MetadataTablePolicy.from_options(table.config.properties, table.option_defaults, options or {})
        is MetadataTablePolicy.DROP
    )
    if "record_index" in (p.strip() for p in partitions) and not drops:
        raise TableConfigError(
            f"{table.uri}: the table keeps a record index ({METADATA_PARTITIONS} has record_index), "
            "which this writer does not update; write this table with Spark, or drop the metadata "
            f"table with its record index as Hudi does ('lake metadata-table {table.uri} --drop', or "
            f"option {registry.METADATA_ENABLE.key}=false on the write)"
        )
    keygen = (table.config.keygen_class or "").rsplit(".", 1)[-1]
    if keygen and keygen not in _KEY_GENERATORS:
        # E.g. TimestampBasedKeyGenerator formats a time field into the partition path: taking the
        # field's raw value would put every row in a new partition, beside its old version.
        raise TableConfigError(
            f"{table.uri}: {table.config.keygen_setting} is not supported "
            f"by this writer (it derives keys and partition paths as {', '.join(sorted(_KEY_GENERATORS))} "
            "do); write this table with Spark"
        )


def prepare_batch(
    table: LakeTable, batch: pa.Table, operation: Operation, timeline: Timeline, event_time_field: str | None
) -> tuple[pa.Schema, dict[str, str], pa.Table]:
    """Everything a write checks of its batch before its instant exists: the table's data schema,
    the commit's event times, and the batch cast, keyed, partitioned and deduplicated for routing."""
    data_schema = _check_batch(table, batch, operation, timeline)
    event_times = _event_times(
        batch, event_time_field or registry.EVENT_TIME_FIELD.read(table.config.properties)
    )
    # Cast before the instant exists: a value that does not survive the cast refuses the batch.
    batch = _conform_batch(batch, data_schema)
    rows = _route(table, batch)
    _check_storable(table, _PROBE_INSTANT, rows)
    return data_schema, event_times, rows


def _event_times(batch: pa.Table, field_name: str | None) -> dict[str, str]:
    """Min and max (epoch ms) of the event time column; a bad column is refused before any instant."""
    if not field_name or batch.num_rows == 0:
        return {}
    if field_name not in batch.column_names:
        raise SchemaError(f"event time field {field_name!r} is not a column of the batch")
    column = batch.column(field_name)
    kind = column.type
    if pa.types.is_date(kind):
        column = column.cast(pa.timestamp("ms"))  # days to milliseconds: exact
        kind = column.type
    scale = (1, 1)  # epoch ms = count * scale[0] // scale[1]
    if pa.types.is_timestamp(kind):
        # The stored counts are UTC (naive timestamps count as UTC wall time, as Flink's TIMESTAMP
        # watermarks do); finer units are floored to whole milliseconds.
        scale = _TO_MS[kind.unit]
        column = column.cast(pa.int64())
    elif not pa.types.is_integer(kind):
        raise SchemaError(
            f"event time field {field_name!r} is {kind}: use a timestamp, date or integer (epoch ms) column"
        )
    low, high = (v.as_py() for v in pc.min_max(column).values())
    if low is None:
        return {}
    mul, div = scale
    low, high = low * mul // div, high * mul // div
    for value in (low, high):
        if not _FIRST_MS <= value <= _LAST_MS:  # a partition-time commit could not read it as a time
            raise SchemaError(
                f"event time field {field_name!r} holds {value} epoch ms, outside the years 1-9999 "
                "(an integer column counts milliseconds)"
            )
    return {EVENT_TIME_MIN: str(low), EVENT_TIME_MAX: str(high)}


# The epoch milliseconds of 0001-01-01 and of the end of 9999-12-31 (UTC): Python's datetime range.
_FIRST_MS = -62_135_596_800_000
_LAST_MS = 253_402_300_799_999
# A timestamp unit's counts to epoch milliseconds: multiply, then floor-divide. Every Arrow unit:
# a delete batch may carry an event time column the table does not have.
_TO_MS = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1_000), "ns": (1, 1_000_000)}


def _check_storable(table: LakeTable, instant: str, rows: pa.Table) -> None:
    """Refuse, before the instant exists, a partition whose files the storage cannot create."""
    for partition in pc.unique(rows.column(_PART)).to_pylist():
        # The deepest path a write creates: a marker under .hoodie/.temp/<instant>/<partition>/.
        probe = join_partition(
            join_partition(table.store.markers.folder(instant), partition), "x" * _LONGEST_FILE_NAME
        )
        try:
            table.storage.check_path(probe, what=f"partition path {partition!r} of {table.uri}")
        except StorageError as exc:
            raise SchemaError(f"{exc} (counting the files a write puts under it)") from None


def _check_batch(table: LakeTable, batch: pa.Table, operation: Operation, timeline: Timeline) -> pa.Schema:
    """Validate the batch against the table and return the table's data schema (Arrow)."""
    cfg = table.config
    names = batch.column_names
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SchemaError(f"batch has column(s) {twice} more than once")
    reserved = [n for n in names if n.startswith("__lake_")]
    if reserved:
        raise SchemaError(f"batch column(s) {reserved}: names starting with '__lake_' are reserved")
    required = list(cfg.record_key_fields) + list(cfg.partition_fields if cfg.is_partitioned else ())
    required += [cfg.precombine_field] if cfg.precombine_field else []
    missing = [c for c in required if c not in batch.column_names]
    if missing:
        raise SchemaError(
            f"batch is missing required column(s) {missing} (record key, partition, precombine)"
        )
    if cfg.precombine_field and batch.column(cfg.precombine_field).null_count:
        raise SchemaError(f"precombine field {cfg.precombine_field!r} has null values")
    data = pa.schema([f for f in batch.schema if f.name not in META_FIELDS])
    if not cfg.populate_meta_fields:
        raise SchemaError(f"{table.uri}: writing tables without meta fields is not supported")
    existing = table.data_avro_schema(timeline)
    if existing is None:
        # Canonical types: what a reader of the recorded Avro schema will expect in the files.
        return avro_to_arrow(arrow_to_avro(data, "probe", "probe"))
    table_schema = pa.schema([f for f in avro_to_arrow(existing) if f.name not in META_FIELDS])
    if operation is Operation.DELETE:
        for name in data.names:
            if name in table_schema.names:
                _check_castable(batch.schema.field(name), table_schema.field(name))
        return table_schema
    extra = [n for n in data.names if n not in table_schema.names]
    absent = [n for n in table_schema.names if n not in data.names]
    if extra or absent:
        raise SchemaError(
            f"batch schema does not match the table: unknown column(s) {extra}, missing column(s) {absent}"
        )
    for name in data.names:
        _check_castable(data.field(name), table_schema.field(name))
    return table_schema


def _check_castable(got: pa.Field, want: pa.Field) -> None:
    """Refuse types whose values could never all fit (checked per value later, in ``_conform_batch``)."""
    if not same_shape(got.type, want.type, _leaf_castable):
        raise SchemaError(f"column {got.name!r} has type {got.type}, the table stores {want.type}")


def _leaf_castable(got: pa.DataType, want: pa.DataType) -> bool:
    return (
        got == want
        or (pa.types.is_integer(got) and pa.types.is_integer(want) and _int_fits(got, want))
        or (pa.types.is_floating(got) and pa.types.is_floating(want))
        or ({str(got), str(want)} <= {"string", "large_string"})
        or (pa.types.is_timestamp(got) and pa.types.is_timestamp(want) and got.unit == want.unit)
    )


def _int_fits(got: pa.DataType, want: pa.DataType) -> bool:
    """Every value of integer type ``got`` fits ``want`` (uint64 does not fit int64, int8 not uint8)."""
    if pa.types.is_signed_integer(got) == pa.types.is_signed_integer(want):
        return got.bit_width <= want.bit_width
    return pa.types.is_unsigned_integer(got) and got.bit_width < want.bit_width


def _conform_batch(batch: pa.Table, data_schema: pa.Schema) -> pa.Table:
    """The batch's table columns cast to the table's types, every value exactly (else SchemaError)."""
    for name in batch.column_names:
        if name in data_schema.names:
            target = data_schema.field(name).type
            batch = batch.set_column(
                batch.schema.get_field_index(name), name, cast_exact(batch.column(name), target, name)
            )
    return batch


def _dedupe(rows: pa.Table, event_time: bool) -> pa.Table:
    """Keep one row per (partition, key): the largest ordering value, later rows winning ties."""
    idx = pa.array(range(rows.num_rows), pa.int64())
    tagged = rows.append_column("__lake_idx", idx)
    sort = [(_PART, "ascending"), (_KEY, "ascending")]
    sort += [(_ORD, "ascending")] if event_time else []
    ordered = tagged.take(pc.sort_indices(tagged, sort_keys=[*sort, ("__lake_idx", "ascending")]))
    if ordered.num_rows <= 1:
        return ordered.drop_columns(["__lake_idx"])
    k = pc.binary_join_element_wise(ordered.column(_PART), ordered.column(_KEY), "\x00").combine_chunks()
    last = pa.concat_arrays([pc.not_equal(k.slice(0, len(k) - 1), k.slice(1)), pa.array([True])])
    return ordered.filter(last).drop_columns(["__lake_idx"])


def _route(table: LakeTable, batch: pa.Table) -> pa.Table:
    cfg = table.config
    batch = batch.drop_columns([c for c in batch.column_names if c in META_FIELDS])
    rows = batch.append_column(_KEY, record_keys(batch, cfg))
    rows = rows.append_column(_PART, partition_paths(batch, cfg))
    if cfg.precombine_field:
        rows = rows.append_column(_ORD, batch.column(cfg.precombine_field))
    return _dedupe(rows, cfg.merge_mode is MergeMode.EVENT_TIME_ORDERING and bool(cfg.precombine_field))
