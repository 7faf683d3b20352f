"""The typed view of ``hoodie.properties`` that the core works with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType

from airflow_lake_provider.lake.errors import TableConfigError, UnsupportedTableVersionError
from airflow_lake_provider.lake.format.bloom_filter import BloomSettings

SUPPORTED_TABLE_VERSION = 6
SUPPORTED_LAYOUT_VERSION = 1

DEFAULT_PAYLOAD = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
OVERWRITE_PAYLOAD = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"
AVRO_MERGER_STRATEGY = "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
SIMPLE_KEYGEN = "org.apache.hudi.keygen.SimpleKeyGenerator"
COMPLEX_KEYGEN = "org.apache.hudi.keygen.ComplexKeyGenerator"
NONPARTITIONED_KEYGEN = "org.apache.hudi.keygen.NonpartitionedKeyGenerator"


class TableType(str, Enum):
    COPY_ON_WRITE = "COPY_ON_WRITE"
    MERGE_ON_READ = "MERGE_ON_READ"

    @classmethod
    def parse(cls, value: str) -> TableType:
        """Accept the enum names and the short ``cow``/``mor`` forms, any case."""
        norm = value.strip().upper().replace("-", "_")
        aliases = {"COW": cls.COPY_ON_WRITE, "MOR": cls.MERGE_ON_READ}
        if norm in aliases:
            return aliases[norm]
        try:
            return cls(norm)
        except ValueError:
            raise TableConfigError(
                f"hoodie.table.type={value!r} is not COPY_ON_WRITE or MERGE_ON_READ"
            ) from None


class MergeMode(str, Enum):
    """Which row version wins when a key is written more than once (format spec section 10.3)."""

    EVENT_TIME_ORDERING = "EVENT_TIME_ORDERING"
    COMMIT_TIME_ORDERING = "COMMIT_TIME_ORDERING"


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def _bool(value: str | None, default: bool) -> bool:
    return default if value is None or value == "" else value.strip().lower() == "true"


@dataclass(frozen=True)
class TableConfig:
    """Validated table configuration; ``properties`` keeps every key, known or not."""

    name: str
    table_type: TableType
    record_key_fields: tuple[str, ...]
    precombine_field: str | None
    partition_fields: tuple[str, ...]
    hive_style: bool
    populate_meta_fields: bool
    payload_class: str | None
    merge_mode_setting: str | None
    keygen_class: str | None
    create_schema: str | None
    properties: Mapping[str, str] = field(repr=False, compare=False)
    source: str = field(default="hoodie.properties", repr=False, compare=False)  # named in errors

    @property
    def is_mor(self) -> bool:
        return self.table_type is TableType.MERGE_ON_READ

    @property
    def is_partitioned(self) -> bool:
        return bool(self.partition_fields) and self.keygen_class != NONPARTITIONED_KEYGEN

    @property
    def bloom_settings(self) -> BloomSettings:
        """How the record-key bloom filters of new base files are sized (Hudi's bloom options)."""
        return BloomSettings.from_options(self.properties)

    @property
    def merge_mode(self) -> MergeMode:
        """Event-time ordering needs an ordering field and no commit-time payload or mode."""
        if self.merge_mode_setting:
            return MergeMode(self.merge_mode_setting.upper())
        if not self.precombine_field or self.payload_class == OVERWRITE_PAYLOAD:
            return MergeMode.COMMIT_TIME_ORDERING
        return MergeMode.EVENT_TIME_ORDERING

    @classmethod
    def from_properties(cls, props: Mapping[str, str], source: str = "hoodie.properties") -> TableConfig:
        """Validate ``props``; raise a ``TableConfigError`` naming the key and ``source`` otherwise."""
        for key in ("hoodie.table.name", "hoodie.table.type", "hoodie.table.version"):
            if not props.get(key):
                raise TableConfigError(f"{source}: required property {key} is missing")
        version = props["hoodie.table.version"].strip()
        if version != str(SUPPORTED_TABLE_VERSION):
            raise UnsupportedTableVersionError(
                f"{source}: hoodie.table.version={version} is not supported (only table version 6)"
            )
        layout = props.get("hoodie.timeline.layout.version", "").strip()
        if layout != str(SUPPORTED_LAYOUT_VERSION):
            raise UnsupportedTableVersionError(
                f"{source}: hoodie.timeline.layout.version={layout or '<missing>'} "
                "must be 1 for table version 6"
            )
        if props.get("hoodie.datasource.write.drop.partition.columns", "false").lower() == "true":
            raise TableConfigError(
                f"{source}: hoodie.datasource.write.drop.partition.columns=true is not supported"
            )
        precombine = props.get("hoodie.table.precombine.field") or props.get("hoodie.table.ordering.fields")
        if precombine and "," in precombine:
            raise TableConfigError(f"{source}: more than one ordering field ({precombine}) is not supported")
        mode = props.get("hoodie.record.merge.mode") or None
        if mode and mode.upper() not in MergeMode.__members__:
            raise TableConfigError(f"{source}: hoodie.record.merge.mode={mode} is not supported")
        try:
            BloomSettings.from_options(props)
        except TableConfigError as exc:
            raise TableConfigError(f"{source}: {exc}") from None
        return cls(
            name=props["hoodie.table.name"],
            table_type=TableType.parse(props["hoodie.table.type"]),
            record_key_fields=_split(props.get("hoodie.table.recordkey.fields")),
            precombine_field=precombine or None,
            partition_fields=_split(props.get("hoodie.table.partition.fields")),
            hive_style=_bool(props.get("hoodie.datasource.write.hive_style_partitioning"), False),
            populate_meta_fields=_bool(props.get("hoodie.populate.meta.fields"), True),
            payload_class=props.get("hoodie.compaction.payload.class") or None,
            merge_mode_setting=mode,
            keygen_class=props.get("hoodie.table.keygenerator.class") or None,
            create_schema=props.get("hoodie.table.create.schema") or None,
            properties=MappingProxyType(dict(props)),
            source=source,
        )

    @staticmethod
    def new_properties(
        *,
        name: str,
        table_type: TableType,
        record_key_fields: tuple[str, ...],
        precombine_field: str,
        partition_fields: tuple[str, ...] = (),
        hive_style: bool = False,
        payload_class: str = DEFAULT_PAYLOAD,
        database: str | None = None,
    ) -> dict[str, str]:
        """The full v6 property set a Java 0.14 reader expects of a new table."""
        if not name or any(c in name for c in "=:\n/\\"):
            raise TableConfigError(f"table name {name!r} is empty or has one of = : / \\ or a newline")
        if not record_key_fields:
            raise TableConfigError("a table needs at least one record key field")
        if partition_fields:
            keygen = (
                SIMPLE_KEYGEN
                if len(partition_fields) == 1 and len(record_key_fields) == 1
                else COMPLEX_KEYGEN
            )
        else:
            keygen = NONPARTITIONED_KEYGEN
        props = {
            "hoodie.table.name": name,
            "hoodie.table.type": table_type.value,
            "hoodie.table.version": str(SUPPORTED_TABLE_VERSION),
            "hoodie.timeline.layout.version": str(SUPPORTED_LAYOUT_VERSION),
            "hoodie.table.recordkey.fields": ",".join(record_key_fields),
            "hoodie.table.precombine.field": precombine_field,
            "hoodie.table.partition.fields": ",".join(partition_fields),
            "hoodie.table.keygenerator.class": keygen,
            "hoodie.datasource.write.hive_style_partitioning": str(hive_style).lower(),
            "hoodie.datasource.write.partitionpath.urlencode": "false",
            "hoodie.datasource.write.drop.partition.columns": "false",
            "hoodie.populate.meta.fields": "true",
            "hoodie.table.base.file.format": "PARQUET",
            "hoodie.table.log.file.format": "HOODIE_LOG",
            "hoodie.archivelog.folder": "archived",
            "hoodie.table.timeline.timezone": "UTC",
            "hoodie.compaction.payload.class": payload_class,
            "hoodie.compaction.record.merger.strategy": AVRO_MERGER_STRATEGY,
        }
        if database:
            props["hoodie.database.name"] = database
        return props
