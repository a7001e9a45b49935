"""Statistics of tasks (store layer): the roll-up of the events into ``<table>_stats`` and the
reads of its buckets. A mixin of :class:`~queue_core.store.tasks.TaskStore`.

The roll-up is the one writer of the statistics: it reads the events after its position (the
``stats_after`` row of ``<table>_meta``, locked for the transaction, so that rollers in many
processes take turns and a roller that finds it locked leaves the work to the one holding it),
adds those older than a horizon to their buckets, and moves its position past them, all in one
transaction: a batch is counted once, also when a COMMIT's acknowledgement is lost and the
transaction runs again (it then finds the position moved). Nothing is written on the path of a
claim or a finish: the events are already there.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from .. import statistics
from ..errors import CorruptRowError
from ..row_states import LIVE, PENDING
from ..statistics import BucketKey, Distribution, StatsRowError, Tally
from .database import Database

#: the meta row holding the id of the last event rolled up
POSITION = "stats_after"
#: events rolled up per transaction
BATCH = 5000


class TaskStatistics:
    """Needs ``t``, ``events_t``, ``stats_t``, ``meta`` and ``db``."""

    # what the store this is mixed into provides (declared only: no class attribute is made)
    t: sa.Table
    events_t: sa.Table
    stats_t: sa.Table
    meta: sa.Table
    db: Database

    def roll_up(self, before: float, batch: int = BATCH) -> int:
        """Add the events older than ``before`` that no roll-up has added yet to their buckets;
        how many were added (0 when another process is rolling up now)."""
        total = 0
        while True:
            n = self.db.run(lambda c: self._roll_batch(c, before, batch), what="roll up statistics")
            total += n
            if n < batch:
                return total

    def _roll_batch(self, conn, before: float, batch: int) -> int:
        m, e = self.meta, self.events_t
        position = self.db.dialect.lock_candidates(sa.select(m.c.value).where(m.c.name == POSITION))
        after = conn.execute(position).scalar()
        if after is None:  # another roller holds it (or a table init never finished: nothing to add to)
            return 0
        cols = (e.c.id, e.c.kind, e.c.at, e.c.queue, e.c.type, e.c.outcome, e.c.waited, e.c.ran)
        page = conn.execute(sa.select(*cols).where(e.c.id > int(after)).order_by(e.c.id).limit(batch)).all()
        ready = statistics.rollable([r._mapping for r in page], before)
        if not ready:
            return 0
        self._add(conn, statistics.tally_events(ready))
        conn.execute(sa.update(m).where(m.c.name == POSITION).values(value=str(ready[-1]["id"])))
        return len(ready)

    def _add(self, conn, tallies: dict[BucketKey, Tally]) -> None:
        """Add ``tallies`` to their rows (made when missing)."""
        s = self.stats_t
        key_cols = (s.c.span, s.c.start, s.c.queue, s.c.type)
        keys = list(tallies)
        for i in range(0, len(keys), 200):
            chunk = keys[i : i + 200]
            have = conn.execute(sa.select(s).where(sa.tuple_(*key_cols).in_(chunk))).all()
            found = {(r.span, r.start, r.queue, r.type): self._tally(r._mapping) for r in have}
            for key in chunk:
                tally = tallies[key]
                if key in found:
                    found[key].merge(tally)
                    where = [c == v for c, v in zip(key_cols, key, strict=True)]
                    conn.execute(sa.update(s).where(*where).values(**_values(found[key])))
                else:
                    span, start, queue, type_ = key
                    row = dict(span=span, start=start, queue=queue, type=type_, **_values(tally))
                    conn.execute(sa.insert(s).values(**row))

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
        if not all(type(v) is int and v >= 0 for v in counts.values()):
            raise CorruptRowError(f"a row of {self.stats_t.name} holds a count pq never writes: {counts}; delete it")
        return Tally(**counts, wait=wait, run=run)

    def stats_rows(
        self, span: int, since: float, until: float, queue: str | None = None, type_: str | None = None
    ) -> list[tuple[BucketKey, Tally]]:
        """The buckets of ``span`` that overlap [since, until), oldest first (of ``queue`` and
        ``type_`` only, if given)."""
        s = self.stats_t
        where = [s.c.span == span, s.c.start > since - span, s.c.start < until]
        where += [] if queue is None else [s.c.queue == queue]
        where += [] if type_ is None else [s.c.type == type_]
        stmt = sa.select(s).where(*where).order_by(s.c.start, s.c.queue, s.c.type)
        rows = self.db.run(lambda c: c.execute(stmt).all(), write=False, what="read statistics")
        return [((r.span, r.start, r.queue, r.type), self._tally(r._mapping)) for r in rows]

    def stats_totals(self) -> list[tuple[BucketKey, Tally]]:
        """The all-time buckets, one per queue and type."""
        s = self.stats_t
        stmt = sa.select(s).where(s.c.span == statistics.ALL_TIME).order_by(s.c.queue, s.c.type)
        rows = self.db.run(lambda c: c.execute(stmt).all(), write=False, what="read statistics")
        return [((r.span, r.start, r.queue, r.type), self._tally(r._mapping)) for r in rows]

    def prune_stats(self, spans_before: Sequence[tuple[int, float]]) -> int:
        """Delete the buckets of each ``(span, before)`` that start before ``before``."""
        s = self.stats_t

        def work(conn) -> int:
            return sum(
                conn.execute(sa.delete(s).where(s.c.span == span, s.c.start < before)).rowcount
                for span, before in spans_before
            )

        return self.db.run(work, what="prune statistics")

    def live_counts(self, now: float) -> dict[tuple[str, str], dict]:
        """The tasks not finished per (queue, type) by status (:func:`count_live`), read through
        the indexes (never the finished rows: a scrape of the metrics stays cheap)."""
        by_state, running = _live_counts_reads(self.t, now)

        def read(conn):
            return conn.execute(by_state).all(), conn.execute(running).all()

        states, runs = self.db.run(read, write=False, what="count live tasks")
        return count_live(states, runs)


def _values(tally: Tally) -> dict:
    return {
        **{n: getattr(tally, n) for n in statistics.COUNTS},
        "wait_counts": tally.wait.to_json(),
        "wait_sum": tally.wait.total,
        "run_counts": tally.run.to_json(),
        "run_sum": tally.run.total,
    }


def _live_counts_reads(t: sa.Table, now: float) -> tuple[sa.Select, sa.Select]:
    """The live and pending rows by queue, type, state and due-ness (with the earliest due time),
    in the order of the (state, queue, type, ...) index; and the running ones by queue and type,
    through the (state, leased, ...) index: neither reads a finished row."""
    due = (t.c.timeout <= now).label("due")
    by_state = (
        sa.select(t.c.queue, t.c.type, t.c.state, due, sa.func.count().label("n"), sa.func.min(t.c.timeout))
        .where(t.c.state.in_([LIVE, PENDING]))
        .group_by(t.c.queue, t.c.type, t.c.state, due)
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

    for queue, type_, state, due, n, earliest in by_state:
        e = entry(queue, type_)
        if state == PENDING:
            e["pending"] += n
        elif due:
            e["waiting"] += n
            e["oldest_due"] = earliest if e["oldest_due"] is None else min(e["oldest_due"], earliest)
        else:
            e["scheduled"] += n
    for queue, type_, n in running:
        e = entry(queue, type_)
        e["running"] += n
        e["scheduled"] = max(0, e["scheduled"] - n)  # a running task's timeout is its lease's end
    return out
