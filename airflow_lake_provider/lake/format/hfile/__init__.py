"""HFile v3 (the base files and log block content of Hudi's metadata table): reader and writer."""

from airflow_lake_provider.lake.format.hfile.codec import Compression
from airflow_lake_provider.lake.format.hfile.model import Dialect, HFileContent, HFileSettings
from airflow_lake_provider.lake.format.hfile.reader import HFile, read_hfile
from airflow_lake_provider.lake.format.hfile.writer import write_hfile

__all__ = ["Compression", "Dialect", "HFile", "HFileContent", "HFileSettings", "read_hfile", "write_hfile"]
