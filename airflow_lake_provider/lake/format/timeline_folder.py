"""Where a table's active timeline lives, from its ``hoodie.properties``.

LOCAL stopgap for the metadata table reader (``table/metadata_files.py``) until the shared timeline
code reads layout 2: to be replaced by it (one definition of the timeline's folder).
"""

from __future__ import annotations

from collections.abc import Mapping

LAYOUT_KEY = "hoodie.timeline.layout.version"
TIMELINE_PATH_KEY = "hoodie.timeline.path"


def timeline_layout(props: Mapping[str, str]) -> int:
    """The timeline layout version (1 when the key is absent or not a number)."""
    value = (props.get(LAYOUT_KEY) or "1").strip()
    return int(value) if value.isdigit() else 1


def timeline_folder(props: Mapping[str, str], hoodie: str) -> str:
    """The folder (below the table root) holding the active timeline: layout 2 keeps it in
    ``<hoodie>/<hoodie.timeline.path>`` (default ``timeline``), layout 1 in ``<hoodie>`` itself."""
    if timeline_layout(props) < 2:
        return hoodie
    return f"{hoodie}/{(props.get(TIMELINE_PATH_KEY) or 'timeline').strip()}"
