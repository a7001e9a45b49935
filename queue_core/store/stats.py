"""Statistics of tasks (store layer): the roll-up of the events into ``<table>_stats`` and the
reads of its buckets. A part of :class:`~queue_core.store.tasks.SqlStore`.

Each event is counted exactly once, by whichever comes first:

* the roll-up: it reads the events after its position (the ``stats_after`` row of
  ``<table>_meta``) and those in the ranges of ids it passed over before (``<table>_stats_gaps``:
  ids handed out to transactions that had not committed yet, or never will, read again at every
  roll-up until they appear or ``event_gap_timeout`` has passed), counts them, and moves its
  position, all in one transaction holding the position's lock (rollers in many processes take
  turns; one that finds it locked leaves the work to the holder; a COMMIT whose acknowledgement
  was lost runs again and finds the position moved);
* a delete of events (a purge, a key taken again, a history trimmed, a run started again): it
  counts those of its events that no roll-up has counted yet (after the position, or passed
  over) in its own transaction, under the same lock (it waits for a roll-up under way), before
  it deletes them.

Nothing is written on the path of a claim or a finish: the events are already there.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

import sqlalchemy as sa

from ..errors import CorruptRowError
from ..rules import statistics
from ..rules.statistics import BucketKey, Distribution, EventGroup, IdRange, StatsRowError, Tally
from ..rules.task_states import LIVE, PENDING
from .database import Database

log = logging.getLogger("queue_core.store")

#: the meta row holding the id of the last event rolled up
POSITION = "stats_after"
#: events rolled up per transaction
BATCH = 2000


class _Page(NamedTuple):
    """The next events a roll-up counts: the ranges of their ids, the ranges it passes over
    (holes), the last id, how many."""

    runs: list[IdRange]
    passed: list[IdRange]
    last: int
    size: int


class TaskStatistics:
    """The statistics part of a store: the buckets of ``stats_t`` (and the roll-up's ``gaps_t`` and
    position in ``meta``) counted from the events ``events_t`` of the task table ``t``."""

    def __init__(
        self, db: Database, t: sa.Table, events_t: sa.Table, stats_t: sa.Table, gaps_t: sa.Table, meta: sa.Table
    ):
        self.db, self.t, self.events_t, self.stats_t, self.gaps_t, self.meta = db, t, events_t, stats_t, gaps_t, meta

    def stats_roll_up(self, now: float, gap_timeout: float, batch: int = BATCH) -> int:
        """Count the events no roll-up or delete has counted yet; how many (0 while another
        process rolls up). An id passed over is looked for again until ``gap_timeout``."""
        total = 0
        while True:
            n, more = self.db.run(lambda c: self._roll_batch(c, now, gap_timeout, batch), what="roll up statistics")
            total += n
            if not more:
                return total

    def _roll_batch(self, conn, now: float, gap_timeout: float, batch: int) -> tuple[int, bool]:
        m, g = self.meta, self.gaps_t
        position = self.db.dialect.lock_candidates(sa.select(m.c.value).where(m.c.name == POSITION))
        after = conn.execute(position).scalar()
        if after is None:  # another roller holds it (or a table init never finished: nothing to add to)
            return 0, False
        after = self._position(after)
        gaps = {(r.first_id, r.last_id): r.missed_at for r in conn.execute(sa.select(g))}
        late = self._ids_in(conn, list(gaps))
        page = self._next_page(conn, after, batch)
        # counted over the ranges of the ids just read: an id that commits meanwhile falls in a
        # range passed over (looked for again later), never in one of these
        self._add(conn, statistics.tally_groups(self._groups(conn, statistics.id_runs(late) + page.runs)))
        self._write_gaps(conn, gaps, late, page.passed, now, now - gap_timeout)
        conn.execute(sa.update(m).where(m.c.name == POSITION).values(value=str(page.last)))
        return len(late) + page.size, page.size == batch

    def _next_page(self, conn, after: int, batch: int) -> _Page:
        """The next events after id ``after`` (at most ``batch``). Counted in the database when
        their ids follow one another without a hole (as they mostly do): each id is then there,
        none can still appear among them. Else read one by one, to find the holes (ids of
        transactions not committed yet, or rolled back)."""
        e = self.events_t
        ids = sa.select(e.c.id).where(e.c.id > after).order_by(e.c.id).limit(batch)
        page = ids.subquery()
        count, last = conn.execute(sa.select(sa.func.count(), sa.func.max(page.c.id))).one()
        if not count:
            return _Page([], [], after, 0)
        if last - after == count:
            return _Page([(after + 1, last)], [], last, count)
        new = [i for (i,) in conn.execute(ids)]
        return _Page(statistics.id_runs(new), statistics.passed_over(after, new), new[-1], len(new))

    def _write_gaps(self, conn, gaps: dict, found: list[int], passed: list[IdRange], now: float, expired: float):
        """The ranges still awaited: the old ones less what was found and those missed before
        ``expired`` (never committed), and the new ones ``passed``, missed ``now``."""
        g = self.gaps_t
        awaited: dict[IdRange, float] = {}
        for (first, last), missed in gaps.items():
            if missed >= expired:
                awaited.update(dict.fromkeys(statistics.without([(first, last)], found), missed))
        awaited.update(dict.fromkeys(passed, now))
        if awaited == gaps:
            return
        conn.execute(sa.delete(g))
        if awaited:
            rows = [{"first_id": a, "last_id": b, "missed_at": at} for (a, b), at in awaited.items()]
            conn.execute(sa.insert(g), rows)

    def _ids_in(self, conn, ranges: Sequence[IdRange]) -> list[int]:
        """The ids of the events that fall in ``ranges``, ascending."""
        e, out = self.events_t, []
        for i in range(0, len(ranges), 200):
            which = _in_ranges(e.c.id, ranges[i : i + 200])
            out += [found for (found,) in conn.execute(sa.select(e.c.id).where(which))]
        return sorted(out)

    def _groups(self, conn, ranges: Sequence[IdRange]) -> list[EventGroup]:
        """The events whose ids fall in ``ranges``, grouped (:meth:`_groups_where`)."""
        out: list[EventGroup] = []
        for i in range(0, len(ranges), 200):
            out += self._groups_where(conn, _in_ranges(self.events_t.c.id, ranges[i : i + 200]))
        return out

    def _groups_where(self, conn, which) -> list[EventGroup]:
        """The events ``which`` selects, grouped in the database by what the tally reads of them
        (``statistics.EventGroup``; ``statistics.group_of`` computes the same of one row)."""
        if which is None:
            return []
        rows = conn.execute(self._grouped_events(which))
        return [_event_group(r) for r in rows]

    def _grouped_events(self, which) -> sa.Select:
        e, d = self.events_t, self.db.dialect
        start = e.c.at - sa.func.coalesce(e.c.ran, 0.0)  # attempt_events.started_at
        each = (
            sa.select(
                e.c.queue,
                e.c.type,
                d.as_bytes(e.c.kind).label("kind"),  # byte for byte: MySQL's collation folds case
                d.as_bytes(e.c.outcome).label("outcome"),
                d.floor(_in_minutes(e.c.at)).label("minute"),
                d.floor(_in_minutes(start)).label("start_minute"),
                bucket_in_sql(e.c.waited, d).label("wait_bucket"),
                bucket_in_sql(e.c.ran, d).label("run_bucket"),
                seconds_in_sql(e.c.waited, d).label("waited"),
                seconds_in_sql(e.c.ran, d).label("ran"),
            )
            .where(which)
            .subquery()
        )
        keys = [each.c[n] for n in ("queue", "type", "kind", "outcome", "minute", "start_minute")]
        keys += [each.c.wait_bucket, each.c.run_bucket]
        sums = (sa.func.sum(each.c.waited).label("wait_sum"), sa.func.sum(each.c.ran).label("run_sum"))
        return sa.select(*keys, sa.func.count().label("n"), *sums).group_by(*keys)

    def count_before_delete(self, conn, which: Any) -> None:
        """Count the events ``which`` selects that no roll-up has counted yet (after its position,
        or passed over by it), before the caller deletes them in this transaction: under the
        position's lock, waiting for a roll-up under way, so that none counts them too. A
        statistics row edited by hand never stops the delete (a purge, a retry, a submission):
        those counts are left out, and said in the log."""
        m, e, g = self.meta, self.events_t, self.gaps_t
        after = conn.execute(self.db.dialect.lock_rows(sa.select(m.c.value).where(m.c.name == POSITION))).scalar()
        if after is None:  # a table whose init did not finish: no statistics to keep
            return
        try:
            uncounted = sa.or_(
                e.c.id > self._position(after), sa.exists().where(e.c.id.between(g.c.first_id, g.c.last_id))
            )
            self._add(conn, statistics.tally_groups(self._groups_where(conn, sa.and_(which, uncounted))))
        except CorruptRowError as exc:
            log.warning("statistics of deleted events left out: %s", exc)

    def _position(self, value: Any) -> int:
        """The roll-up's position (the id of the last event it counted) as its meta row holds
        it; CorruptRowError for what pq never writes there (a row edited by hand)."""
        try:
            return int(value)
        except (TypeError, ValueError):
            raise CorruptRowError(
                f"the row {POSITION!r} of {self.meta.name} holds {str(value)[:40]!r}, which pq never writes: "
                f"the id of the last event the statistics counted; set it to the largest id of {self.events_t.name} "
                "(the events up to it not counted yet are then left out; none is counted twice)"
            ) from None

    def _add(self, conn, tallies: dict[BucketKey, Tally]) -> None:
        """Add ``tallies`` to their rows (made when missing). Every row is read and checked before
        any is written: a row edited by hand refuses the whole addition, nothing written."""
        s = self.stats_t
        key_cols = (s.c.span, s.c.start, s.c.queue, s.c.type)
        keys = list(tallies)
        found: dict[BucketKey, Tally] = {}
        for i in range(0, len(keys), 200):
            have = conn.execute(sa.select(s).where(sa.tuple_(*key_cols).in_(keys[i : i + 200]))).all()
            found.update({(r.span, r.start, r.queue, r.type): self._tally(r._mapping) for r in have})
        for key, tally in tallies.items():
            if key in found:
                found[key].merge(tally)
                where = [c == v for c, v in zip(key_cols, key, strict=True)]
                conn.execute(sa.update(s).where(*where).values(**_values(found[key])))
            else:
                span, start, queue, type_ = key
                conn.execute(sa.insert(s).values(span=span, start=start, queue=queue, type=type_, **_values(tally)))

    def _tally(self, row) -> Tally:
        try:
            wait = Distribution.from_columns(row["wait_counts"], row["wait_sum"])
            run = Distribution.from_columns(row["run_counts"], row["run_sum"])
        except StatsRowError as exc:
            raise CorruptRowError(
                f"a row of {self.stats_t.name} (span {row['span']}, start {row['start']}, queue {row['queue']!r}, "
                f"type {row['type']!r}) holds what pq never writes: {exc}; delete it"
            ) from None
        counts = {n: row[n] for n in statistics.COUNTS}
        wrong = {n: v for n, v in counts.items() if type(v) is not int or not 0 <= v <= statistics.MAX_COUNT}
        if wrong or wait.count > statistics.MAX_COUNT or run.count > statistics.MAX_COUNT:
            raise CorruptRowError(
                f"a row of {self.stats_t.name} (span {row['span']}, start {row['start']}, queue {row['queue']!r}, "
                f"type {row['type']!r}) holds a count pq never writes: {wrong or 'a distribution'}; delete it"
            )
        return Tally(**counts, wait=wait, run=run)

    def stats_rows(
        self,
        span: int,
        since: float,
        until: float,
        queue: str | None = None,
        type_: str | None = None,
        *,
        uncounted: bool = False,
    ) -> list[tuple[BucketKey, Tally]]:
        """The buckets of ``span`` that overlap [since, until), oldest first (of ``queue`` and
        ``type_`` only, if given); ``uncounted``: with what the events no roll-up has counted yet
        add to them (:meth:`_read_counted`)."""
        s = self.stats_t
        where = [s.c.span == span, s.c.start > since - span, s.c.start < until]
        where += [] if queue is None else [s.c.queue == queue]
        where += [] if type_ is None else [s.c.type == type_]

        def keep(key: BucketKey) -> bool:
            _, start, q, t = key
            return since - span < start < until and queue in (None, q) and type_ in (None, t)

        return self._read_counted(sa.select(s).where(*where), span, keep if uncounted else None)

    def stats_totals(self, *, uncounted: bool = False) -> list[tuple[BucketKey, Tally]]:
        """The all-time buckets, one per queue and type; ``uncounted``: with the events no
        roll-up has counted yet (the counters of the metrics, whole once an event commits)."""
        stmt = sa.select(self.stats_t).where(self.stats_t.c.span == statistics.ALL_TIME)
        return self._read_counted(stmt, statistics.ALL_TIME, (lambda key: True) if uncounted else None)

    def _read_counted(self, stmt: sa.Select, span: int, keep: Any) -> list[tuple[BucketKey, Tally]]:
        """The buckets ``stmt`` reads plus what the events no roll-up or delete has counted yet
        add to the buckets of ``span`` that ``keep`` accepts (None: none), read (never written) in one
        snapshot: an event is counted once, in a bucket or as uncounted, even while a roll-up or
        a purge commits (so counters never go back). Ordered by start, queue and type."""

        def read(conn) -> list[tuple[BucketKey, Tally]]:
            if keep is not None:
                self.db.dialect.snapshot_read(conn)
            found = {(r.span, r.start, r.queue, r.type): self._tally(r._mapping) for r in conn.execute(stmt).all()}
            for key, tally in self._uncounted(conn).items() if keep is not None else ():
                if key[0] == span and keep(key):
                    found.setdefault(key, Tally()).merge(tally)
            return sorted(found.items(), key=lambda item: (item[0][1], item[0][2], item[0][3]))

        return self.db.run(read, write=False, what="read statistics")

    def _uncounted(self, conn) -> dict[BucketKey, Tally]:
        """What the events no roll-up has counted yet (after its position, or passed over by it)
        add to each bucket; nothing for a position edited by hand (said in the log)."""
        m, e, g = self.meta, self.events_t, self.gaps_t
        after = conn.execute(sa.select(m.c.value).where(m.c.name == POSITION)).scalar()
        if after is None:
            return {}
        try:
            uncounted = sa.or_(
                e.c.id > self._position(after), sa.exists().where(e.c.id.between(g.c.first_id, g.c.last_id))
            )
            return statistics.tally_groups(self._groups_where(conn, uncounted))
        except CorruptRowError as exc:
            log.warning("statistics of events not rolled up yet left out: %s", exc)
            return {}

    def event_newest(self, limit: int) -> list[dict]:
        """The newest ``limit`` events (by id, read backwards along the primary key: no other row
        is read), with what the statistics read of them (queue, type, kind, at, waited, ran)."""
        e = self.events_t
        cols = (e.c.queue, e.c.type, e.c.kind, e.c.at, e.c.waited, e.c.ran)
        stmt = sa.select(*cols).order_by(e.c.id.desc()).limit(limit)
        rows = self.db.run(lambda conn: conn.execute(stmt).all(), write=False, what="read the newest events")
        return [dict(r._mapping) for r in rows]

    def stats_prune(self, spans_before: Sequence[tuple[int, float]]) -> int:
        """Delete the buckets of each ``(span, before)`` that start before ``before``."""
        s = self.stats_t

        def work(conn) -> int:
            return sum(
                conn.execute(sa.delete(s).where(s.c.span == span, s.c.start < before)).rowcount
                for span, before in spans_before
            )

        return self.db.run(work, what="prune statistics")

    def stats_live_counts(self, now: float) -> dict[tuple[str, str], dict]:
        """The tasks not finished per (queue, type) by status (:func:`count_live`), read through
        the indexes (never the finished rows: a scrape of the metrics stays cheap)."""
        by_state, running = _live_counts_reads(self.t, now)

        def read(conn):
            return conn.execute(by_state).all(), conn.execute(running).all()

        states, runs = self.db.run(read, write=False, what="count live tasks")
        return count_live(states, runs)


def _event_group(row: Any) -> EventGroup:
    """The group a row of ``TaskStatistics._grouped_events`` reads (its minutes as indexes)."""
    return EventGroup(
        queue=row.queue,
        type=row.type,
        kind=_text(row.kind),
        outcome=_text(row.outcome),
        minute=row.minute * 60.0,
        start_minute=row.start_minute * 60.0,
        wait_bucket=row.wait_bucket,
        run_bucket=row.run_bucket,
        count=row.n,
        wait_sum=row.wait_sum or 0.0,
        run_sum=row.run_sum or 0.0,
    )


def _text(value: Any) -> Any:
    """A string read as its UTF-8 bytes (``Dialect.as_bytes``), as text again."""
    return bytes(value).decode("utf-8", "surrogateescape") if isinstance(value, bytes | memoryview) else value


def _in_minutes(seconds: Any) -> Any:
    """``seconds / 60`` in SQL, a value too small to divide (PostgreSQL refuses a quotient that
    underflows) read as 0 or, below 0, as -1 (its floor)."""
    tiny = 1e-300
    return sa.case(
        (sa.and_(seconds >= 0.0, seconds < tiny), 0.0),
        (sa.and_(seconds < 0.0, seconds > -tiny), -1.0),
        else_=seconds / 60,
    )


def bucket_in_sql(seconds: Any, dialect: Any) -> Any:
    """``statistics.bucket_of`` in SQL: the bucket of BOUNDS the DOUBLE ``seconds`` falls in
    (NULL for NULL; NaN in the first, as ``max(0.0, nan)`` is 0.0)."""
    ladder = [(seconds <= sa.literal(bound, sa.Double()), i) for i, bound in enumerate(statistics.BOUNDS)]
    return sa.case((seconds.is_(None), None), (dialect.is_nan(seconds), 0), *ladder, else_=len(statistics.BOUNDS))


def seconds_in_sql(seconds: Any, dialect: Any) -> Any:
    """``statistics.seconds_counted`` in SQL (NULL for NULL)."""
    most: Any = sa.literal(statistics.MAX_SECONDS, sa.Double())
    return sa.case(
        (seconds.is_(None), None),
        (sa.or_(dialect.is_nan(seconds), seconds < 0.0), 0.0),
        (seconds > most, most),
        else_=seconds,
    )


def _in_ranges(column: Any, ranges: Sequence[IdRange]) -> Any:
    """``column`` within one of ``ranges`` (None: no range)."""
    return sa.or_(*(column.between(a, b) for a, b in ranges)) if ranges else None


def _values(tally: Tally) -> dict:
    return {
        **{n: getattr(tally, n) for n in statistics.COUNTS},
        "wait_counts": tally.wait.to_json(),
        "wait_sum": tally.wait.total,
        "run_counts": tally.run.to_json(),
        "run_sum": tally.run.total,
    }


def _live_counts_reads(t: sa.Table, now: float) -> tuple[sa.Select, sa.Select]:
    """The live and pending rows by state, queue and type (with how many are due and the
    earliest due time), grouped in the order of the (state, queue, type, ...) index, so the
    database counts as it walks it (a group by an expression of each row's due time made MariaDB
    and SQLite sort 100,000 live rows into a temporary table at every scrape); and the running
    ones by queue and type, through the (state, leased, ...) index: neither reads a finished row."""
    due = t.c.timeout <= now
    by_state = (
        sa.select(
            t.c.queue,
            t.c.type,
            t.c.state,
            sa.func.count().label("n"),
            sa.func.sum(sa.case((due, 1), else_=0)).label("due_n"),
            sa.func.min(sa.case((due, t.c.timeout), else_=None)).label("earliest"),
        )
        .where(t.c.state.in_([LIVE, PENDING]))
        .group_by(t.c.state, t.c.queue, t.c.type)
    )
    running = (
        sa.select(t.c.queue, t.c.type, sa.func.count().label("n"))
        .where(t.c.state == LIVE, t.c.leased == 1, t.c.timeout > now)
        .group_by(t.c.queue, t.c.type)
    )
    return by_state, running


def count_live(by_state: Sequence, running: Sequence) -> dict[tuple[str, str], dict]:
    """The tasks not finished per (queue, type): ``waiting`` (due, or a lease expired),
    ``scheduled`` (due later), ``running``, ``pending`` (steps waiting for their parents), and
    ``oldest_due`` (the earliest due time of the waiting ones, or None)."""
    out: dict[tuple[str, str], dict] = {}

    def entry(queue: str, type_: str) -> dict:
        blank = {"waiting": 0, "scheduled": 0, "running": 0, "pending": 0, "oldest_due": None}
        return out.setdefault((queue, type_), blank)

    for queue, type_, state, n, due_n, earliest in by_state:
        e = entry(queue, type_)
        if state == PENDING:
            e["pending"] += n
            continue
        e["waiting"] += int(due_n or 0)
        e["scheduled"] += n - int(due_n or 0)
        if earliest is not None:
            e["oldest_due"] = earliest if e["oldest_due"] is None else min(e["oldest_due"], earliest)
    for queue, type_, n in running:
        e = entry(queue, type_)
        e["running"] += n
        e["scheduled"] = max(0, e["scheduled"] - n)  # a running task's timeout is its lease's end
    return out
