"""Storage: the one place where the table core reads, writes, lists and deletes files.

``base`` holds the interface, ``local`` the local disk and ``open_storage``, ``s3`` S3 (loaded only for
``s3://`` locations), ``crash`` the tests' crash injection (a storage around another). The names
most callers need are re-exported here.
"""

from airflow_lake_provider.lake.storage.base import HOODIE_DIR, Listing, Storage
from airflow_lake_provider.lake.storage.crash import CrashingStorage, CrashInjector, SimulatedCrash
from airflow_lake_provider.lake.storage.local import LocalStorage, local_path, open_storage, resolved_uri

__all__ = [
    "HOODIE_DIR",
    "CrashInjector",
    "CrashingStorage",
    "Listing",
    "LocalStorage",
    "SimulatedCrash",
    "Storage",
    "local_path",
    "open_storage",
    "resolved_uri",
]
