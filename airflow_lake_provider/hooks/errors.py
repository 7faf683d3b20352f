"""Exceptions of the Airflow layer, the one translation of the core's errors into them, and the
checks of templated arguments."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import jinja2
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_lake_provider.lake.config.parsers import boolean
from airflow_lake_provider.lake.errors import (
    ConfigError,
    LakeError,
    MissingExtraError,
    ServiceBusyError,
    StorageAccessError,
    StorageError,
    TableNotFoundError,
)

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


@contextlib.contextmanager
def core_errors(what: str, retry_note: str = "") -> Iterator[None]:
    """Around a call into the table core: its errors become the Airflow layer's, decided here only.

    A ``ConfigError`` (an unknown option, a bad value) and any other bad input (the core raises those
    as ``ValueError``: a schema, a path outside the table, a missing partition) fail the task at once
    (:class:`LakeConfigError`): a retry reads the same input. A busy lock is
    :class:`LakeServiceBusyError` and any other ``LakeError`` is :class:`LakeHookError`: both retried.
    ``what`` names the action and the table (``clean of s3://b/t``); ``retry_note`` ends the message
    of a retried failure (what a retry will do).
    """
    try:
        yield
    except LakeHookError:
        raise
    except ServiceBusyError as exc:
        raise LakeServiceBusyError(f"{what} not started: {exc}") from exc
    except (ConfigError, ValueError) as exc:
        raise LakeConfigError(f"{what}: {exc}") from exc
    except LakeError as exc:
        raise LakeHookError(f"{what} failed: {exc}{retry_note}") from exc


# Opening a table: what a retry cannot change (besides every ValueError, as for any core call).
_NO_RETRY_OPENING = (ValueError, TableNotFoundError, MissingExtraError, StorageAccessError)


def fails_now(exc: BaseException) -> bool:
    """Whether ``exc``, raised where a trigger looks at a table, should fail its task at once (as the
    hooks decide for the same error) rather than be retried: the triggerer passes only this on."""
    return isinstance(exc, (AirflowFailException, ConfigError, *_NO_RETRY_OPENING))


@contextlib.contextmanager
def opening_errors() -> Iterator[None]:
    """Around opening a table or a location: what a retry cannot change (no table there, a bad URI or
    ``hoodie.properties``, a missing extra, a refused key) fails the task at once; the store failing
    (down, throttled, a read cut off) is retried."""
    try:
        yield
    except LakeHookError:
        raise
    except _NO_RETRY_OPENING as exc:
        raise LakeConfigError(str(exc)) from exc
    except StorageError as exc:
        raise LakeHookError(str(exc)) from exc  # an outage or throttling: a retry may succeed
    except LakeError as exc:
        raise LakeConfigError(str(exc)) from exc


def check_options(options: Mapping[str, Any] | None, what: str) -> dict[str, str]:
    """An operator's ``options`` as strings, unknown ``hoodie.``/``lake.`` keys refused (no retry)."""
    from airflow_lake_provider.lake.config import check_options as check

    given = as_strings(options, what)
    with core_errors(what):
        check(given)
    return given


def as_strings(options: Mapping[str, Any] | None, what: str) -> dict[str, str]:
    """``options`` with string values (``None`` values left out); a name that is not a string is refused."""
    if options is not None and not isinstance(options, Mapping):
        kind = type(options).__name__
        raise LakeConfigError(f"{what}: options must map option names to values, not a {kind}")
    odd = [k for k in (options or {}) if not isinstance(k, str)]
    if odd:  # str() would make a name no option reads, and the value would be dropped without a word
        raise LakeConfigError(f"{what}: option names are strings: {odd[0]!r}")
    return {k: str(v) for k, v in (options or {}).items() if v is not None}


def as_bool(value: bool | str, name: str) -> bool:
    """A flag that may arrive as a rendered template string (``"True"``, ``"false"``), read as the
    options' booleans are (one parser: ``true``/``false`` in any case, anything else refused)."""
    if isinstance(value, bool):
        return value
    try:
        return boolean(name, str(value), ConfigError)
    except ConfigError as exc:
        raise LakeConfigError(str(exc)) from None


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
