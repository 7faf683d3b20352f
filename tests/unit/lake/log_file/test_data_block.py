"""Avro data blocks of log files: values cast to the block's schema exactly, or refused by name."""

from __future__ import annotations

import pyarrow as pa
import pytest

from airflow_lake_provider.lake.errors import SchemaError
from airflow_lake_provider.lake.format.avro_schema import arrow_to_avro, with_meta_fields
from airflow_lake_provider.lake.log_file.data_block import avro_data_block


def test_avro_data_block_refuses_lossy_cast_naming_field_and_value() -> None:
    schema = with_meta_fields(arrow_to_avro(pa.schema([("f", pa.float32())]), "r", "hoodie.r"))
    meta = {name: ["x"] for name in ("_hoodie_commit_time", "_hoodie_commit_seqno", "_hoodie_record_key")}
    meta |= {"_hoodie_partition_path": [""], "_hoodie_file_name": ["x"]}
    with pytest.raises(SchemaError, match=r"column 'f': value 0.1 does not fit float exactly"):
        avro_data_block(pa.table({**meta, "f": pa.array([0.1])}), schema, "20250601120000000")
