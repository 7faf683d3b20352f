"""The option registry: every option the services and the writer read, typed and documented.

Below ``format/`` in the layering: it imports only ``errors``. Services read an option with
``OPTION.read(table_properties, options)``; the entry points (CLI, operators, Spark jobs) check what
a caller typed with :func:`check_options`.
"""

from airflow_lake_provider.lake.config.known import BY_NAME, check_options, of_family
from airflow_lake_provider.lake.config.option import Option
from airflow_lake_provider.lake.config.parsers import JAVA_INT_MAX, boolean
from airflow_lake_provider.lake.config.registry import OPTIONS

__all__ = ["BY_NAME", "JAVA_INT_MAX", "OPTIONS", "Option", "boolean", "check_options", "of_family"]
