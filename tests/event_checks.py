"""The event rows of a task table, and what an INSERT ... SELECT of the task rows writes as
them: the reference every way of writing events is compared with (tests of the settle, of
MySQL's rendered inserts, of real workers)."""

from __future__ import annotations

import struct

import sqlalchemy as sa

from queue_core.store.events import COLUMNS, event_columns


def bits(v):
    return None if v is None else struct.pack(">d", float(v))


def same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return bits(a) == bits(b)
    return a == b


def event_rows(q, kind=None) -> list[dict]:
    e = q.store.events_t
    stmt = sa.select(e).order_by(e.c.id)
    if kind is not None:
        stmt = stmt.where(e.c.kind == kind)
    return q.db.run(lambda c: [dict(r._mapping) for r in c.execute(stmt)])


def reference_rows(q, kind: str, ids, at: float) -> list[dict]:
    """What a plain INSERT ... SELECT of the event ``kind`` of the rows ``ids`` writes (read back
    and deleted again), in task_id order."""
    store = q.store
    t, e = store.t, store.events_t
    rows = sa.select(*event_columns(t, e, kind)).where(t.c.id.in_(list(ids)))

    def work(c):
        before = c.execute(sa.select(sa.func.max(e.c.id))).scalar() or 0
        c.execute(sa.insert(e).from_select(list(COLUMNS), rows), {"event_at": at})
        got = [dict(r._mapping) for r in c.execute(sa.select(e).where(e.c.id > before).order_by(e.c.task_id))]
        c.execute(sa.delete(e).where(e.c.id > before))
        return got

    return q.db.run(work)


def assert_like_reference(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    got = sorted(got, key=lambda r: r["task_id"])
    for g, w in zip(got, want, strict=True):
        for col in COLUMNS:
            assert same(g[col], w[col]), (g["task_id"], col, g[col], w[col])


def hand_edit(q, ids, **values_by_id) -> None:
    t = q.store.t

    def work(c):
        for i in ids:
            c.execute(sa.update(t).where(t.c.id == i).values(**{k: v[i] for k, v in values_by_id.items()}))

    q.db.run(work)


def take_over(q, task, expired_at: float, now: float):
    """Another worker takes over the lease of the held ``task`` (made to expire at ``expired_at``
    by hand) at ``now``; its new holder."""
    hand_edit(q, [task._id], timeout={task._id: expired_at})
    [taken] = q.poll_multi(1, alive_time=10, now=now)
    assert taken.key == task.key
    return taken


def marks_claims(backend: str) -> bool:
    """Whether the claims of ``backend`` mark their rows (a settle writes successes from what it holds)."""
    return backend == "mysql"


class SettleWays:
    """Which task ids a settle wrote from what it held, and which it read back."""

    def __init__(self, q, monkeypatch):
        self.held: list[int] = []
        self.read_back: list[int] = []
        store = q.store
        record_held, record_ids = store.settles._record_held, store.events.record_ids

        def held(conn, group, now):
            self.held += [s.id for s in group]
            return record_held(conn, group, now)

        def read_back(conn, kind, ids, *a, **k):
            if kind == "finished":
                self.read_back += list(ids)
            return record_ids(conn, kind, ids, *a, **k)

        monkeypatch.setattr(store.settles, "_record_held", held)
        monkeypatch.setattr(store.events, "record_ids", read_back)


def assert_stream_and_statistics_see_each_finish_once(q, held, t0: float) -> None:
    """The event stream tells one ``finished`` per task of ``held`` (all finished within a minute
    of ``t0``), and the statistics count each start and success once."""
    finished = list(q.events(since=0, kinds=["finished"]))
    assert sorted(e.key for e in finished) == sorted(h.key for h in held)
    assert q.roll_up_stats(now=t0 + 4000) > 0
    stats = q.statistics(since=t0 - 60, until=t0 + 60, now=t0 + 4000)
    [tally] = stats.totals().values()
    assert (tally.started, tally.succeeded) == (len(held), len(held)), tally
