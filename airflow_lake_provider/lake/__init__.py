"""Table-format core: Apache Hudi table version 6 in pure Python (no Airflow, no Spark)."""
