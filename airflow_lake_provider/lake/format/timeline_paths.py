"""Where a table's timeline lives, from ``hoodie.properties`` (a module of its own: light enough for
the compaction trigger, which must not load pyarrow through ``table_config``)."""

from __future__ import annotations

from collections.abc import Mapping

from airflow_lake_provider.lake.errors import TableConfigError, UnsupportedTableVersionError


def timeline_location(props: Mapping[str, str], source: str = "hoodie.properties") -> tuple[int, str, str]:
    """(timeline layout version, timeline folder, history folder): the folders are names below
    ``.hoodie/`` (layout 2: ``hoodie.timeline.path``, ``hoodie.timeline.history.path`` inside it);
    layout 1 (and a folder without ``hoodie.properties``) keeps its instants in ``.hoodie/`` itself."""
    version = (props.get("hoodie.timeline.layout.version") or "1").strip()
    if version == "1":
        return 1, "", ""
    if version != "2":
        raise UnsupportedTableVersionError(
            f"{source}: hoodie.timeline.layout.version={version} is not 1 or 2"
        )
    return (
        2,
        _folder_name(props, "hoodie.timeline.path", "timeline", source),
        _folder_name(props, "hoodie.timeline.history.path", "history", source),
    )


def _folder_name(props: Mapping[str, str], key: str, default: str, source: str) -> str:
    """One folder name (never a path that climbs out of ``.hoodie/``)."""
    value = (props.get(key) or default).strip()
    if not value or "/" in value or "\\" in value or value in (".", ".."):
        raise TableConfigError(f"{source}: {key}={value!r} is not a folder name")
    return value
