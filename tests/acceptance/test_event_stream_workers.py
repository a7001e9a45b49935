"""The event stream with real worker processes on SQLite, MariaDB and PostgreSQL: a
follower that reads while several processes claim, retry and finish tasks and the test submits
more gets every event once — the same events, and as many, as the tables hold at the end. Also
for a second follower that stops half-way and resumes from the last cursor it saw."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import sqlalchemy as sa
from procs import run_to_end, start_worker, wait_for

pytestmark = pytest.mark.slow


#: the ends of an attempt that carry its claim when it has no row of its own (docs/operations.md)
CARRY = ("finished", "retried", "released", "expired", "force_finished")


def recorded(q) -> Counter:
    """Every event the tables hold: each task's submission, each event row, and the claim each
    end carries (an untracked task's: at the attempt's start, ``at - ran``; a release gave its
    attempt back, so its claim's attempt is one more)."""
    t, e = q.store.t, q.store.events_t

    def read(conn):
        subs = [("submitted", r.key, 0, r.created_at) for r in conn.execute(sa.select(t.c.key, t.c.created_at))]
        rows = conn.execute(sa.select(e.c.kind, e.c.key, e.c.attempt, e.c.at, e.c.waited, e.c.ran)).all()
        rest = [(r.kind, r.key, r.attempt, r.at) for r in rows]
        claims = [
            ("claimed", r.key, r.attempt + (r.kind == "released"), r.at - (r.ran or 0.0))
            for r in rows
            if r.kind in CARRY and r.waited is not None
        ]
        return Counter(subs + rest + claims)

    return q.db.run(read, write=False)


def follow_into(q, got: list, stop: threading.Event, since="now", until=None) -> threading.Thread:
    stream = q.events(since=since, follow=True, poll_interval=0.05, stop=stop)

    def read():
        for e in stream:
            got.append(e)
            if until is not None and len(got) >= until:
                return

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def test_a_follower_gets_every_event_of_racing_workers_once(wq, tmp_path):
    wq.config["retention_time"] = 3600.0
    stop = threading.Event()
    got: list = []
    follower = follow_into(wq, got, stop)
    half: list = []
    half_stop = threading.Event()
    quitter = follow_into(wq, half, half_stop, until=150)
    wq.submit_many([{"key": f"p{i}", "type": "plain", "data": {}} for i in range(200)])
    wq.submit_many([{"key": f"f{i}", "type": "handler", "data": {"fail": True}, "max_attempts": 2} for i in range(40)])
    workers = [
        start_worker(wq.config["url"], wq.table, burst=True, processors=2, retention_time=3600, wake_interval=0.01)
        for _ in range(3)
    ]
    for i in range(100):  # submitted one by one while the workers run
        wq.submit(f"late{i}", "plain", {})
    run_to_end(workers, timeout=180)
    # burst workers end once nothing is due: on a loaded machine, before the last submissions
    run_to_end([start_worker(wq.config["url"], wq.table, burst=True, retention_time=3600)], timeout=180)
    assert sum(1 for m in wq.list() if m.status == "finished") == 340
    quitter.join(60)
    expected = recorded(wq)
    assert sum(expected.values()) >= 340 + 2 * (340 + 40)  # every submission, and each attempt's claim and end
    wait_for(lambda: len(got) >= sum(expected.values()), timeout=60, what="the follower to catch up")
    resumed: list = []
    rest = follow_into(wq, resumed, half_stop, since=half[-1].cursor, until=sum(expected.values()) - len(half))
    rest.join(60)
    stop.set()
    half_stop.set()
    follower.join(10)
    as_read = Counter((e.kind, e.key, e.attempt, e.at) for e in got)
    assert as_read == expected  # none missed, none twice
    assert Counter((e.kind, e.key, e.attempt, e.at) for e in half + resumed) == expected
