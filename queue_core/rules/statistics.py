"""Statistics of tasks per time bucket (pure): what the roll-up adds to ``<table>_stats`` for a
batch of events, and what a read of buckets says.

A bucket counts, for one queue and task type and one span of time (a minute, an hour, or all
time), the tasks started, succeeded, failed, cancelled and retried, and two distributions: the
wait (due -> start) and the run (start -> end, from ``finished``, ``retried`` and ``gave_up``
events). An attempt is counted started, with its wait, in the bucket of its start, from the one
event that tells it (``attempt_events.starts_attempt``): a tracked task's ``claimed`` row, else the
event that ended the attempt and carries its claim. A distribution is a count per fixed bucket
of seconds (:data:`BOUNDS`) and a sum, so that buckets add up exactly (a minute's into an hour's,
many into a read's) and percentiles are interpolated inside the bucket they fall in.

The roll-up (``store/stats.py``) reads the events in id order, grouped in the database by what
the rules read of them (:class:`EventGroup`: queue, type, kind, outcome, the minutes of the event
and of its attempt's start, the buckets of its wait and run), so that a batch of thousands of
events crosses the wire as a few dozen groups; :func:`group_of` is the reference of that grouping,
:func:`tally_groups` the one place the rules are applied. The ids it passes over
(:func:`passed_over`) may still commit, and are looked for again until ``event_gap_timeout``.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .attempt_events import started_at, starts_attempt

#: upper bounds (seconds) of the distributions' buckets; a last bucket holds what is above
BOUNDS: tuple[float, ...] = (
    *(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
    *(1.0, 2.5, 5.0, 10.0, 25.0, 60.0, 150.0, 300.0, 600.0),
    *(1800.0, 3600.0, 10800.0, 43200.0, 86400.0),
)
MINUTE, HOUR, ALL_TIME = 60, 3600, 0
#: the spans every event is added to (ALL_TIME: one bucket per queue and type, never pruned)
SPANS = (MINUTE, HOUR, ALL_TIME)
#: the counters of a bucket, in the order the table and the CLI show them
COUNTS = ("started", "succeeded", "failed", "cancelled", "retried")
#: how long minute buckets are kept (older reads are answered from hour buckets)
MINUTE_KEEP = 2 * 86400.0
#: the largest count a bucket holds (a count beyond it was edited by hand: the row is refused)
MAX_COUNT = 2**62
_ENDED = frozenset({"finished", "gave_up", "force_finished", "cancelled", "set_aside"})
_BY_OUTCOME = {"success": "succeeded", "failure": "failed", "cancelled": "cancelled"}
_RAN = frozenset({"finished", "retried", "gave_up"})


#: the most seconds a distribution adds for one value (a larger one, written by hand, counts as
#: this): sums of thousands stay finite, on every database
MAX_SECONDS = 1e300


def seconds_counted(seconds: float) -> float:
    """The seconds a distribution adds for ``seconds``: 0 for a negative value or NaN, at most
    :data:`MAX_SECONDS`. The roll-up asks the database the same (``store/stats.py``)."""
    return min(max(0.0, float(seconds)), MAX_SECONDS)


def bucket_of(seconds: float) -> int:
    """The bucket of :data:`BOUNDS` that ``seconds`` falls in: the first whose upper bound is at
    or above it (a negative value counts as 0; the last bucket holds what is above every bound).
    The roll-up asks the database the same (``store/stats.py``: ``bucket_in_sql``)."""
    return bisect.bisect_left(BOUNDS, max(0.0, float(seconds)))


class StatsRowError(ValueError):
    """A distribution column that pq never writes (edited by hand)."""


@dataclass
class Distribution:
    """Seconds counted per bucket of :data:`BOUNDS`, with their sum."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(BOUNDS) + 1))
    total: float = 0.0
    #: the values themselves, when known to be exactly those counted (:func:`exactly`)
    values: tuple[float, ...] | None = field(default=None, compare=False)

    @property
    def count(self) -> int:
        return sum(self.counts)

    def add(self, seconds: float) -> None:
        self.add_many(bucket_of(seconds), 1, seconds_counted(seconds))

    def add_many(self, bucket: int, count: int, total: float) -> None:
        """Add ``count`` values of the bucket ``bucket`` (:func:`bucket_of`) summing to ``total``."""
        self.counts[bucket] += count
        self.total += total
        self.values = None

    def merge(self, other: Distribution) -> None:
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total += other.total
        self.values = None

    @property
    def mean(self) -> float | None:
        n = self.count
        return self.total / n if n else None

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile: by nearest rank of the values when they are known (:func:`exactly`),
        else interpolated linearly inside its bucket (the last, unbounded bucket answers its lower
        bound), kept within what was added (:meth:`_within`); None when empty. A single value is
        answered exactly (it is the sum)."""
        n = self.count
        if not n:
            return None
        if self.values is not None:
            return nearest_rank(self.values, q)
        if n == 1:
            return self.total
        rank, seen = q * n, 0
        for i, c in enumerate(self.counts):
            if c and seen + c >= rank:
                low = BOUNDS[i - 1] if i else 0.0
                value = low if i == len(BOUNDS) else low + (BOUNDS[i] - low) * max(0.0, rank - seen) / c
                return self._within(i, value)
            seen += c
        return self._within(len(self.counts) - 1, BOUNDS[-1])

    def _within(self, i: int, value: float) -> float:
        """``value``, of bucket ``i``, kept between the smallest and the largest value added, as
        far as the counts and the sum tell them: in the highest bucket at most the larger of its
        lower bound and the least its values' mean can be (both at most the largest value); in
        the lowest at least the smaller of its upper bound and the most its values' mean can be
        (both at least the smallest). One bucket alone: its values' mean."""
        used = [j for j, c in enumerate(self.counts) if c]
        bound = [*BOUNDS, math.inf]
        if i == used[-1]:
            below = sum(self.counts[j] * bound[j] for j in used[:-1])
            least_mean = (self.total - below) / self.counts[i]
            value = min(value, max(least_mean, BOUNDS[i - 1] if i else 0.0))
        if i == used[0]:
            above = sum(self.counts[j] * (BOUNDS[j - 1] if j else 0.0) for j in used[1:])
            most_mean = (self.total - above) / self.counts[i]
            value = max(value, min(most_mean, bound[i]))
        return value

    def summary(self) -> dict:
        return {
            "count": self.count,
            "mean": self.mean,
            "p50": self.quantile(0.5),
            "p95": self.quantile(0.95),
            "p99": self.quantile(0.99),
        }

    def to_json(self) -> str:
        return json.dumps(self.counts, separators=(",", ":"))

    @classmethod
    def from_columns(cls, counts_json: str, total: float) -> Distribution:
        """The distribution a row holds; StatsRowError for one pq never writes."""
        try:
            counts = json.loads(counts_json)
        except (TypeError, ValueError):
            counts = None
        ok = isinstance(counts, list) and len(counts) == len(BOUNDS) + 1
        if not ok or not all(type(c) is int and c >= 0 for c in counts):
            raise StatsRowError(f"a distribution of {len(BOUNDS) + 1} counts, not {str(counts_json)[:80]!r}")
        if not isinstance(total, int | float) or not math.isfinite(total) or total < 0:
            raise StatsRowError(f"a sum of seconds, not {total!r}")
        return cls(list(counts), float(total))


#: the largest sample (of one queue and type, in a read) whose percentiles are answered from
#: the values themselves, read from the events (``queue_stats.QueueStatistics.statistics``)
EXACT_MOST = 1000


def nearest_rank(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile of ``values`` by nearest rank: the smallest value with at least
    ``q·n`` of the ``n`` values at or below it (the smallest for q = 0, the largest for q = 1);
    None when there is none. (A rounding of ``q·n`` in floats never adds a rank.)"""
    if not values:
        return None
    ordered = sorted(values)
    rank = math.ceil(q * len(ordered) - 1e-9)
    return ordered[min(max(rank, 1), len(ordered)) - 1]


def exactly(dist: Distribution, values: Sequence[float]) -> Distribution:
    """``dist`` with its values, if ``values`` (seconds as the events hold them) are exactly the
    ones it counts: as many in each of its buckets, at most :data:`EXACT_MOST` in all. Else
    ``dist`` (an event deleted, or a value not counted: its percentiles from its buckets)."""
    if not 0 < len(values) <= EXACT_MOST:
        return dist
    counted = [seconds_counted(v) for v in values]
    found = Distribution()
    for v in counted:
        found.counts[bucket_of(v)] += 1
    if found.counts != dist.counts:
        return dist
    return Distribution(list(dist.counts), dist.total, tuple(sorted(counted)))


#: the values of a read's events per (queue, type): their waits and their runs
Samples = dict[tuple[str, str], tuple[list[float], list[float]]]


def samples_of(events: Iterable[Mapping], span: int, since: float, until: float) -> Samples:
    """The waits and runs that ``events`` (rows of ``<table>_events``: queue, type, kind, at,
    waited, ran) add to the buckets of ``span`` that overlap [since, until), per queue and type:
    a wait in the bucket of its attempt's start, a run in that of its event (as
    :func:`tally_groups` counts them)."""

    def within(at: float) -> bool:
        start = bucket_start(span, bucket_start(MINUTE, at))
        return since - span < start < until

    out: Samples = {}
    for e in events:
        waits, runs = out.setdefault((e["queue"], e["type"]), ([], []))
        if starts_attempt(e) and e["waited"] is not None and within(started_at(e)):
            waits.append(e["waited"])
        if e["kind"] in _RAN and e["ran"] is not None and within(e["at"]):
            runs.append(e["ran"])
    return out


@dataclass
class Tally:
    """What one bucket counts."""

    started: int = 0
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    retried: int = 0
    wait: Distribution = field(default_factory=Distribution)
    run: Distribution = field(default_factory=Distribution)

    def merge(self, other: Tally) -> None:
        for name in COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.wait.merge(other.wait)
        self.run.merge(other.run)

    def to_dict(self) -> dict:
        return {**{n: getattr(self, n) for n in COUNTS}, "wait": self.wait.summary(), "run": self.run.summary()}


#: a bucket's identity: (span, start, queue, type)
BucketKey = tuple[int, float, str, str]


def bucket_start(span: int, at: float) -> float:
    """The start of the bucket of ``span`` seconds that ``at`` falls in (0 for ALL_TIME; a time
    that is no number, written by hand, is its own bucket)."""
    if span == ALL_TIME:
        return 0.0
    return math.floor(at / span) * float(span) if math.isfinite(at) else at


#: a range of event ids, both ends included
IdRange = tuple[int, int]


def passed_over(after: int, ids: Sequence[int]) -> list[IdRange]:
    """The ranges of ids a read of the events after ``after`` that found ``ids`` (ascending)
    skipped (one range for a run of any length: a million ids purged make one)."""
    out: list[IdRange] = []
    last = after
    for i in ids:
        if i > last + 1:
            out.append((last + 1, i - 1))
        last = i
    return out


def without(ranges: Iterable[IdRange], found: Iterable[int]) -> list[IdRange]:
    """``ranges`` less the ids ``found`` (a range split around each)."""
    hits = sorted(set(found))
    out: list[IdRange] = []
    for first, last in ranges:
        start = first
        for i in hits[bisect.bisect_left(hits, first) : bisect.bisect_right(hits, last)]:
            if i > start:
                out.append((start, i - 1))
            start = i + 1
        if start <= last:
            out.append((start, last))
    return out


def _end_counts(event: Mapping) -> tuple[str | None, bool]:
    """What ``event`` counts in the bucket of its time: the counter it adds one to (``retried``,
    or the outcome of an end, or None), and whether it adds the seconds its attempt ran."""
    kind = event["kind"]
    name = "retried" if kind == "retried" else _BY_OUTCOME.get(event["outcome"]) if kind in _ENDED else None
    return name, kind in _RAN and event["ran"] is not None


def counts_at_end(event: Mapping) -> bool:
    """Whether ``event`` counts for anything in the bucket of its time: a retry, an end with an
    outcome that is counted, or a run time."""
    return _end_counts(event) != (None, False)


@dataclass(frozen=True)
class EventGroup:
    """Events alike for every rule of the tally, counted together: the roll-up reads the events
    grouped so in the database (``store/stats.py``), never one by one. ``minute`` and
    ``start_minute``: the starts of the minutes of their time and of their attempt's start
    (``attempt_events.started_at``); ``wait_bucket`` and ``run_bucket``: the buckets
    (:func:`bucket_of`) of their wait and run (None: they carry none); the sums are of the
    seconds as a distribution adds them (a negative value as 0)."""

    queue: str
    type: str
    kind: str
    outcome: str | None
    minute: float
    start_minute: float
    wait_bucket: int | None
    run_bucket: int | None
    count: int = 1
    wait_sum: float = 0.0
    run_sum: float = 0.0

    def rule_event(self) -> dict:
        """What the rules read of an event, for the events of this group (a wait or run of 0
        stands for one they carry: the rules read only whether it is there)."""
        return {
            "kind": self.kind,
            "outcome": self.outcome,
            "waited": None if self.wait_bucket is None else 0.0,
            "ran": None if self.run_bucket is None else 0.0,
        }


def group_of(event: Mapping) -> EventGroup:
    """The group of one event row (the reference of what the roll-up's grouping in the
    database computes)."""
    waited, ran = event["waited"], event["ran"]
    return EventGroup(
        queue=event["queue"],
        type=event["type"],
        kind=event["kind"],
        outcome=event["outcome"],
        minute=bucket_start(MINUTE, event["at"]),
        start_minute=bucket_start(MINUTE, started_at(event)),
        wait_bucket=None if waited is None else bucket_of(waited),
        run_bucket=None if ran is None else bucket_of(ran),
        wait_sum=0.0 if waited is None else seconds_counted(waited),
        run_sum=0.0 if ran is None else seconds_counted(ran),
    )


def tally_events(events: Iterable[Mapping]) -> dict[BucketKey, Tally]:
    """What ``events`` (rows of ``<table>_events``) add to each bucket of every span."""
    return tally_groups(group_of(e) for e in events)


def tally_groups(groups: Iterable[EventGroup]) -> dict[BucketKey, Tally]:
    """What the events of ``groups`` add to each bucket of every span: an end, a retry and a run
    time to the minute of the events' time, an attempt's start and its wait to the minute it
    started (from the one event that tells it: ``attempt_events.starts_attempt``); the minutes
    then merged into their hours and into all time."""
    minutes: dict[BucketKey, Tally] = {}
    for g in groups:
        event = g.rule_event()
        name, ran = _end_counts(event)
        if name is not None or ran:
            tally = _minute(minutes, g, g.minute)
            if name is not None:
                setattr(tally, name, getattr(tally, name) + g.count)
            if ran and g.run_bucket is not None:
                tally.run.add_many(g.run_bucket, g.count, g.run_sum)
        if starts_attempt(event) and g.wait_bucket is not None:
            tally = _minute(minutes, g, g.start_minute)
            tally.started += g.count
            tally.wait.add_many(g.wait_bucket, g.count, g.wait_sum)
    out = dict(minutes)
    for (_, start, queue, type_), tally in minutes.items():
        for span in SPANS[1:]:
            key = (span, bucket_start(span, start), queue, type_)
            if key not in out:
                out[key] = Tally()
            out[key].merge(tally)
    return out


def _minute(minutes: dict[BucketKey, Tally], group: EventGroup, start: float) -> Tally:
    """The tally of the minute starting at ``start`` for ``group``'s queue and type (made when missing)."""
    key = (MINUTE, start, group.queue, group.type)
    tally = minutes.get(key)
    if tally is None:
        tally = minutes[key] = Tally()
    return tally


def id_runs(ids: Sequence[int]) -> list[IdRange]:
    """The ranges of consecutive ids in ``ids`` (ascending): what a read that found them covers."""
    out: list[IdRange] = []
    for i in ids:
        if out and out[-1][1] == i - 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def read_span(since: float, now: float) -> int:
    """The span a read from ``since`` is answered from: minutes while they are kept, else hours."""
    return MINUTE if now - since <= MINUTE_KEEP - MINUTE else HOUR  # (the bucket of ``since`` still kept)


@dataclass(frozen=True)
class Bucket:
    """One bucket of a read: its queue and type, its span and start, what it counts."""

    queue: str
    type: str
    span: int
    start: float
    tally: Tally

    def to_dict(self) -> dict:
        return {"queue": self.queue, "type": self.type, "span": self.span, "start": self.start, **self.tally.to_dict()}


@dataclass(frozen=True)
class Statistics:
    """A read of statistics: its buckets (oldest first) and their sums per queue and type."""

    since: float
    until: float
    span: int
    buckets: tuple[Bucket, ...]
    #: the values of the read's events, where they were read (:func:`samples_of`)
    samples: Samples = field(default_factory=dict, compare=False)

    def totals(self) -> dict[tuple[str, str], Tally]:
        """The buckets summed per (queue, type), in that order; a distribution with its values
        where :attr:`samples` holds exactly those it counts (:func:`exactly`)."""
        out: dict[tuple[str, str], Tally] = {}
        for b in self.buckets:
            out.setdefault((b.queue, b.type), Tally()).merge(b.tally)
        for key, tally in out.items():
            waits, runs = self.samples.get(key, ([], []))
            tally.wait, tally.run = exactly(tally.wait, waits), exactly(tally.run, runs)
        return dict(sorted(out.items()))

    def small_samples(self) -> bool:
        """Whether a total of the read has a distribution of at most :data:`EXACT_MOST` values
        (more than one: one is exact already), whose values are worth reading."""
        sizes = [d.count for t in self.totals().values() for d in (t.wait, t.run)]
        return any(1 < n <= EXACT_MOST for n in sizes)

    def to_dict(self) -> dict:
        return {
            "since": self.since,
            "until": self.until,
            "span": self.span,
            "totals": [{"queue": q, "type": t, **tally.to_dict()} for (q, t), tally in self.totals().items()],
            "buckets": [b.to_dict() for b in self.buckets],
        }
