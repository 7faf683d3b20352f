"""Exceptions of the Airflow layer, and the checks of templated arguments they come from."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import jinja2
from airflow.sdk.exceptions import AirflowException, AirflowFailException

# What a run without a logical date (a manual trigger from the UI, or the REST API's default)
# lacks in its template context.
_INTERVAL_NAMES = ("data_interval_end", "data_interval_start", "logical_date", "ds", "ts")


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


@contextlib.contextmanager
def explain_missing_interval(context: Mapping[str, Any], task_id: str) -> Iterator[None]:
    """Around a task's template rendering: a template naming the data interval fails at once (no
    retry) on a run that has none, saying which template to use instead.

    A manual run (the UI's Trigger button, the REST API with ``logical_date: null``) has no logical
    date, so ``data_interval_end`` is undefined in its context and a bare ``{{ data_interval_end }}``
    would fail every retry the same way.
    """
    try:
        yield
    except jinja2.UndefinedError as exc:
        missing = next((n for n in _INTERVAL_NAMES if f"'{n}'" in str(exc)), None)
        if missing is None or missing in context:
            raise
        raise LakeConfigError(
            f"task {task_id}: a template names {missing}, which this run does not have (a manual run "
            f"has no logical date); use e.g. '{{{{ {missing} | default(dag_run.run_after) }}}}' "
            "to fall back to the time the run was triggered"
        ) from exc
