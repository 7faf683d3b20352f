"""Layout version 1 of the timeline (tables of version 6): where instant files live and their names.

Every instant file lies directly under ``.hoodie/``: ``<time>.<action>`` once completed, else
``<time>.<action>.requested`` / ``<time>.<action>.inflight`` (a COW commit's inflight file is
``<time>.inflight``). A later layout (Hudi 1.x: ``.hoodie/timeline/``, completion times in the
names) is another module of this shape.
"""

from __future__ import annotations

from airflow_lake_provider.lake.errors import InvalidInstantError
from airflow_lake_provider.lake.storage import HOODIE_DIR
from airflow_lake_provider.lake.timeline.instant import COMPLETES_AS, TIMELINE_TIME_RE, Action, Instant, State

VERSION = 1
TIMELINE_DIR = HOODIE_DIR


def file_name(instant: Instant) -> str:
    """The file name of ``instant`` under ``.hoodie/``."""
    t, a = instant.timestamp, instant.action.value
    if instant.state is State.COMPLETED:
        if instant.action in COMPLETES_AS:
            raise InvalidInstantError(
                f"{t}: a completed {a} is stored as {COMPLETES_AS[instant.action].value}"
            )
        return f"{t}.{a}"
    if instant.state is State.INFLIGHT:
        # A COW commit's inflight file carries no action word in layout 1.
        return f"{t}.inflight" if instant.action is Action.COMMIT else f"{t}.{a}.inflight"
    return f"{t}.{a}.requested"


def instant_path(instant: Instant) -> str:
    """The table-relative path of ``instant``'s file."""
    return f"{TIMELINE_DIR}/{file_name(instant)}"


def parse_file_name(name: str) -> Instant | None:
    """The instant a ``.hoodie/`` file name names; ``None`` for files that are not timeline instants."""
    parts = name.split(".")
    if len(parts) not in (2, 3) or not TIMELINE_TIME_RE.fullmatch(parts[0]):
        return None
    time, rest = parts[0], parts[1:]
    try:
        if rest == ["inflight"]:
            return Instant(time, State.INFLIGHT, Action.COMMIT)
        action = Action(rest[0])
        if action is Action.CLUSTERING:
            return None  # an action of layout 2 only
        if len(rest) == 1:
            if action in COMPLETES_AS:
                return None
            return Instant(time, State.COMPLETED, action)
        if rest[1] in ("requested", "inflight"):
            return Instant(time, State.REQUESTED if rest[1] == "requested" else State.INFLIGHT, action)
    except (ValueError, InvalidInstantError):
        return None
    return None
