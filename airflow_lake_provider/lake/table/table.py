"""``LakeTable``: opening and creating a table, and the views every service starts from."""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lake_provider.lake.errors import (
    InvalidLocationError,
    LakeError,
    SchemaError,
    StorageAccessError,
    StorageError,
    StorageUnavailableError,
    TableConfigError,
    TableExistsError,
    TableNotFoundError,
)
from airflow_lake_provider.lake.file_group.builder import Lister
from airflow_lake_provider.lake.file_group.view import FileSystemView
from airflow_lake_provider.lake.format.avro_schema import avro_to_arrow, check_table_names, meta_arrow_fields
from airflow_lake_provider.lake.format.properties import parse_properties
from airflow_lake_provider.lake.format.table_config import (
    SUPPORTED_TABLE_VERSION,
    TableConfig,
    TableType,
)
from airflow_lake_provider.lake.storage import HOODIE_DIR, Storage, local_path, open_storage
from airflow_lake_provider.lake.table.merge import IS_DELETED_FIELD
from airflow_lake_provider.lake.timeline.active import Timeline
from airflow_lake_provider.lake.timeline.instant import DEFAULT_CLOCK, InstantClock
from airflow_lake_provider.lake.timeline.layouts import TimelineLayout
from airflow_lake_provider.lake.timeline.store import PROPERTIES_FILE, TimelineStore

if TYPE_CHECKING:
    from pathlib import Path

Location = str | os.PathLike[str] | Storage


class LakeTable:
    """A Hudi table wherever its ``Storage`` reaches; every file access goes through ``storage``.

    Versions 6, 8 and 9 are read and written, and every table service runs on each of them (the
    version's on-disk differences live in the timeline and format layers).
    """

    def __init__(self, storage: Storage, config: TableConfig, clock: InstantClock = DEFAULT_CLOCK) -> None:
        self.storage = storage
        self.config = config
        self.clock = clock
        self.layout = TimelineLayout.from_properties(config.properties, config.source)
        self._store = TimelineStore(storage, self.layout, clock)
        # Options the caller's environment sets for every action on this table (the lake
        # connection's extra, e.g. hoodie.metadata.enable); an action's own options win over them.
        self.option_defaults: dict[str, str] = {}
        # The ``metadata.policy.MetadataTableDrop`` of an action through this object that dropped
        # Hudi's metadata table, for its result (typed loosely: that module builds on this one).
        self.metadata_table_drop: Any = None
        # Key-lookup summaries of base file footers, by (relative path, size): base files are never
        # changed once written, so writes through this object skip re-reading footers they ruled out.
        self.footer_summaries: dict[tuple[str, int], Any] = {}

    @property
    def store(self) -> TimelineStore:
        """The timeline store, for actions that change the table."""
        self._store.clock = self.clock  # callers may swap the table's clock
        return self._store

    @property
    def uri(self) -> str:
        """The table's location as users name it (an absolute local path or a URI)."""
        return self.storage.root

    @property
    def base_path(self) -> Path:
        """The table's local folder (local tables only: the core itself uses ``storage`` and ``uri``)."""
        folder = local_path(self.storage)
        if folder is None:
            raise TableConfigError(f"{self.uri} is not on the local file system")
        return folder

    @classmethod
    def open(cls, location: Location, clock: InstantClock = DEFAULT_CLOCK) -> LakeTable:
        """Open an existing table; raise ``TableNotFoundError``/``TableConfigError`` otherwise, or the
        ``StorageError`` of a remote store that failed to read ``hoodie.properties`` (a retry may pass)."""
        storage = open_storage(location)
        props_rel = f"{HOODIE_DIR}/{PROPERTIES_FILE}"
        props_uri = storage.uri(props_rel)
        try:
            # Falls back to ``hoodie.properties.backup`` when an update (ours or Java's) was
            # interrupted between deleting the file and writing the new one, as Hudi's readers do.
            text = TimelineStore(storage).read_properties_text()
        except FileNotFoundError:
            raise TableNotFoundError(
                f"{storage.root} is not a Hudi table: {props_uri} does not exist"
            ) from None
        except (StorageAccessError, StorageUnavailableError, InvalidLocationError):
            raise  # the store, not the table: callers (and retries) must see which
        except StorageError as exc:
            if storage.local_folder() is None:
                raise  # a remote store's failure (throttled, a 5xx): a retry may pass
            raise TableConfigError(f"{props_uri}: cannot read ({exc})") from None
        except (LakeError, OSError, UnicodeDecodeError) as exc:
            raise TableConfigError(f"{props_uri}: cannot read ({exc})") from None
        return cls(storage, TableConfig.from_properties(parse_properties(text, props_uri), props_uri), clock)

    @classmethod
    def create(
        cls,
        location: Location,
        *,
        name: str,
        table_type: TableType | str,
        record_key_fields: tuple[str, ...],
        precombine_field: str | None,
        partition_fields: tuple[str, ...] = (),
        hive_style: bool = False,
        clock: InstantClock = DEFAULT_CLOCK,
        table_version: int = SUPPORTED_TABLE_VERSION,
        database: str | None = None,
    ) -> LakeTable:
        """Create an empty table of ``table_version`` (6, 8 or 9) at ``path`` (which must not hold a
        table already). ``precombine_field`` None or ``""``: none (the last written version wins)."""
        precombine_field = precombine_field or ""
        try:  # a name its writes would refuse: refused before the table exists
            # As the table's config reads them back: stripped (``"ts "`` is ts, ``" "`` no field).
            fields = [f.strip() for f in (*record_key_fields, *partition_fields, precombine_field)]
            check_table_names(name, [f for f in fields if f])
        except SchemaError as exc:
            raise TableConfigError(str(exc)) from None
        for what, fields in (("record key", record_key_fields), ("partition", partition_fields)):
            repeated = sorted({f for f in fields if list(fields).count(f) > 1})
            if repeated:
                raise TableConfigError(f"{what} field(s) {', '.join(repeated)} given more than once")
        storage = open_storage(location)
        parent, leaf = storage.parent(), storage.root.rstrip("/").rsplit("/", 1)[-1]
        if parent is not None and parent.exists(leaf) and leaf in parent.list_names():
            raise TableConfigError(f"{storage.root} is a file: a table needs a folder (or a new path)")
        if storage.exists(HOODIE_DIR):
            raise TableExistsError(f"{storage.root} already holds a table ({storage.uri(HOODIE_DIR)} exists)")
        if isinstance(table_type, str):
            table_type = TableType.parse(table_type)
        props = TableConfig.new_properties(
            name=name,
            table_type=table_type,
            record_key_fields=tuple(record_key_fields),
            precombine_field=precombine_field,
            partition_fields=tuple(partition_fields),
            hive_style=hive_style,
            table_version=table_version,
            database=database,
        )
        config = TableConfig.from_properties(props)  # validate before touching the disk
        if precombine_field in record_key_fields:
            raise TableConfigError(f"precombine field {precombine_field!r} cannot also be a record key field")
        TimelineStore(storage, TimelineLayout.from_properties(props)).initialize(props)
        return cls(storage, config, clock)

    # -- views --------------------------------------------------------------------------------
    def timeline(self) -> Timeline:
        return Timeline.load(self.storage, self.layout)

    def file_system_view(
        self,
        timeline: Timeline | None = None,
        partitions: list[str] | None = None,
        lister: Lister | None = None,
        sizes: bool = True,
    ) -> FileSystemView:
        return FileSystemView.build(self.config, timeline or self.timeline(), partitions, lister, sizes)

    def data_avro_schema(self, timeline: Timeline | None = None, as_of: str | None = None) -> dict | None:
        """The table's Avro schema (data fields): newest commit's, else ``hoodie.table.create.schema``."""
        tl = timeline or self.timeline()
        for instant in reversed(tl.completed_commits):
            if as_of is not None and instant.timestamp > as_of:
                continue
            text = tl.commit_metadata(instant).schema
            if text:
                return _load_schema_json(text, str(tl.path_of(instant)))
        if self.config.create_schema:
            return _load_schema_json(self.config.create_schema, "hoodie.table.create.schema")
        return None

    def arrow_schema(self, timeline: Timeline | None = None, as_of: str | None = None) -> pa.Schema | None:
        """Output schema of reads: the five meta columns (if populated) then the data columns."""
        avro = self.data_avro_schema(timeline, as_of)
        if avro is None:
            return None
        data = avro_to_arrow(avro)
        # Hudi's meta columns are ours to fill; ``_hoodie_is_deleted`` is a data column (a version
        # flagged true in a log is a delete: the merge reads it, hudi-rs reads it as a column).
        data = pa.schema([f for f in data if not f.name.startswith("_hoodie_") or f.name == IS_DELETED_FIELD])
        return pa.schema(meta_arrow_fields() + list(data)) if self.config.populate_meta_fields else data

    def parquet_schema(self, relative_path: str) -> pa.Schema:
        with self.storage.open_input(relative_path) as source:
            return pq.read_schema(source)


def _load_schema_json(text: str, source: str) -> dict:
    try:
        loaded = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise SchemaError(f"{source}: table schema is not valid JSON ({exc})") from None
    if not isinstance(loaded, dict):
        raise LakeError(f"{source}: table schema is not an Avro record")
    return loaded
