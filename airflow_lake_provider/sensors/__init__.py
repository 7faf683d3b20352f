"""Airflow sensors of the lake provider."""
