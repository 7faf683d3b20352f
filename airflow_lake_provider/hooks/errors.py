"""Exceptions of the Airflow layer, and the checks of templated arguments they come from."""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowException, AirflowFailException


class LakeHookError(AirflowException):
    """A table service failed; the message names the table and the instant."""


class LakeConfigError(LakeHookError, AirflowFailException):
    """Invalid arguments or table options: retrying cannot help, so the task fails at once."""


class LakeServiceBusyError(LakeHookError):
    """Another run of the same service holds the table's lock (a retry later may succeed)."""


class LakeSparkJobError(LakeHookError):
    """The Spark job did not complete the instant it was submitted for."""


def as_bool(value: bool | str, name: str) -> bool:
    """A flag that may arrive as a rendered template string (``"True"``, ``"false"``)."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no", ""):
        return False
    raise LakeConfigError(f"{name}={value!r} is not a boolean")
