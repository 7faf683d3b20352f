"""A v6 test table (``tests/data/hudi-tables``) given the metadata table (MDT) a Hudi 0.14/0.15 Java
writer creates on its next commit, built with our own writers: the ``files`` partition only.

What Java 0.15 does (``HoodieBackedTableMetadataWriter.initializeIfNeeded`` ->
``initializeFromFilesystem``), and so this builder:

- the initialisation time is the data table's latest completed instant (``00000000000000`` if none)
  plus the partition-initialisation suffix ``010`` (``createIndexInitTimestamp``): 20 digits after
  a 17-digit instant;
- ``.hoodie/metadata/.hoodie/hoodie.properties`` of a MOR table ``<name>_metadata``, table version 6,
  timeline layout 1 (``initializeMetaClient``);
- ``files/.files-0000-0_<init>.log.1_0-0-0``: one empty DELETE block at the init time
  (``initializeFileGroups``), before the deltacommit;
- deltacommit ``<init>`` (requested, inflight, completed: JSON commit metadata, layout 1) whose
  bulk insert writes the HFile base ``files/files-0000-0_<token>_<init>.hfile``: one
  ``__all_partitions__`` record and one file-list record per partition, from a listing of the
  table's files of completed instants;
- then ``hoodie.table.metadata.partitions=files`` in the data table's ``hoodie.properties``.

The record schema is Hudi 1.x's ``HoodieMetadataRecord`` (taken from a 1.x test table's MDT; 0.15's
has fewer optional fields, which a reader resolving by name ignores): the one difference from what
Java 0.15 writes that the tests do not depend on. HFiles are written in the HBase dialect, as 0.x
writes them through HBase.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

from mdt_tables import DATA_1X

from airflow_lake_provider.lake.format import bloom_filter
from airflow_lake_provider.lake.format.hfile import Dialect, HFileSettings, read_hfile
from airflow_lake_provider.lake.format.properties import CHECKSUM_KEY, table_checksum
from airflow_lake_provider.lake.log_file.delete_block import encode_delete_content
from airflow_lake_provider.lake.log_file.hfile_block import SCHEMA_INFO, decode_hfile_cells
from airflow_lake_provider.lake.log_file.log_format import BlockType, HeaderKey, encode_block
from airflow_lake_provider.lake.storage import open_storage
from airflow_lake_provider.lake.table.metadata.compaction import base_file_bytes
from airflow_lake_provider.lake.table.metadata.files import (
    ALL_PARTITIONS,
    FILE_LIST,
    FILES_GROUP,
    FILES_PARTITION,
    MDT_DIR,
    PARTITION_LIST,
)
from airflow_lake_provider.lake.table.metadata.listing import list_table_files
from airflow_lake_provider.lake.table.metadata.policy import PARTITIONS_KEY
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.lake.timeline.commit_metadata import CommitMetadata, WriteStat
from airflow_lake_provider.lake.timeline.instant import Action
from airflow_lake_provider.lake.timeline.layouts import LAYOUT_V1
from airflow_lake_provider.lake.timeline.store import TimelineStore

SOLO = "00000000000000"  # Hudi's SOLO_COMMIT_TIMESTAMP
INIT_SUFFIX = "010"  # HoodieTableMetadataUtil's PARTITION_INITIALIZATION_TIME_SUFFIX
INIT_TOKEN = "0-0-0"  # HoodieLogFormat.DEFAULT_WRITE_TOKEN (the init log) and our base file's
# The v6 (0.x) HFile dialect: HBase's writer.
V6_HFILE = HFileSettings(dialect=Dialect.HBASE)
_SCHEMA_SOURCE = ("mdt_basic_mor_avro_v8_nonpartitioned", "files-0000-0_0-35-149_00000000000000000.hfile")


def mdt_properties(data_name: str) -> dict[str, str]:
    """``hoodie.properties`` of a v6 MDT, as ``HoodieBackedTableMetadataWriter.initializeMetaClient``
    (0.15) sets it."""
    props = {
        "hoodie.table.name": f"{data_name}_metadata",
        "hoodie.table.type": "MERGE_ON_READ",
        "hoodie.table.version": "6",
        "hoodie.timeline.layout.version": "1",
        "hoodie.archivelog.folder": "archived",
        "hoodie.compaction.payload.class": "org.apache.hudi.metadata.HoodieMetadataPayload",
        "hoodie.table.base.file.format": "HFILE",
        "hoodie.table.recordkey.fields": "key",
        "hoodie.populate.meta.fields": "false",
        "hoodie.table.keygenerator.class": "org.apache.hudi.metadata.HoodieTableMetadataKeyGenerator",
        "hoodie.datasource.write.drop.partition.columns": "false",
    }
    return {**props, CHECKSUM_KEY: str(table_checksum(props))}


def metadata_record_schema() -> tuple[str, dict[str, Any]]:
    """The ``HoodieMetadataRecord`` schema text (with meta fields) and a record of it with every
    optional field null, from the 1.x test table's ``files`` base file."""
    name, base = _SCHEMA_SOURCE
    with zipfile.ZipFile(DATA_1X / f"{name}.zip") as zf:
        (member,) = [m for m in zf.namelist() if m.endswith(f"/{base}") and "__MACOSX" not in m]
        data = zf.read(member)
    hfile = read_hfile(data, member)
    schema = hfile.content.info(SCHEMA_INFO)
    assert schema is not None
    text = schema.decode("utf-8")
    fields = json.loads(text)["fields"]
    template = {f["name"]: None for f in fields}
    (_, sample), *_ = decode_hfile_cells(hfile, schema, member)
    template.update({k: v for k, v in sample.items() if k.startswith("_hoodie_")})
    return text, template


def _record(template: dict[str, Any], kind: int, files: dict[str, int]) -> dict[str, Any]:
    listing = {name: {"size": size, "isDeleted": False} for name, size in files.items()}
    return {**template, "key": "", "type": kind, "filesystemMetadata": listing}


def add_v6_metadata_table(table: Path) -> str:
    """Give the v6 table at ``table`` the MDT (``files`` partition) Java 0.15 would initialise on it;
    return the initialisation instant (``<latest completed data instant>010``)."""
    data = LakeTable.open(table)
    assert data.config.table_version == 6, data.config.table_version
    completed = [i.timestamp for i in data.timeline().instants if i.is_completed]
    init = max(completed, default=SOLO) + INIT_SUFFIX
    listing = list_table_files(open_storage(table))
    schema, template = metadata_record_schema()
    records = {
        ALL_PARTITIONS: _record(template, PARTITION_LIST, dict.fromkeys(listing, 0)),
        **{partition: _record(template, FILE_LIST, files) for partition, files in listing.items()},
    }
    mdt = open_storage(table / MDT_DIR)
    store = TimelineStore(mdt, LAYOUT_V1, data.clock)
    store.initialize(mdt_properties(data.config.name))
    # initializeFileGroups: the file group's first log, one empty delete block, before the commit.
    empty = encode_block(BlockType.DELETE, {HeaderKey.INSTANT_TIME: init}, encode_delete_content([]))
    mdt.create(f"{FILES_PARTITION}/.{FILES_GROUP}_{init}.log.1_{INIT_TOKEN}", empty)
    requested = store.create_requested(init, Action.DELTACOMMIT)
    inflight = store.transition_to_inflight(requested, CommitMetadata("BULK_INSERT_PREPPED").to_json_bytes())
    name = f"{FILES_GROUP}_{INIT_TOKEN}_{init}.hfile"
    rel = f"{FILES_PARTITION}/{name}"
    body = base_file_bytes(
        dict(sorted(records.items())), name, schema, V6_HFILE, bloom_filter.DEFAULT_SETTINGS
    )
    mdt.create(rel, body)
    stat = WriteStat(
        file_id=FILES_GROUP,
        partition_path=FILES_PARTITION,
        path=rel,
        prev_commit="null",
        num_writes=len(records),
        num_inserts=len(records),
        total_write_bytes=len(body),
        file_size_in_bytes=len(body),
    )
    done = CommitMetadata("BULK_INSERT_PREPPED", {FILES_PARTITION: (stat,)}, {"schema": schema})
    store.transition_to_completed(inflight, done.to_json_bytes())
    data.store.modify_properties({**data.config.properties, PARTITIONS_KEY: FILES_PARTITION})
    return init


def read_json(path: Path) -> dict[str, Any]:
    return json.load(io.BytesIO(path.read_bytes()))
