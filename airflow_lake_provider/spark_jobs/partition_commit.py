"""Spark entry script of partition commit: the ``metastore`` policy needs Spark SQL (Hive support).

Planning, the commit state and the other policies run in the driver, in the table core; the
``metastore`` policy creates the table definition if it is missing (as Hudi's hive sync defines it)
and adds the partition with ``ALTER TABLE ... ADD IF NOT EXISTS PARTITION``.

    spark-submit spark_jobs/partition_commit.py --table PATH --partition P [--partition P ...]
        [--option k=v ...] [--watermark T] [--metastore-dir DIR] [--dry-run]
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file by spark-submit: make the package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from airflow_lake_provider.lake.config.registry import PC_HIVE_DATABASE, PC_HIVE_TABLE
from airflow_lake_provider.lake.errors import LakeError
from airflow_lake_provider.lake.services.partition_commit.executor import CommitContext, commit_partitions
from airflow_lake_provider.lake.table.table import LakeTable
from airflow_lake_provider.spark_jobs._common import emit_result, option_values, setup_logging

log = logging.getLogger(__name__)

DATABASE_KEY = PC_HIVE_DATABASE.key
TABLE_KEY = PC_HIVE_TABLE.key
# What Hudi's hive sync stores for a table: Hudi's input formats over Hive's parquet SerDe.
SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"
OUTPUT_FORMAT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"
# Without Hudi's jars on the classpath (the pip pyspark has none) Hive refuses Hudi's input format;
# the definition then falls back to Hive's plain parquet one, and says so in a table property.
PARQUET_INPUT_FORMAT = "org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat"
INPUT_FORMAT = {
    "COPY_ON_WRITE": "org.apache.hudi.hadoop.HoodieParquetInputFormat",
    "MERGE_ON_READ": "org.apache.hudi.hadoop.realtime.HoodieParquetRealtimeInputFormat",
}


def _quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _quote_str(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def hive_type(arrow_type: Any) -> str:
    """The Hive column type of an Arrow type (as Hudi's hive sync maps the Avro schema)."""
    import pyarrow as pa

    t = arrow_type
    simple = [
        (pa.types.is_boolean, "boolean"),
        (pa.types.is_int8, "int"),
        (pa.types.is_int16, "int"),
        (pa.types.is_int32, "int"),
        (pa.types.is_int64, "bigint"),
        (pa.types.is_float32, "float"),
        (pa.types.is_float64, "double"),
        (pa.types.is_string, "string"),
        (pa.types.is_large_string, "string"),
        (pa.types.is_binary, "binary"),
        (pa.types.is_large_binary, "binary"),
        (pa.types.is_date, "date"),
        (pa.types.is_timestamp, "timestamp"),
    ]
    for check, name in simple:
        if check(t):
            return name
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"array<{hive_type(t.value_type)}>"
    if pa.types.is_map(t):
        return f"map<{hive_type(t.key_type)},{hive_type(t.item_type)}>"
    if pa.types.is_struct(t):
        return "struct<" + ",".join(f"{_quote_ident(f.name)}:{hive_type(f.type)}" for f in t) + ">"
    return "string"


class SparkMetastorePolicy:
    """The ``metastore`` policy over a SparkSession with Hive support (the embedded Derby one works)."""

    def __init__(self, spark: Any, table: LakeTable, options: dict[str, str] | None = None) -> None:
        layers = (table.config.properties, options or {})
        self.spark = spark
        self.table = table
        self.database = PC_HIVE_DATABASE.read(*layers)
        self.name = PC_HIVE_TABLE.read(*layers) or table.config.name
        self._ensured = False

    @property
    def qualified(self) -> str:
        return f"{_quote_ident(self.database)}.{_quote_ident(self.name)}"

    def create_table_sql(self, input_format: str | None = None) -> str:
        schema = self.table.arrow_schema()
        if schema is None:
            raise LakeError(f"{self.table.uri}: the table has no schema yet (no completed write)")
        part_fields = list(self.table.config.partition_fields)
        columns = [f"{_quote_ident(f.name)} {hive_type(f.type)}" for f in schema if f.name not in part_fields]
        partitioned = ", ".join(f"{_quote_ident(p)} string" for p in part_fields)
        location = self.table.uri
        table_type = self.table.config.table_type.name
        # Hive sync also stores ``spark.sql.sources.*`` through the metastore client; Spark SQL DDL
        # refuses those keys, so the definition carries the rest of what hive sync sets.
        props = {
            "last_commit_time_sync": "",
            "hoodie.query.as.ro.table": "false",
            "type": "mor" if table_type == "MERGE_ON_READ" else "cow",
            "primaryKey": ",".join(self.table.config.record_key_fields),
            "preCombineField": self.table.config.precombine_field or "",
        }
        if input_format is not None:
            props["lake.hudi.inputformat"] = INPUT_FORMAT[table_type]
        return (
            f"CREATE EXTERNAL TABLE IF NOT EXISTS {self.qualified} ({', '.join(columns)})"
            + (f" PARTITIONED BY ({partitioned})" if part_fields else "")
            + f" ROW FORMAT SERDE {_quote_str(SERDE)}"
            + f" WITH SERDEPROPERTIES ('hoodie.query.as.ro.table'='false', 'path'={_quote_str(location)})"
            + f" STORED AS INPUTFORMAT {_quote_str(input_format or INPUT_FORMAT[table_type])}"
            + f" OUTPUTFORMAT {_quote_str(OUTPUT_FORMAT)}"
            + f" LOCATION {_quote_str(location)}"
            + " TBLPROPERTIES ("
            + ", ".join(f"{_quote_str(k)}={_quote_str(v)}" for k, v in props.items())
            + ")"
        )

    def commit(self, context: CommitContext) -> None:
        if not self._ensured:
            self.spark.sql(f"CREATE DATABASE IF NOT EXISTS {_quote_ident(self.database)}")
            try:
                self.spark.sql(self.create_table_sql())
            except Exception as exc:
                if "ClassNotFoundException" not in str(exc):
                    raise
                log.warning(
                    "Hudi's input format is not on Spark's classpath: defining %s with %s",
                    self.qualified,
                    PARQUET_INPUT_FORMAT,
                )
                self.spark.sql(self.create_table_sql(PARQUET_INPUT_FORMAT))
            self._ensured = True
        if not context.partition_values:
            return  # a non-partitioned table has no partition to add
        spec = ", ".join(f"{_quote_ident(k)}={_quote_str(v)}" for k, v in context.partition_values.items())
        self.spark.sql(
            f"ALTER TABLE {self.qualified} ADD IF NOT EXISTS PARTITION ({spec})"
            f" LOCATION {_quote_str(context.partition_uri)}"
        )
        last = max(context.committed_instants, default="")
        self.spark.sql(
            f"ALTER TABLE {self.qualified} SET TBLPROPERTIES ('last_commit_time_sync'={_quote_str(last)})"
        )


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="partition_commit.py", description=__doc__)
    parser.add_argument("--table", required=True, help="table base path")
    parser.add_argument("--partition", action="append", required=True, help="partition path (repeatable)")
    parser.add_argument("--option", action="append", default=[], help="k=v (repeatable)")
    parser.add_argument("--watermark", help="ISO 8601 time or epoch milliseconds")
    parser.add_argument("--metastore-dir", help="folder of the embedded Derby metastore and the warehouse")
    parser.add_argument("--allow-missing", action="store_true", help="partitions not written yet wait")
    parser.add_argument("--dry-run", action="store_true")
    return parser.parse_args(argv)


def options_of(pairs: Sequence[str]) -> dict[str, str]:
    return option_values(pairs)


def build_session(metastore_dir: str | None, scratch: str) -> Any:
    """A SparkSession with Hive support whose Derby files stay out of the working directory.

    Derby puts ``derby.log`` (and a relative ``metastore_db``, Hive's default) under
    ``derby.system.home``, else the current folder. It goes to ``metastore_dir`` when given, else
    to ``scratch`` (a temporary folder removed after the job: without ``--metastore-dir`` only a
    metastore configured for Spark itself, e.g. hive-site.xml, outlives the job).
    """
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("lake-partition-commit").config(
        "spark.ui.showConsoleProgress", "false"
    )
    if metastore_dir:
        base = Path(metastore_dir).resolve()
        base.mkdir(parents=True, exist_ok=True)
        builder = builder.config("spark.sql.warehouse.dir", str(base / "warehouse")).config(
            "spark.hadoop.javax.jdo.option.ConnectionURL",
            f"jdbc:derby:;databaseName={base / 'metastore_db'};create=true",
        )
    else:
        base = Path(scratch)
        if not SparkConf().contains("spark.sql.warehouse.dir"):  # else ./spark-warehouse
            builder = builder.config("spark.sql.warehouse.dir", str(base / "warehouse"))
    spark = builder.enableHiveSupport().getOrCreate()
    # Before the first SQL statement: the Hive client (and Derby with it) starts lazily.
    spark.sparkContext._jvm.java.lang.System.setProperty("derby.system.home", str(base))
    spark.sparkContext.setLogLevel("WARN")
    return spark


def run(args: argparse.Namespace, spark: Any) -> dict[str, Any]:
    table = LakeTable.open(args.table)
    options = options_of(args.option)
    result = commit_partitions(
        table,
        args.partition,
        options,
        watermark=args.watermark,
        metastore=SparkMetastorePolicy(spark, table, options),
        require_existing=not args.allow_missing,
        dry_run=args.dry_run,
    )
    return result.to_dict()


def main(argv: Sequence[str] | None = None) -> int:
    setup_logging()
    args = parse_args(sys.argv[1:] if argv is None else argv)
    scratch = tempfile.mkdtemp(prefix="lake-metastore-")
    try:
        spark = build_session(args.metastore_dir, scratch)
        try:
            emit_result(run(args, spark))
        except LakeError as exc:
            emit_result({"outcome": "FAILED", "error": str(exc)})
            return 1
        finally:
            spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
