"""Upcoming fire times as people read them (pure): each occurrence's wall time in its schedule's
zone, its UTC time and a DST mark. What ``perfectsched next`` prints and the dashboard shows."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from . import cron as cronlib

#: the mark of an occurrence DST moved
MARKS = {"shifted": "shifted (DST gap)", "repeated": "repeated (DST fold)"}


@dataclass(frozen=True)
class Fire:
    """One upcoming occurrence: ``local`` is ISO 8601 with the zone's offset, ``utc`` ends in Z."""

    time: int
    local: str
    utc: str
    shifted: bool
    repeated: bool

    @property
    def mark(self) -> str:
        """``shifted (DST gap)``, ``repeated (DST fold)``, or empty."""
        return MARKS["shifted"] if self.shifted else MARKS["repeated"] if self.repeated else ""


def utc_text(ts: int) -> str:
    """``ts`` as ISO 8601 UTC ending in Z (``2026-03-08T07:00:00Z``)."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).isoformat().replace("+00:00", "Z")


def fire(o: cronlib.Occurrence) -> Fire:
    return Fire(o.time, o.local.isoformat(), utc_text(o.time), o.shifted, o.repeated)


def fires_after(cron: str, after: float, n: int, timezone: str = "UTC", dst: str = "vixie") -> list[Fire]:
    """The next ``n`` occurrences of ``cron`` strictly after ``after``."""
    return [fire(o) for o in cronlib.occurrences(cron, after, n, timezone, dst)]


def fires_from(cron: str, first: int, n: int, timezone: str = "UTC", dst: str = "vixie") -> list[Fire]:
    """``n`` occurrences from a schedule's stored ``next_time`` (``first``, included) on."""
    return fires_after(cron, first - 1, n, timezone, dst)
