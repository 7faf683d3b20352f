"""Provider metadata read by Airflow's ProvidersManager (entry point ``apache_airflow_provider``).

Keep this module free of Airflow imports: Airflow calls it while it discovers providers.
"""

from __future__ import annotations

from typing import Any

from airflow_lake_provider import __version__

# The one integration every hook, operator, sensor and trigger below belongs to.
INTEGRATION = "Lake (Apache Hudi)"

# The `lake` connection form (Airflow 3.2+ reads it from here, without importing the hook): the S3 key
# pair in login and password (the password field is masked in the UI and in logs), the lake's other
# settings as extra fields stored in the connection's extra JSON.
LAKE_CONNECTION_TYPE: dict[str, Any] = {
    "connection-type": "lake",
    "hook-class-name": "airflow_lake_provider.hooks.lake.LakeHook",
    "hook-name": "Lake (Apache Hudi)",
    "ui-field-behaviour": {
        "hidden-fields": ["host", "schema", "port"],
        "relabeling": {"login": "AWS access key id", "password": "AWS secret access key"},
        "placeholders": {
            "login": "AKIA... (S3 tables only; empty: the worker's own credentials)",
            "password": "secret access key (S3 tables only)",
            "extra": '{"base_path": "s3://bucket/lake", "region": "us-east-1"}',
        },
    },
    "conn-fields": {
        "base_path": {
            "label": "Base path",
            "description": "Root of the lake: an absolute folder or s3://bucket/prefix. Relative table "
            "paths resolve under it (without it they are refused); absolute ones must lie inside it.",
            "schema": {"type": ["string", "null"]},
        },
        "endpoint": {
            "label": "S3 endpoint",
            "description": "S3 API endpoint URL (MinIO, a private endpoint); empty: AWS.",
            "schema": {"type": ["string", "null"]},
        },
        "region": {
            "label": "S3 region",
            "description": "Region of the bucket, e.g. eu-west-1.",
            "schema": {"type": ["string", "null"]},
        },
        "session_token": {
            "label": "AWS session token",
            "description": "With temporary credentials (STS): the session token of the key pair above. "
            "No key pair at all: the worker's own credentials (environment, web identity, container "
            "or instance role).",
            "schema": {"type": ["string", "null"], "format": "password"},
        },
        "allow_http": {
            "label": "Allow plain HTTP",
            "description": "Allow an http:// endpoint (a local MinIO).",
            "schema": {"type": ["boolean", "null"], "default": False},
        },
    },
}


def get_provider_info() -> dict[str, Any]:
    """Return the provider description Airflow expects (``package-name`` is the distribution name)."""
    return {
        "package-name": "airflow-lake-provider",
        "name": "Lake (Apache Hudi table services)",
        "description": (
            "Runs Apache Hudi table services (clean, compaction, rollback, archival, partition "
            "commit) from Airflow."
        ),
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": INTEGRATION,
                "external-doc-url": "https://hudi.apache.org/docs/table_management",
                "tags": ["apache", "software"],
            }
        ],
        "hooks": [
            {
                "integration-name": INTEGRATION,
                # The module of the hook class; the hook's other modules are parts of it (mixins, helpers).
                "python-modules": ["airflow_lake_provider.hooks.lake"],
            }
        ],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_lake_provider.operators.clean",
                    "airflow_lake_provider.operators.compaction",
                    "airflow_lake_provider.operators.partition_commit",
                    "airflow_lake_provider.operators.rollback",
                    "airflow_lake_provider.operators.write",
                ],
            }
        ],
        "connection-types": [LAKE_CONNECTION_TYPE],
        "sensors": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_lake_provider.sensors.compaction",
                    "airflow_lake_provider.sensors.partition_commit",
                ],
            }
        ],
        "triggers": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "airflow_lake_provider.triggers.compaction",
                    "airflow_lake_provider.triggers.partition_commit",
                ],
            }
        ],
    }
