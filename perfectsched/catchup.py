"""Which occurrences are due, under each catch-up policy (pure functions, no database).

An occurrence ``o`` of a schedule is due when its run time ``o + delay`` is at or before now.
After downtime several are due at once; the policy says which of them are submitted:

* ``all``    — every due occurrence, in order (PerfectSched's behaviour);
* ``latest`` — only the most recent due occurrence;
* ``skip``   — none of the *missed* ones: the most recent due occurrence is submitted only if it is
  on time (its run time at most ``grace`` seconds ago); otherwise nothing, and the schedule moves
  to its next future occurrence.

Each function returns ``(to_submit, next_nominal)``: the nominal times to submit now and the
nominal time the schedule advances to.
"""

from __future__ import annotations

from . import cron as cronlib

POLICIES = ("all", "latest", "skip")
#: at most this many occurrences are submitted per schedule per tick (the rest next tick)
MAX_PER_TICK = 1000
_WINDOWS = (3600, 86400, 32 * 86400, 400 * 86400, 5 * 366 * 86400)


def _next(spec: dict, t: int) -> int:
    return cronlib.next_time(spec["cron"], t, spec["timezone"], spec["dst"])


def latest_due(spec: dict, first: int, limit: float) -> int | None:
    """The latest occurrence ``o`` with ``first <= o <= limit`` (None if there is none).

    Looks back in growing windows so that a minutely schedule down for a year costs a
    handful of cron evaluations, not half a million.
    """
    if first > limit:
        return None
    for window in _WINDOWS + (limit - first + 1,):
        start = max(first, int(limit - window))
        o = cronlib.cron_time(spec["cron"], start, spec["timezone"], spec["dst"])
        if o <= limit:
            while True:
                n = _next(spec, o)
                if n > limit:
                    return o
                o = n
        if start == first:
            return None
    return None


def plan(
    spec: dict, next_nominal: int, now: float, *, grace: float = 60.0, limit: int = MAX_PER_TICK
) -> tuple[list[int], int]:
    """Occurrences to submit at ``now`` and the nominal time to advance to."""
    delay = spec["delay"]
    horizon = now - delay  # nominal times at or before this are due
    if next_nominal > horizon:
        return [], next_nominal
    policy = spec["catchup"]
    if policy == "all":
        out = [next_nominal]
        o = next_nominal
        while len(out) < limit:
            o = _next(spec, o)
            if o > horizon:
                return out, o
            out.append(o)
        return out, _next(spec, out[-1])
    last = latest_due(spec, next_nominal, horizon)
    assert last is not None
    after = _next(spec, last)
    if policy == "latest" or now - (last + delay) <= grace:
        return [last], after
    return [], after
