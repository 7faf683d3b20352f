"""Layout version 2 of the timeline (Hudi 1.x, table versions 8 and 9): instant file names.

Instant files live under ``.hoodie/<hoodie.timeline.path>/`` (``timeline`` by default). Requested
and inflight files are named as in layout 1 (a COW commit's inflight file is ``<time>.inflight``);
a completed instant carries its completion time too: ``<requested>_<completion>.<action>``. A
``clustering`` completes as a ``replacecommit``, a compaction as a ``commit``. The archived timeline
(an LSM tree of parquet files) lies under ``<timeline>/<hoodie.timeline.history.path>/``.
"""

from __future__ import annotations

from functools import lru_cache

from airflow_lake_provider.lake.errors import InvalidInstantError
from airflow_lake_provider.lake.timeline.instant import (
    COMPLETES_AS,
    INSTANT_TIME_RE,
    Action,
    Instant,
    State,
    validate_instant_time,
)

VERSION = 2
# Every timeline read parses every file name of the folder (a maintained write reads two timelines a
# few times each): a name always names the same (immutable) instant, so each is parsed once.
_PARSED_NAMES = 16_384
_ACTIONS = frozenset(a.value for a in Action)


def file_name(instant: Instant) -> str:
    """The file name of ``instant`` in the timeline folder."""
    t, a = instant.timestamp, instant.action.value
    if instant.state is State.COMPLETED:
        if instant.action in COMPLETES_AS:
            raise InvalidInstantError(
                f"{t}: a completed {a} is stored as {COMPLETES_AS[instant.action].value}"
            )
        if instant.completion_time is None:
            raise InvalidInstantError(f"{t}: a completed {a} of timeline layout 2 needs its completion time")
        return f"{t}_{instant.completion_time}.{a}"
    if instant.state is State.INFLIGHT:
        return f"{t}.inflight" if instant.action is Action.COMMIT else f"{t}.{a}.inflight"
    return f"{t}.{a}.requested"


@lru_cache(maxsize=_PARSED_NAMES)
def parse_file_name(name: str) -> Instant | None:
    """The instant a timeline file name names; ``None`` for files that are not instants.

    ``InvalidInstantError`` for a completed instant's name (``<time>_<completion>.<action>``) whose
    completion time is not one, or is before the instant's own time: ignored, the instant would look
    pending and a read would leave out its rows (Hudi fails on such a name too)."""
    parts = name.split(".")
    if len(parts) not in (2, 3):
        return None
    time, completed, completion = parts[0].partition("_")
    if not INSTANT_TIME_RE.fullmatch(time):
        return None
    rest = parts[1:]
    if completed and len(rest) == 1 and rest[0] in _ACTIONS:
        try:
            validate_instant_time(completion)
        except InvalidInstantError as exc:
            raise InvalidInstantError(f"a completed instant file with a bad completion time: {exc}") from None
        if completion.ljust(17, "0") < time.ljust(17, "0"):  # (14-digit times are whole seconds)
            # A writer takes the completion time after the requested one: slicing by it would put
            # the instant's logs in a slice older than the write.
            raise InvalidInstantError(
                f"a completed instant file with a bad completion time: {completion} is before the "
                f"instant's own time {time}"
            )
    try:
        if completed:  # only a completed instant carries a completion time
            if len(rest) != 1 or not INSTANT_TIME_RE.fullmatch(completion):
                return None
            action = Action(rest[0])
            if action in COMPLETES_AS:
                return None
            return Instant(time, State.COMPLETED, action, completion)
        if rest == ["inflight"]:
            return Instant(time, State.INFLIGHT, Action.COMMIT)
        if len(rest) == 2 and rest[1] in ("requested", "inflight"):
            state = State.REQUESTED if rest[1] == "requested" else State.INFLIGHT
            return Instant(time, state, Action(rest[0]))
    except (ValueError, InvalidInstantError):
        return None
    return None
