"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``).

Keep this module free of Airflow imports: Airflow calls it while it discovers providers.
"""

from __future__ import annotations

from typing import Any

from airflow_lake_provider import __version__


def get_provider_info() -> dict[str, Any]:
    """Return the provider description Airflow expects (``package-name`` is the distribution name)."""
    return {
        "package-name": "airflow-lake-provider",
        "name": "Lake (Apache Hudi table services)",
        "description": "Runs Apache Hudi table services (clean, compaction, partition commit) from Airflow.",
        "versions": [__version__],
        "hooks": [
            {
                "integration-name": "Lake",
                "python-modules": [
                    "airflow_lake_provider.hooks.lake",
                    "airflow_lake_provider.hooks.compaction",
                    "airflow_lake_provider.hooks.partition_commit",
                ],
            }
        ],
        "operators": [
            {
                "integration-name": "Lake",
                "python-modules": [
                    "airflow_lake_provider.operators.clean",
                    "airflow_lake_provider.operators.compaction",
                    "airflow_lake_provider.operators.partition_commit",
                    "airflow_lake_provider.operators.rollback",
                ],
            }
        ],
        "connection-types": [
            {
                "connection-type": "lake",
                "hook-class-name": "airflow_lake_provider.hooks.lake.LakeHook",
                "hook-name": "Lake (Apache Hudi)",
            }
        ],
        "sensors": [
            {
                "integration-name": "Lake",
                "python-modules": [
                    "airflow_lake_provider.sensors.compaction",
                    "airflow_lake_provider.sensors.partition_commit",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": "Lake",
                "python-modules": [
                    "airflow_lake_provider.triggers.compaction",
                    "airflow_lake_provider.triggers.partition_commit",
                ],
            }
        ],
    }
