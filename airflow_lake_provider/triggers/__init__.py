"""Airflow triggers of the lake provider."""
