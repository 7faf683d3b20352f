"""Airflow Assets for tables: every operator that changes a table emits an event on its table's Asset.

A table's Asset URI is its location: ``s3://bucket/prefix`` as given, a local folder as
``file:///absolute/path`` (both schemes Airflow accepts). Schedule a downstream DAG on a table with
``schedule=[table_asset("s3://bucket/lake/trips")]``. Operators add the Asset of a literal absolute
``table_path`` to their ``outlets`` themselves; for a templated path, or one relative to the lake
connection's ``base_path``, pass ``outlets=[table_asset(...)]`` (the URI cannot be known at DAG parse
time). Each event's ``extra`` holds ``{"table", "instant", "outcome"}`` and a few service details.
A run that left the table as it was (``NO_WORK``, a dry run) emits no event.

Light to import: no table-core code.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset

if TYPE_CHECKING:
    from airflow.sdk import Context


def table_asset_uri(table_path: str) -> str | None:
    """The Asset URI of a table location, or ``None`` when it is not known yet (templated, relative).

    :param table_path: an absolute local path, a ``file:`` URI or an ``s3://bucket/prefix`` URI.
    """
    path = str(table_path or "").strip()
    if not path or "{{" in path or "{%" in path:
        return None
    if path.startswith("file:"):
        path = "/" + path[len("file:") :].lstrip("/")
    if "://" in path:
        scheme, _, rest = path.partition("://")
        return f"{scheme.lower()}://{_escape(rest.rstrip('/'))}" if rest.strip("/") else None
    if not path.startswith("/"):
        return None  # relative to the lake connection's base_path: resolved only when the task runs
    return "file://" + _escape(os.path.normpath(path))


def _escape(path: str) -> str:
    """Percent-encode what a URI would cut off: Airflow's Asset drops a ``#fragment``, so a table at
    ``/data/a#b`` would get ``/data/a``'s Asset (``%`` first, so encoded paths stay distinct)."""
    return path.replace("%", "%25").replace("#", "%23").replace("?", "%3F")


def table_asset(table_path: str) -> Asset:
    """The Asset of a table, for a DAG's ``schedule`` or an operator's ``outlets``.

    :param table_path: an absolute local path, a ``file:`` URI or an ``s3://bucket/prefix`` URI.
    """
    uri = table_asset_uri(table_path)
    if uri is None:
        raise ValueError(
            f"table_asset({table_path!r}): name the table by an absolute path or an s3:// URI "
            "(templated and relative paths are only known when a task runs)"
        )
    return Asset(uri=uri)


def with_table_outlet(table_path: str, outlets: Any) -> list[Any]:
    """``outlets`` plus the table's Asset when ``table_path`` is a literal absolute path or URI."""
    given = [] if outlets is None else list(outlets) if isinstance(outlets, (list, tuple)) else [outlets]
    uri = table_asset_uri(table_path)
    if uri is not None and not any(isinstance(o, Asset) and o.uri == uri for o in given):
        given.append(Asset(uri=uri))
    return given


def emit_table_event(
    task: Any,
    context: Context,
    table_uris: Iterable[str],
    extra: Mapping[str, Any],
    *,
    changed: bool,
) -> list[str]:
    """Attach ``extra`` to the events of ``task``'s outlets that name the table; the Asset URIs set.

    When the run did not change the table (``changed`` false: ``NO_WORK``, a dry run, a plan
    written but not executed), those outlets are dropped from the running task instead, so Airflow
    records no event on the table and DAGs scheduled on it do not run for nothing. Airflow registers
    an event for each outlet the task holds when it succeeds; the running task is Airflow's copy made
    for this try, so the DAG's own task keeps its outlets.

    ``table_uris``: the table's location as the task saw it (the rendered ``table_path`` resolved
    through the connection, and the core's own URI), any of which an outlet may name.
    """
    wanted = {u for u in (table_asset_uri(t) for t in table_uris) if u is not None}
    outlets = list(task.outlets or ())
    mine = [o for o in outlets if isinstance(o, Asset) and o.uri in wanted]
    if not mine:
        return []
    if not changed:
        task.outlets = [o for o in outlets if not (isinstance(o, Asset) and o.uri in wanted)]
        task.log.info(
            "no Asset event for %s: the table did not change (outcome %s)",
            ", ".join(sorted({m.uri for m in mine})),
            extra.get("outcome"),
        )
        return []
    events = context.get("outlet_events") if hasattr(context, "get") else None
    if events is None:
        return []
    for outlet in mine:
        events[outlet].extra.update(dict(extra))
    return [m.uri for m in mine]
