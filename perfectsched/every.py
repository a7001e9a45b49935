"""Pure interval arithmetic: ``@every:15m`` schedules (qless's recurring jobs), beside cron.

An interval schedule fires at every instant ``offset + k * interval`` (k an integer) of Unix time:
aligned to the epoch, plus the offset, whatever the timezone (``@every:1h`` fires on the hour in
UTC; ``@every:1h+30m`` at half past). The timezone of such a schedule only says how its times are
shown, and the DST policies do not apply: an interval counts real seconds, so a fall-back night
has no repeated occurrence and a spring-forward night no missing one.

Syntax: ``@every:<duration>[+<offset>]``, a duration being one or more ``<number><unit>`` (units
``s``, ``m``, ``h``, ``d``: ``90s``, ``15m``, ``1h30m``, ``1d``), whole seconds; the interval at
least a second and at most 366 days, the offset below the interval.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .errors import InvalidCronError

PREFIX = "@every:"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d{1,9})([smhd])")
MAX_INTERVAL = 366 * 86400
EXAMPLE = "for example @every:15m, @every:1h30m, @every:1d+2h (a 1-day interval at 02:00 UTC)"


@dataclass(frozen=True)
class Every:
    """Fires at ``offset + k * interval`` seconds of Unix time."""

    interval: int
    offset: int = 0

    def find(self, ts: float, inclusive: bool) -> int:
        """The first occurrence at (``inclusive``) or strictly after ``ts``."""
        steps = (ts - self.offset) / self.interval
        k = math.ceil(steps) if inclusive else math.floor(steps) + 1
        found = self.offset + k * self.interval
        while found < ts or (found == ts and not inclusive):  # a float's rounding, corrected
            found += self.interval
        while found - self.interval > ts or (found - self.interval == ts and inclusive):
            found -= self.interval
        return found


def is_every(text: str) -> bool:
    """Whether an expression is an interval (``@every:...``), not a cron expression."""
    return isinstance(text, str) and text.strip().lower().startswith(PREFIX)


def parse(text: str) -> Every:
    """The interval of ``@every:<duration>[+<offset>]``, or InvalidCronError saying why not."""
    body = text.strip().lower()[len(PREFIX) :]
    interval_text, plus, offset_text = body.partition("+")
    interval = _seconds(interval_text, text)
    offset = _seconds(offset_text, text) if plus else 0
    if not 1 <= interval <= MAX_INTERVAL:
        raise InvalidCronError(f"invalid interval {text!r}: from 1s to 366d; {EXAMPLE}")
    if offset >= interval:
        raise InvalidCronError(f"invalid interval {text!r}: its offset must be shorter than the interval")
    return Every(interval, offset)


def normalise(text: str) -> str:
    """The expression as stored: lower case, no blanks (``@every:15m+5m``)."""
    parse(text)
    return "".join(text.split()).lower()


def with_offset(text: str, offset: str) -> str:
    """``text`` (an interval) with ``offset`` added (``perfectsched add --offset``)."""
    if not is_every(text) or "+" in text:
        raise InvalidCronError(f"--offset needs an interval without one (@every:15m), not {text!r}")
    return normalise(f"{text}+{offset}")


def _seconds(part: str, whole: str) -> int:
    part = "".join(part.split())
    if not part or _PART.sub("", part):
        raise InvalidCronError(f"invalid interval {whole!r}: {EXAMPLE}")
    return sum(int(n) * _UNITS[unit] for n, unit in _PART.findall(part))
