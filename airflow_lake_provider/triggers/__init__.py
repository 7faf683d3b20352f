"""Airflow triggers of the lake provider."""

from __future__ import annotations

# The shortest wait between two looks at a table from the triggerer. Airflow accepts a sensor's
# poke_interval=0, which would list the table back to back there (on S3, a request loop).
MIN_POLL_SECONDS = 1.0


def trigger_poll_interval(poke_interval: float) -> float:
    """A sensor's ``poke_interval`` as its trigger's poll interval: at least :data:`MIN_POLL_SECONDS`."""
    return max(float(poke_interval), MIN_POLL_SECONDS)
