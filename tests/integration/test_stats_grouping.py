"""The roll-up counts events grouped in the database (``store/stats.py``): the groups must be the
ones ``statistics.group_of`` makes of each row, on SQLite, MariaDB and PostgreSQL, for any values —
times on and around minute boundaries, waits and runs exactly on a distribution's bounds and one
step of a double either side, negative, zero, NULL, huge; every kind and outcome. And the buckets a
roll-up writes equal the reference tally of the same rows (``statistics.tally_events``)."""

from __future__ import annotations

import math
import random
from collections import defaultdict

import pytest
import sqlalchemy as sa

from queue_core.rules import statistics
from queue_core.rules.statistics import BOUNDS, group_of, tally_events

T0 = 1_700_000_040.0  # a minute's start

KINDS = [
    "claimed",
    "finished",
    "retried",
    "released",
    "expired",
    "force_finished",
    "gave_up",
    "cancelled",
    "set_aside",
    "moved",
    "cancel_requested",
]
OUTCOMES = [None, "success", "failure", "cancelled", "skipped"]


def seconds_values() -> list:
    near = [v for b in BOUNDS for v in (b, math.nextafter(b, 0.0), math.nextafter(b, math.inf))]
    return [None, None, 0.0, -0.0, -1.5, 1e-9, 5e-324, 1e9, 0.3, 2.0, 65.0, 123.456789, *near]


def random_events(n: int, seed: int) -> list[dict]:
    rnd = random.Random(seed)
    times = [T0, T0 + 59.999999, T0 + 60.0, math.nextafter(T0, 0.0), T0 + 3599.5, T0 + 86_400.25, 123.0]
    values = seconds_values()
    out = []
    for i in range(n):
        at = rnd.choice(times) + rnd.choice([0.0, rnd.uniform(0, 7200)])
        out.append(
            {
                "task_id": i + 1,
                "key": f"k{i}",
                "queue": rnd.choice(["q", "other"]),
                "type": rnd.choice(["t", "u"]),
                "kind": rnd.choice(KINDS),
                "at": at,
                "attempt": 1,
                "owner": None,
                "outcome": rnd.choice(OUTCOMES),
                "detail": None,
                "waited": rnd.choice(values),
                "ran": rnd.choice(values),
                "due_at": None,
                "tracked": 0,
            }
        )
    return out


def as_dict(groups) -> dict:
    out: dict = defaultdict(lambda: [0, 0.0, 0.0])
    for g in groups:
        key = (g.queue, g.type, g.kind, g.outcome, g.minute, g.start_minute, g.wait_bucket, g.run_bucket)
        out[key][0] += g.count
        out[key][1] += g.wait_sum
        out[key][2] += g.run_sum
    return dict(out)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_database_groups_events_as_the_reference_does(queue, seed):
    events = random_events(600, seed)
    store = queue.store
    queue.db.run(lambda c: c.execute(sa.insert(store.events_t), events))
    got = as_dict(queue.db.run(lambda c: store.stats._groups_where(c, sa.true())))
    want = as_dict(group_of(e) for e in events)
    assert got.keys() == want.keys()
    for key, (count, wait_sum, run_sum) in want.items():
        assert got[key][0] == count, key
        assert got[key][1] == pytest.approx(wait_sum, rel=1e-12, abs=1e-300), key  # summed in another order
        assert got[key][2] == pytest.approx(run_sum, rel=1e-12, abs=1e-300), key


def test_a_roll_up_writes_the_reference_tally_of_its_events(queue):
    events = random_events(400, 3)
    store = queue.store
    queue.db.run(lambda c: c.execute(sa.insert(store.events_t), events))
    assert store.stats_roll_up(now=T0 + 10**6, gap_timeout=60.0, batch=150) == len(events)  # several batches
    want = tally_events(events)
    got = {key: tally for span in statistics.SPANS for key, tally in store.stats_rows(span, -1e12, 1e12)}
    assert got.keys() == want.keys()
    for key, tally in want.items():
        mine = got[key]
        assert [getattr(mine, n) for n in statistics.COUNTS] == [getattr(tally, n) for n in statistics.COUNTS], key
        assert (mine.wait.counts, mine.run.counts) == (tally.wait.counts, tally.run.counts), key
        assert mine.wait.total == pytest.approx(tally.wait.total, rel=1e-12)
        assert mine.run.total == pytest.approx(tally.run.total, rel=1e-12)
