"""DELETE blocks: the Avro ``HoodieDeleteRecordList`` of keys deleted by a commit, with ordering values."""

from __future__ import annotations

import datetime as dt
import decimal
import logging
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from airflow_lake_provider.lake.errors import CorruptLogBlockError, SchemaError
from airflow_lake_provider.lake.format.avro_binary import AvroReader, avro_bytes, zigzag
from airflow_lake_provider.lake.log_file.log_format import (
    DELETE_BLOCK_VERSION,
    INT32,
    BlockType,
    HeaderKey,
    LogBlock,
    check_header_schema,
    encode_block,
    expect_type,
    schema_json,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeleteRecord:
    """One entry of a DELETE block.

    :param record_key: the record key to delete.
    :param partition_path: the partition path of the record.
    :param ordering_value: the ordering (precombine) value, or ``None``.
    :param ordering_type: the Avro union branch for ``ordering_value``: one of
        :data:`ORDERING_TYPES` other than ``"null"``; ``None`` writes the null branch.
    """

    record_key: str
    partition_path: str
    ordering_value: object = None
    ordering_type: str | None = None


# Branches of HoodieDeleteRecord.orderingVal, in union order: the index is what is written.
ORDERING_TYPES: tuple[str, ...] = (
    "null",
    "int",
    "long",
    "float",
    "double",
    "bytes",
    "string",
    "decimal",
    "date",
    "time-millis",
    "time-micros",
    "timestamp-millis",
    "timestamp-micros",
)
_ORDERING_INDEX = {name: i for i, name in enumerate(ORDERING_TYPES)}
_ORDERING_DECIMAL_PRECISION = 30
_ORDERING_DECIMAL_SCALE = 15


# --------------------------------------------------------------------------------------------
# DELETE blocks
# --------------------------------------------------------------------------------------------

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_EPOCH_DATE = dt.date(1970, 1, 1)
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


def ordering_type_for(arrow_type: pa.DataType) -> str:
    """Return the ``orderingVal`` union branch matching an ordering column's Arrow type.

    Delete entries must carry the ordering column's own type (hudi-rs silently ignores, e.g., an
    int 0 against a long column).

    :param arrow_type: the ordering (precombine) column type.
    :raises SchemaError: if no branch fits.
    """
    t = arrow_type
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
    if pa.types.is_decimal(t):
        return "decimal"
    if pa.types.is_date32(t):
        return "date"
    if pa.types.is_time32(t) and t.unit == "ms":
        return "time-millis"
    if pa.types.is_time64(t) and t.unit == "us":
        return "time-micros"
    if pa.types.is_timestamp(t) and t.unit == "ms":
        return "timestamp-millis"
    if pa.types.is_timestamp(t) and t.unit == "us":
        return "timestamp-micros"
    raise SchemaError(f"ordering column type {t} has no HoodieDeleteRecord orderingVal branch")


def _encode_ordering(rec: DeleteRecord) -> bytes:
    kind = rec.ordering_type
    value = rec.ordering_value
    if kind is None or kind == "null":
        if value is not None:
            raise SchemaError(
                f"delete of key {rec.record_key!r}: ordering_value {value!r} needs an ordering_type"
            )
        return zigzag(0)
    if kind not in _ORDERING_INDEX:
        raise SchemaError(
            f"delete of key {rec.record_key!r}: ordering_type {kind!r} is not one of {ORDERING_TYPES}"
        )
    if value is None:
        return zigzag(0)
    head = zigzag(_ORDERING_INDEX[kind])
    try:
        return head + _encode_ordering_value(kind, value)
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise SchemaError(
            f"delete of key {rec.record_key!r}: ordering_value {value!r} does not fit {kind!r}: {exc}"
        ) from exc


def _checked_int(value: object, bounds: tuple[int, int]) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an int, got {type(value).__name__}")
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError("out of range")
    return value


def _encode_ordering_value(kind: str, value: object) -> bytes:
    if kind == "int":
        return zigzag(_checked_int(value, _INT32))
    if kind == "long":
        return zigzag(_checked_int(value, _INT64))
    if kind in ("float", "double"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"expected a float, got {type(value).__name__}")
        return struct.pack("<f" if kind == "float" else "<d", float(value))
    if kind == "bytes":
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"expected bytes, got {type(value).__name__}")
        return avro_bytes(bytes(value))
    if kind == "string":
        if not isinstance(value, str):
            raise TypeError(f"expected str, got {type(value).__name__}")
        return avro_bytes(value.encode("utf-8"))
    if kind == "decimal":
        return avro_bytes(_decimal_to_bytes(value))
    if kind == "date":
        days = (value - _EPOCH_DATE).days if isinstance(value, dt.date) else value
        return zigzag(_checked_int(days, _INT32))
    if kind in ("time-millis", "time-micros"):
        if isinstance(value, dt.time):
            micros = ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond
            value = micros // 1000 if kind == "time-millis" else micros
        return zigzag(_checked_int(value, _INT32 if kind == "time-millis" else _INT64))
    # timestamp-millis / timestamp-micros
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)
        delta = aware - _EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        value = micros // 1000 if kind == "timestamp-millis" else micros
    return zigzag(_checked_int(value, _INT64))


def _decimal_to_bytes(value: object) -> bytes:
    if isinstance(value, bool) or not isinstance(value, (decimal.Decimal, int)):
        raise TypeError(f"expected a Decimal, got {type(value).__name__}")
    scaled = decimal.Decimal(value).scaleb(_ORDERING_DECIMAL_SCALE)
    if scaled != scaled.to_integral_value():
        raise ValueError(f"more than {_ORDERING_DECIMAL_SCALE} decimal places")
    unscaled = int(scaled)
    if abs(unscaled) >= 10**_ORDERING_DECIMAL_PRECISION:
        raise ValueError(f"more than {_ORDERING_DECIMAL_PRECISION} digits")
    size = max(1, (unscaled.bit_length() + 8) // 8)
    return unscaled.to_bytes(size, "big", signed=True)


def _decode_ordering(reader: AvroReader) -> tuple[object, str | None]:
    index = reader.long()
    if not 0 <= index < len(ORDERING_TYPES):
        raise CorruptLogBlockError(f"{reader.where}: orderingVal union index {index} out of range")
    kind = ORDERING_TYPES[index]
    if kind == "null":
        return None, None
    if kind in ("int", "long"):
        return reader.long(), kind
    if kind == "float":
        return struct.unpack("<f", reader.take(4))[0], kind
    if kind == "double":
        return struct.unpack("<d", reader.take(8))[0], kind
    if kind == "bytes":
        return reader.bytes_(), kind
    if kind == "string":
        return reader.string(), kind
    if kind == "decimal":
        unscaled = int.from_bytes(reader.bytes_(), "big", signed=True)
        return decimal.Decimal(unscaled).scaleb(-_ORDERING_DECIMAL_SCALE), kind
    raw = reader.long()
    try:
        if kind == "date":
            return _EPOCH_DATE + dt.timedelta(days=raw), kind
        if kind in ("time-millis", "time-micros"):
            micros = raw * 1000 if kind == "time-millis" else raw
            secs, micro = divmod(micros, 1_000_000)
            return dt.time(secs // 3600, secs // 60 % 60, secs % 60, micro), kind
        micros = raw * 1000 if kind == "timestamp-millis" else raw
        return _EPOCH + dt.timedelta(microseconds=micros), kind
    except (OverflowError, ValueError):
        # Out of Python's datetime range: keep the raw number rather than fail the block.
        return raw, kind


def encode_delete_content(records: Sequence[DeleteRecord]) -> bytes:
    """Encode the content of a DELETE block (version 3 + length-prefixed HoodieDeleteRecordList).

    :param records: the entries.
    :returns: the content bytes.
    :raises SchemaError: if an ordering value does not fit its declared type.
    """
    parts: list[bytes] = []
    if records:
        parts.append(zigzag(len(records)))
        for rec in records:
            # recordKey and partitionPath are ["null", "string"]: branch 1 then the string.
            parts.append(b"\x02" + avro_bytes(rec.record_key.encode("utf-8")))
            parts.append(b"\x02" + avro_bytes(rec.partition_path.encode("utf-8")))
            parts.append(_encode_ordering(rec))
    parts.append(zigzag(0))
    payload = b"".join(parts)
    return INT32.pack(DELETE_BLOCK_VERSION) + INT32.pack(len(payload)) + payload


def delete_block(records: Sequence[DeleteRecord], instant_time: str, avro_schema: Mapping[str, Any]) -> bytes:
    """Encode a complete DELETE block.

    :param records: the keys to delete.
    :param instant_time: the deltacommit instant writing the block.
    :param avro_schema: the table's writer schema, including the meta fields.
    :returns: the block bytes.
    :raises SchemaError: if the schema lacks meta fields or an ordering value is ill-typed.
    """
    schema = check_header_schema(avro_schema, f"delete block at {instant_time}")
    header = {HeaderKey.INSTANT_TIME: instant_time, HeaderKey.SCHEMA: schema_json(schema)}
    return encode_block(BlockType.DELETE, header, encode_delete_content(records))


def decode_delete_block(block: LogBlock) -> list[DeleteRecord]:
    """Decode the entries of a DELETE block.

    :param block: a block of type DELETE.
    :returns: the entries in order.
    :raises CorruptLogBlockError: if the content cannot be decoded.
    """
    where = block.location
    expect_type(block, BlockType.DELETE)
    content = block.content
    if len(content) < 8:
        raise CorruptLogBlockError(f"{where}: delete block content of {len(content)} bytes is too short")
    version, length = struct.unpack_from(">ii", content, 0)
    if version != DELETE_BLOCK_VERSION:
        raise CorruptLogBlockError(f"{where}: unsupported delete block version {version}")
    if length < 0 or 8 + length > len(content):
        raise CorruptLogBlockError(f"{where}: delete payload length {length} runs past the content")
    reader = AvroReader(content[8 : 8 + length], where)
    out: list[DeleteRecord] = []
    for _ in _array_items(reader):
        key = _nullable_string(reader)
        partition = _nullable_string(reader)
        value, kind = _decode_ordering(reader)
        out.append(DeleteRecord(key or "", partition or "", value, kind))
    return out


def _array_items(reader: AvroReader) -> Iterator[None]:
    """Yield once per item of an Avro array (blocks with negative counts carry a byte size)."""
    while True:
        count = reader.long()
        if count == 0:
            return
        if count < 0:
            count = -count
            reader.long()
        for _ in range(count):
            yield None


def _nullable_string(reader: AvroReader) -> str | None:
    branch = reader.long()
    if branch == 0:
        return None
    if branch != 1:
        raise CorruptLogBlockError(f"{reader.where}: [null, string] union index {branch} out of range")
    return reader.string()
