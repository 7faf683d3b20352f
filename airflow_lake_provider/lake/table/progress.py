"""Progress lines of long work (a big write): logged at INFO, at most every few seconds.

Visible with ``lake -v`` and in Airflow task logs (both show the core's INFO log records).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

# Seconds between two progress lines: a multi-second write shows a few, a short one only its end.
INTERVAL_SECONDS = 2.0


class Progress:
    """Counts the units (file groups) of one piece of work and logs how far it got.

    One line when it starts, then after a unit when ``interval`` seconds passed since the last line,
    and one after the last unit: units done of all, files written, rows, seconds elapsed.
    """

    def __init__(
        self,
        what: str,
        units: int,
        rows: int,
        *,
        interval: float = INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        logger: logging.Logger = log,
    ) -> None:
        self.what, self.units, self.interval, self.clock, self.log = what, units, interval, clock, logger
        self.done = self.files = self.rows = 0
        self.started = self.last = clock()
        logger.info("%s: %d rows in %d file groups", what, rows, units)

    def step(self, files: int, rows: int) -> None:
        """One unit finished, having written ``files`` files holding ``rows`` rows."""
        self.done += 1
        self.files += files
        self.rows += rows
        now = self.clock()
        if self.done == self.units or now - self.last >= self.interval:
            self.last = now
            self.log.info(
                "%s: %d/%d file groups, %d files, %d rows, %.1f s",
                self.what,
                self.done,
                self.units,
                self.files,
                self.rows,
                now - self.started,
            )
