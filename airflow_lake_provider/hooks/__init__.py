"""Airflow hooks of the lake provider."""
