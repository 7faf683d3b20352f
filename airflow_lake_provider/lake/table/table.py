"""``LakeTable``: opening and creating a table, and the views every service starts from."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from airflow_lake_provider.lake.errors import (
    LakeError,
    SchemaError,
    TableConfigError,
    TableExistsError,
    TableNotFoundError,
)
from airflow_lake_provider.lake.format.avro_schema import avro_to_arrow, meta_arrow_fields
from airflow_lake_provider.lake.format.instant import DEFAULT_CLOCK, InstantClock
from airflow_lake_provider.lake.format.properties import parse_properties
from airflow_lake_provider.lake.format.table_config import TableConfig, TableType
from airflow_lake_provider.lake.table.fs_view import FileSystemView, Lister
from airflow_lake_provider.lake.table.timeline import HOODIE_DIR, Timeline
from airflow_lake_provider.lake.table.timeline_store import PROPERTIES_FILE, TimelineStore


class LakeTable:
    """A Hudi v6 table on the local file system."""

    def __init__(self, base_path: Path, config: TableConfig, clock: InstantClock = DEFAULT_CLOCK) -> None:
        self.base_path = base_path
        self.config = config
        self.clock = clock
        self.store = TimelineStore(base_path)

    @classmethod
    def open(cls, path: str | os.PathLike[str], clock: InstantClock = DEFAULT_CLOCK) -> LakeTable:
        """Open an existing table; raise ``TableNotFoundError``/``TableConfigError`` otherwise."""
        base = Path(path).absolute()
        props_path = base / HOODIE_DIR / PROPERTIES_FILE
        if not props_path.is_file():
            raise TableNotFoundError(f"{base} is not a Hudi table: {props_path} does not exist")
        try:
            text = props_path.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TableConfigError(f"{props_path}: cannot read ({exc})") from None
        return cls(base, TableConfig.from_properties(parse_properties(text), str(props_path)), clock)

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        *,
        name: str,
        table_type: TableType | str,
        record_key_fields: tuple[str, ...],
        precombine_field: str,
        partition_fields: tuple[str, ...] = (),
        hive_style: bool = False,
        clock: InstantClock = DEFAULT_CLOCK,
    ) -> LakeTable:
        """Create an empty table at ``path`` (which must not hold a table already)."""
        base = Path(path).absolute()
        if (base / HOODIE_DIR).exists():
            raise TableExistsError(f"{base} already holds a table ({base / HOODIE_DIR} exists)")
        if isinstance(table_type, str):
            table_type = TableType.parse(table_type)
        props = TableConfig.new_properties(
            name=name,
            table_type=table_type,
            record_key_fields=tuple(record_key_fields),
            precombine_field=precombine_field,
            partition_fields=tuple(partition_fields),
            hive_style=hive_style,
        )
        config = TableConfig.from_properties(props)  # validate before touching the disk
        if precombine_field in record_key_fields:
            raise TableConfigError(f"precombine field {precombine_field!r} cannot also be a record key field")
        TimelineStore(base).initialize(props)
        return cls(base, config, clock)

    # -- views --------------------------------------------------------------------------------
    def timeline(self) -> Timeline:
        return Timeline.load(self.base_path)

    def file_system_view(
        self,
        timeline: Timeline | None = None,
        partitions: list[str] | None = None,
        lister: Lister | None = None,
    ) -> FileSystemView:
        return FileSystemView.build(self.config, timeline or self.timeline(), partitions, lister)

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
        data = pa.schema([f for f in data if not f.name.startswith("_hoodie_")])
        return pa.schema(meta_arrow_fields() + list(data)) if self.config.populate_meta_fields else data

    def parquet_schema(self, relative_path: str) -> pa.Schema:
        return pq.read_schema(self.base_path / relative_path)


def _load_schema_json(text: str, source: str) -> dict:
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{source}: table schema is not valid JSON ({exc})") from None
    if not isinstance(loaded, dict):
        raise LakeError(f"{source}: table schema is not an Avro record")
    return loaded
