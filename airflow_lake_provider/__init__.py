"""Apache Airflow provider that runs Apache Hudi table services."""

__version__ = "0.1.0"
