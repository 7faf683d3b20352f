"""Airflow operators of the lake provider."""
