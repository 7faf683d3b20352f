"""The typed view of ``hoodie.properties`` that the core works with."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from enum import Enum

from airflow_lake_provider.lake.config.parsers import boolean, whole_number
from airflow_lake_provider.lake.errors import ConfigError, TableConfigError, UnsupportedTableVersionError
from airflow_lake_provider.lake.format.bloom_filter import BloomSettings
from airflow_lake_provider.lake.format.timeline_paths import timeline_location

SUPPORTED_TABLE_VERSION = 6  # the version this core creates by default
SUPPORTED_LAYOUT_VERSION = 1
# Table versions opened, with the timeline layout each has: Hudi 1.0 (8) and 1.1 (9).
READABLE_TABLE_VERSIONS = {6: 1, 8: 2, 9: 2}
# Versions ``LakeTable.create`` makes (6 stays the default).
CREATABLE_TABLE_VERSIONS = frozenset({6, 8, 9})

DEFAULT_PAYLOAD = "org.apache.hudi.common.model.DefaultHoodieRecordPayload"
OVERWRITE_PAYLOAD = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload"
AVRO_MERGER_STRATEGY = "eeb8d96f-b1e4-49fd-bbf8-28ac514178e5"
SIMPLE_KEYGEN = "org.apache.hudi.keygen.SimpleKeyGenerator"
COMPLEX_KEYGEN = "org.apache.hudi.keygen.ComplexKeyGenerator"
NONPARTITIONED_KEYGEN = "org.apache.hudi.keygen.NonpartitionedKeyGenerator"
# Table version 8 names the key generator by type (``hoodie.table.keygenerator.type``) where 6 gave
# the class; the classes Hudi's ``KeyGeneratorType`` stands for.
KEYGEN_CLASSES_BY_TYPE = {
    "SIMPLE": SIMPLE_KEYGEN,
    "COMPLEX": COMPLEX_KEYGEN,
    "NON_PARTITION": NONPARTITIONED_KEYGEN,
    "TIMESTAMP": "org.apache.hudi.keygen.TimestampBasedKeyGenerator",
    "CUSTOM": "org.apache.hudi.keygen.CustomKeyGenerator",
    "SIMPLE_AVRO": "org.apache.hudi.keygen.SimpleAvroKeyGenerator",
    "COMPLEX_AVRO": "org.apache.hudi.keygen.ComplexAvroKeyGenerator",
    "NON_PARTITION_AVRO": "org.apache.hudi.keygen.NonpartitionedAvroKeyGenerator",
    "TIMESTAMP_AVRO": "org.apache.hudi.keygen.TimestampBasedAvroKeyGenerator",
    "CUSTOM_AVRO": "org.apache.hudi.keygen.CustomAvroKeyGenerator",
}


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


def _partition_fields(value: str | None) -> tuple[str, ...]:
    """The field names (version 8 may add a custom key generator's part type: ``field:SIMPLE``)."""
    return tuple(f.partition(":")[0] for f in _split(value))


def table_flag(props: Mapping[str, str], key: str, default: bool, source: str) -> bool:
    """A boolean table property, read by the one boolean parser: ``yes`` or ``1`` is refused (naming
    ``source``) rather than read as false, as every boolean option is."""
    raw = props.get(key)
    if raw is None or not str(raw).strip():
        return default
    try:
        return boolean(key, str(raw), ConfigError)
    except ConfigError as exc:
        raise TableConfigError(f"{source}: {exc}") from None


class TableProperties(Mapping[str, str]):
    """A table's properties, read-only, knowing the file they were read from (``source``): an
    option read from them and refused names that file (``Option.read``), so a bad value a table's
    other writer left is not taken for one the caller gave."""

    __slots__ = ("_data", "source")

    def __init__(self, data: Mapping[str, str], source: str) -> None:
        self._data = dict(data)
        self.source = source

    def __getitem__(self, key: str) -> str:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __repr__(self) -> str:
        return f"TableProperties({self._data!r}, source={self.source!r})"


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
    table_version: int = SUPPORTED_TABLE_VERSION

    @property
    def is_mor(self) -> bool:
        return self.table_type is TableType.MERGE_ON_READ

    @property
    def is_partitioned(self) -> bool:
        return bool(self.partition_fields) and self.keygen_class != NONPARTITIONED_KEYGEN

    @property
    def bloom_settings(self) -> BloomSettings:
        """How the record-key bloom filters of new base files are sized (Hudi's bloom options)."""
        return self.checked_bloom_settings()

    def checked_bloom_settings(self, options: Mapping[str, str] | None = None) -> BloomSettings:
        """The bloom settings of ``hoodie.properties`` under ``options`` (whose values win); a bad
        value of the properties' own names them. Checked by the actions that write base files, not
        when the table is opened: readers never size a filter, so a table another writer gave a bad
        bloom setting still reads (as hudi-rs reads it)."""
        options = options or {}
        try:
            return BloomSettings.from_options(self.properties, options)
        except TableConfigError as exc:
            own = {k: v for k, v in self.properties.items() if k not in options}
            try:
                BloomSettings.from_options(own)
            except TableConfigError:  # the properties' own values are at fault: say where they are
                if not str(exc).startswith(f"{self.source}: "):  # not named by the option's read
                    raise type(exc)(f"{self.source}: {exc}") from None
            raise

    @property
    def keygen_setting(self) -> str:
        """The key generator as ``hoodie.properties`` names it: by class, or (versions 8 and 9 may
        give only the type) by type with the class it stands for."""
        if self.properties.get("hoodie.table.keygenerator.class"):
            return f"hoodie.table.keygenerator.class={self.keygen_class}"
        kind = self.properties.get("hoodie.table.keygenerator.type")
        return f"hoodie.table.keygenerator.type={kind} ({self.keygen_class})"

    @property
    def merge_mode(self) -> MergeMode:
        """Event-time ordering needs an ordering field and no commit-time payload or mode.

        No payload class (every copy-on-write table Hudi 0.14/0.15 create: they record it only on
        merge-on-read tables) counts as ``DefaultHoodieRecordPayload``, as Hudi 1.x's table config
        and hudi-rs take it, although those releases' writers default to the commit-time
        ``OverwriteWithLatestAvroPayload`` (tests/unit/lake/table/test_merge_mode_v6.py)."""
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
        version = _check_version(props, source)
        if table_flag(props, "hoodie.datasource.write.drop.partition.columns", False, source):
            raise TableConfigError(
                f"{source}: hoodie.datasource.write.drop.partition.columns=true is not supported"
            )
        precombine = props.get("hoodie.table.precombine.field") or props.get("hoodie.table.ordering.fields")
        if precombine and "," in precombine:
            raise TableConfigError(f"{source}: more than one ordering field ({precombine}) is not supported")
        mode = props.get("hoodie.record.merge.mode") or None
        if mode and mode.upper() == "CUSTOM":
            raise TableConfigError(
                f"{source}: hoodie.record.merge.mode={mode} is not supported (a custom record merger "
                "runs Java code; only EVENT_TIME_ORDERING and COMMIT_TIME_ORDERING are merged here)"
            )
        if mode and mode.upper() not in MergeMode.__members__:
            raise TableConfigError(f"{source}: hoodie.record.merge.mode={mode} is not supported")
        _check_v8_features(props, source)
        return cls(
            name=props["hoodie.table.name"],
            table_type=TableType.parse(props["hoodie.table.type"]),
            record_key_fields=_split(props.get("hoodie.table.recordkey.fields")),
            precombine_field=precombine or None,
            partition_fields=_partition_fields(props.get("hoodie.table.partition.fields")),
            hive_style=table_flag(props, "hoodie.datasource.write.hive_style_partitioning", False, source),
            populate_meta_fields=table_flag(props, "hoodie.populate.meta.fields", True, source),
            payload_class=props.get("hoodie.compaction.payload.class") or None,
            merge_mode_setting=mode,
            keygen_class=props.get("hoodie.table.keygenerator.class") or _keygen_of_type(props),
            create_schema=props.get("hoodie.table.create.schema") or None,
            properties=TableProperties(props, source),
            source=source,
            table_version=version,
        )

    @classmethod
    def of_metadata_table(cls, props: Mapping[str, str], source: str) -> TableConfig:
        """A metadata table's config: MOR, keyed by ``key``, no meta fields. Not validated as a data
        table's: ``from_properties`` refuses its HFILE base file format, which only a data table's
        readers must refuse (the MDT's are read by the metadata readers)."""
        version = str(props.get("hoodie.table.version") or SUPPORTED_TABLE_VERSION).strip()
        if whole_number(version) is None:
            raise TableConfigError(f"{source}: hoodie.table.version={version!r} is not a whole number")
        return cls(
            name=props.get("hoodie.table.name", ""),
            table_type=TableType.MERGE_ON_READ,
            record_key_fields=("key",),
            precombine_field=None,
            partition_fields=(),
            hive_style=False,
            populate_meta_fields=False,
            payload_class=props.get("hoodie.compaction.payload.class") or None,
            merge_mode_setting=None,
            keygen_class=props.get("hoodie.table.keygenerator.class") or None,
            create_schema=None,
            properties=TableProperties(props, source),
            source=source,
            table_version=int(version),  # checked above: ASCII digits
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
        table_version: int = SUPPORTED_TABLE_VERSION,
    ) -> dict[str, str]:
        """The full property set a Java reader expects of a new table of ``table_version``: 0.14's
        for version 6, Hudi 1.x Spark's for 8 and 9 (:func:`_properties_1x`)."""
        if table_version not in CREATABLE_TABLE_VERSIONS:
            raise UnsupportedTableVersionError(
                f"table version {table_version} cannot be created (only "
                f"{', '.join(str(v) for v in sorted(CREATABLE_TABLE_VERSIONS))})"
            )
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
        if table_version != SUPPORTED_TABLE_VERSION:
            props = _properties_1x(props, table_version)
        if database:
            props["hoodie.database.name"] = database
        return props


def _properties_1x(v6: Mapping[str, str], version: int) -> dict[str, str]:
    """The keys a Hudi 1.x Spark writer puts in a new table's ``hoodie.properties`` (as in the
    Spark-written tables of ``tests/data/hudi-tables-1x``), from the v6 set of the same table.

    Hudi 1.x names the key generator by type, keeps the timeline in ``.hoodie/timeline/`` (layout 2),
    records the merge mode, leaves defaults unwritten (base/log file format, populated meta fields,
    an empty partition-field list) and, in version 9, names the ordering field
    ``hoodie.table.ordering.fields`` and drops the payload class and merger strategy. One key is
    ours: ``hoodie.table.timeline.timezone=UTC``, which a Hudi writer also writes when told so,
    because our instant times are UTC and a Java writer must not make earlier ones (its default is
    the local time zone)."""
    keygen_type = {v: k for k, v in KEYGEN_CLASSES_BY_TYPE.items()}[v6["hoodie.table.keygenerator.class"]]
    props = {
        "hoodie.table.name": v6["hoodie.table.name"],
        "hoodie.table.type": v6["hoodie.table.type"],
        "hoodie.table.version": str(version),
        "hoodie.table.initial.version": str(version),
        "hoodie.timeline.layout.version": str(READABLE_TABLE_VERSIONS[version]),
        "hoodie.timeline.path": "timeline",
        "hoodie.timeline.history.path": "history",
        "hoodie.table.recordkey.fields": v6["hoodie.table.recordkey.fields"],
        "hoodie.table.keygenerator.type": keygen_type,
        "hoodie.datasource.write.hive_style_partitioning": v6[
            "hoodie.datasource.write.hive_style_partitioning"
        ],
        "hoodie.datasource.write.partitionpath.urlencode": "false",
        "hoodie.datasource.write.drop.partition.columns": "false",
        "hoodie.archivelog.folder": "archived",
        "hoodie.record.merge.mode": MergeMode.EVENT_TIME_ORDERING.value,
        "hoodie.table.timeline.timezone": "UTC",
    }
    if v6["hoodie.table.partition.fields"]:
        props["hoodie.table.partition.fields"] = v6["hoodie.table.partition.fields"]
    if version == 8:
        props["hoodie.table.precombine.field"] = v6["hoodie.table.precombine.field"]
        props["hoodie.compaction.payload.class"] = v6["hoodie.compaction.payload.class"]
        props["hoodie.record.merge.strategy.id"] = AVRO_MERGER_STRATEGY
    else:
        props["hoodie.table.ordering.fields"] = v6["hoodie.table.precombine.field"]
        props["hoodie.table.format"] = "native"
    return props


def check_table_version(props: Mapping[str, str], source: str) -> int:
    """The readable table version ``props`` declare, its timeline layout checked against it: for
    readers that take no other table setting (``lake metadata-table --check``), which would read the
    timeline in the wrong place under a layout the version does not have."""
    if not props.get("hoodie.table.version"):
        raise TableConfigError(f"{source}: required property hoodie.table.version is missing")
    return _check_version(props, source)


def _check_version(props: Mapping[str, str], source: str) -> int:
    """The table version, if readable, with the timeline layout that version has."""
    version = props["hoodie.table.version"].strip()
    if whole_number(version) not in READABLE_TABLE_VERSIONS:
        raise UnsupportedTableVersionError(
            f"{source}: hoodie.table.version={version} is not supported (only table versions 6, 8 and 9)"
        )
    number = int(version)
    layout = props.get("hoodie.timeline.layout.version", "").strip()
    if layout != str(READABLE_TABLE_VERSIONS[number]):
        raise UnsupportedTableVersionError(
            f"{source}: hoodie.timeline.layout.version={layout or '<missing>'} "
            f"must be {READABLE_TABLE_VERSIONS[number]} for table version {number}"
        )
    timeline_location(props, source)  # layout 2's folder names
    return number


def metadata_table_misfit(
    props: Mapping[str, str], table_version: int, table_name: str | None = None
) -> str | None:
    """Why the properties ``props`` are not those of the metadata table of a table of version
    ``table_version`` named ``table_name`` (None: they are). Hudi keeps both tables at one version
    (an upgrade that did not finish may leave them apart); the MDT is a MOR table of HFile base
    files named after its data table (``<name>_metadata``): another table's MDT copied or linked
    here is not this one's."""
    found = props.get("hoodie.table.version", "")
    if found != str(table_version):
        return f"table version {found or '(none)'}, not its data table's {table_version}"
    for key, value in (("hoodie.table.type", "MERGE_ON_READ"), ("hoodie.table.base.file.format", "HFILE")):
        if props.get(key, value) != value:
            return f"{key}={props[key]}, not {value}"
    name = props.get("hoodie.table.name", "")
    if table_name is not None and name != f"{table_name}_metadata":
        return f"hoodie.table.name={name or '(none)'}, not {table_name}_metadata"
    return None


def _check_v8_features(props: Mapping[str, str], source: str) -> None:
    """Refuse, by name, the Hudi 1.x table features this core would otherwise misread."""
    base_format = (props.get("hoodie.table.base.file.format") or "PARQUET").strip()
    if base_format.upper() != "PARQUET":
        raise TableConfigError(
            f"{source}: hoodie.table.base.file.format={base_format} is not supported (only PARQUET "
            "base files are read)"
        )
    partial = (props.get("hoodie.table.partial.update.mode") or "NONE").strip()
    if partial.upper() != "NONE":
        raise TableConfigError(
            f"{source}: hoodie.table.partial.update.mode={partial} is not supported (partial-update "
            "merging is not implemented)"
        )
    keygen_type = (props.get("hoodie.table.keygenerator.type") or "").strip()
    if keygen_type and keygen_type.upper() not in KEYGEN_CLASSES_BY_TYPE:
        raise TableConfigError(f"{source}: hoodie.table.keygenerator.type={keygen_type} is not supported")


def _keygen_of_type(props: Mapping[str, str]) -> str | None:
    keygen_type = (props.get("hoodie.table.keygenerator.type") or "").strip().upper()
    return KEYGEN_CLASSES_BY_TYPE.get(keygen_type)
