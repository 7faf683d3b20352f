"""Instants of the Hudi timeline: times, actions and states (their file names: ``layout``)."""

from __future__ import annotations

import datetime as dt
import re
import threading
from dataclasses import dataclass, field
from enum import Enum

from airflow_lake_provider.lake.errors import InvalidInstantError

INSTANT_FORMAT = "%Y%m%d%H%M%S"
# ASCII digits only, whole string (``$`` would also accept a trailing newline, ``\d`` other scripts' digits).
INSTANT_TIME_RE = re.compile(r"[0-9]{14}(?:[0-9]{3})?")
# What a timeline file may be named with: an instant time, or, on the metadata table of a version 6
# table, one followed by up to two of Hudi's 3-digit operation suffixes (``OperationSuffix``: MDT
# compaction ``001``, clean ``002``, rollback ``006``, partition initialisation ``010``...; an
# initialisation then compacted carries both), so 20 or 23 digits after a 17-digit data instant.
TIMELINE_TIME_RE = re.compile(r"[0-9]{14}(?:[0-9]{3}){0,3}")
# Hudi's SOLO_COMMIT_TIMESTAMP: a v6 metadata table initialised while the data table had no
# completed instant is initialised at it plus the partition-initialisation suffix ``010``
# (``00000000000000010``), no date; Hudi 1.x's ``00000000000000000`` MDT times stay unparsed.
SOLO_TIME = "00000000000000"
SOLO_INIT_SUFFIX = "010"
_FIELDS = ((0, 4), (4, 6), (6, 8), (8, 10), (10, 12), (12, 14))  # yyyy MM dd HH mm ss


class Action(str, Enum):
    """Timeline actions of table versions 6, 8 and 9 (``clustering``: layout 2 only)."""

    COMMIT = "commit"
    DELTACOMMIT = "deltacommit"
    REPLACECOMMIT = "replacecommit"
    COMPACTION = "compaction"
    LOGCOMPACTION = "logcompaction"
    CLEAN = "clean"
    ROLLBACK = "rollback"
    SAVEPOINT = "savepoint"
    RESTORE = "restore"
    INDEXING = "indexing"
    CLUSTERING = "clustering"


class State(int, Enum):
    """Instant states, ordered as Hudi orders files of one instant time."""

    REQUESTED = 0
    INFLIGHT = 1
    COMPLETED = 2


# Completed writes whose data files readers treat as visible.
COMMIT_ACTIONS = frozenset({Action.COMMIT, Action.DELTACOMMIT, Action.REPLACECOMMIT})
# Pending table services whose completed form is another action.
# Actions whose completed instant is stored as another action (a compaction completes as a commit).
COMPLETES_AS = {
    Action.COMPACTION: Action.COMMIT,
    Action.LOGCOMPACTION: Action.DELTACOMMIT,
    Action.CLUSTERING: Action.REPLACECOMMIT,  # layout 2: a clustering completes as a replacecommit
}


def validate_instant_time(value: str) -> str:
    """Return ``value`` if it is a valid 17 (or 14) digit UTC instant time, else raise."""
    if not isinstance(value, str) or not INSTANT_TIME_RE.fullmatch(value):
        raise InvalidInstantError(f"instant time {value!r} is not 14 or 17 digits (yyyyMMddHHmmss[SSS])")
    try:
        # The datetime constructor checks what strptime(INSTANT_FORMAT) checks, ~20x faster: every
        # timeline load validates each of its file names.
        dt.datetime(*(int(value[a:b]) for a, b in _FIELDS))
    except ValueError as exc:
        raise InvalidInstantError(f"instant time {value!r} is not a valid date: {exc}") from None
    return value


def validate_timeline_time(value: str) -> str:
    """Return ``value`` if it names a timeline instant: an instant time (:func:`validate_instant_time`)
    or one with a v6 metadata table's operation suffixes (``TIMELINE_TIME_RE``), else raise."""
    if isinstance(value, str) and len(value) > 14 and TIMELINE_TIME_RE.fullmatch(value):
        if value[:14] == SOLO_TIME and value[14:17] >= SOLO_INIT_SUFFIX:
            return value  # a v6 metadata table initialised on an empty table (suffixed after it too)
        if len(value) > 17:
            validate_instant_time(value[:17])
            return value
    return validate_instant_time(value)


def instant_to_datetime(value: str) -> dt.datetime:
    """Parse an instant time as an aware UTC datetime."""
    validate_timeline_time(value)
    parsed = dt.datetime.strptime(value[:14], INSTANT_FORMAT).replace(tzinfo=dt.timezone.utc)
    millis = int(value[14:17] or 0)
    return parsed + dt.timedelta(milliseconds=millis)


def format_instant(moment: dt.datetime) -> str:
    """Format an aware datetime as a 17 digit UTC instant time."""
    moment = moment.astimezone(dt.timezone.utc)
    return moment.strftime(INSTANT_FORMAT) + f"{moment.microsecond // 1000:03d}"


class InstantClock:
    """Hands out instant times that are strictly increasing and unique, even within one millisecond.

    Hudi needs every new instant to be later than every instant already on the timeline, so callers
    pass the latest existing time as ``after``.
    """

    def __init__(self, now: object = None) -> None:
        self._now = now or (lambda: dt.datetime.now(dt.timezone.utc))
        self._last: str | None = None
        self._lock = threading.Lock()

    def now(self) -> dt.datetime:
        """The clock's current time, aware UTC (what ``next`` would start from)."""
        return self._now().astimezone(dt.timezone.utc)  # type: ignore[operator]

    def next(self, after: str | None = None) -> str:
        """Return a new instant time later than ``after`` and than any time handed out before."""
        with self._lock:
            candidate = format_instant(self._now())  # type: ignore[operator]
            floor = max(filter(None, (after, self._last)), default=None)
            if floor is not None and candidate <= floor:
                floor17 = (floor + "000")[:17]  # 14 digits, 17, or a suffixed MDT time
                candidate = format_instant(instant_to_datetime(floor17) + dt.timedelta(milliseconds=1))
            self._last = candidate
            return candidate


DEFAULT_CLOCK = InstantClock()


@dataclass(frozen=True, order=True)
class Instant:
    """One instant: time, state and action. Orders by time, then state, like Hudi's timeline.

    ``completion_time``: when a completed instant of timeline layout 2 (table versions 8 and 9)
    completed, from its file name; ``None`` otherwise. It takes no part in equality or order: an
    instant is named by its (requested) time, as in Hudi.
    """

    timestamp: str
    state: State
    action: Action
    completion_time: str | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        validate_timeline_time(self.timestamp)
        if self.completion_time is not None:
            validate_instant_time(self.completion_time)

    @property
    def is_completed(self) -> bool:
        return self.state is State.COMPLETED

    @property
    def is_requested(self) -> bool:
        return self.state is State.REQUESTED

    @property
    def is_inflight(self) -> bool:
        return self.state is State.INFLIGHT

    def with_state(self, state: State) -> Instant:
        """The same instant in another state (a completed compaction becomes a commit)."""
        action = COMPLETES_AS.get(self.action, self.action) if state is State.COMPLETED else self.action
        return Instant(self.timestamp, state, action)

    def __str__(self) -> str:
        return f"{self.timestamp}__{self.action.value}__{self.state.name}"
