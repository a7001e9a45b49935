"""What statistics reads answer, on SQLite, MariaDB and PostgreSQL: the percentiles of a few
tasks exactly (by nearest rank of the events while they are there, from the buckets once purged,
never outside the times observed); reads at bucket boundaries miss nothing; hand-edited
statistics rows are CorruptRowErrors naming the row; hostile filters are ValidationErrors or mere
filters."""

from __future__ import annotations

import datetime as dt
import math

import pytest
import sqlalchemy as sa

from queue_core import CorruptRowError, ValidationError
from queue_core.rules.statistics import BOUNDS, HOUR, MINUTE, MINUTE_KEEP, Distribution

# ``Queue.statistics`` answers the percentiles of a few tasks exactly, by nearest rank of their wait
# and run times read from the events, while every event its buckets count is still there; once the
# events are purged, from the buckets (never above the largest value), on SQLite, MariaDB and
# PostgreSQL.


#: run times spread over many buckets of the distribution, and waits likewise
RUNS = [0.2, 0.3, 0.7, 1.1, 1.4, 3.0, 7.0, 12.0, 30.0, 0.05, 2.0, 4.5]


WAITS = [0.5, 1.5, 0.1, 6.0, 0.02, 9.0, 20.0, 0.3, 2.2, 40.0, 0.8, 3.3]


QS = (0.0, 0.5, 0.95, 0.99, 1.0)


def nearest_rank(values: list[float], q: float) -> float:
    """The smallest of ``values`` with at least q·n of them at or below it."""
    return sorted(values)[max(1, math.ceil(q * len(values))) - 1]


def run_tasks(queue, clock) -> float:
    """Run one task per wait and run time of WAITS and RUNS; the time before the first."""
    first = clock.now()
    for i, (wait, run) in enumerate(zip(WAITS, RUNS, strict=True)):
        queue.submit(f"t{i}", "invoice")
        clock.advance(wait)
        task = queue.poll(alive_time=600)
        clock.advance(run)
        task.finish()
    return first


def close(found: list, expected: list) -> bool:
    return found == pytest.approx(expected, abs=1e-6)  # the clock's seconds are sums of floats


@pytest.mark.parametrize("roll_up", [True, False])
def test_the_percentiles_of_a_few_tasks_are_their_nearest_ranks(queue, clock, roll_up):
    first = run_tasks(queue, clock)
    [tally] = queue.statistics(since=first, roll_up=roll_up).totals().values()
    assert (tally.run.count, tally.wait.count) == (len(RUNS), len(WAITS))
    assert close([tally.run.quantile(q) for q in QS], [nearest_rank(RUNS, q) for q in QS])
    assert close([tally.wait.quantile(q) for q in QS], [nearest_rank(WAITS, q) for q in QS])
    run = tally.run.summary()
    assert close([run["p50"], run["p95"], run["p99"]], [1.4, 30.0, 30.0])
    assert tally.run.quantile(1.0) == pytest.approx(max(RUNS), abs=1e-6)


def test_the_percentiles_of_purged_tasks_come_from_the_buckets(queue, clock):
    first = run_tasks(queue, clock)
    clock.advance(queue.config["retention_time"] + 1)
    assert queue.cleanup() == len(RUNS)  # the tasks and their events deleted, their statistics kept
    [tally] = queue.statistics(since=first).totals().values()
    assert tally.run.values is None and tally.run.count == len(RUNS)
    from_buckets = Distribution(tally.run.counts, tally.run.total)
    found = [tally.run.quantile(q) for q in QS]
    assert found == [from_buckets.quantile(q) for q in QS]
    assert found == sorted(found) and found[-1] <= max(RUNS) + 1e-6


def test_a_read_of_a_later_window_answers_from_its_own_tasks_only(queue, clock):
    run_tasks(queue, clock)
    clock.advance(7200)
    since = clock.now()
    for i, run in enumerate([3.0, 0.4]):
        queue.submit(f"late{i}", "invoice")
        task = queue.poll(alive_time=600)
        clock.advance(run)
        task.finish()
    [tally] = queue.statistics(since=since).totals().values()
    assert tally.run.count == 2
    assert close([tally.run.quantile(q) for q in (0.5, 0.99)], [0.4, 3.0])


# The percentiles ``Queue.statistics`` reads back from the database stay within the run times
# observed (one task: exactly its run time), on SQLite, MariaDB and PostgreSQL.


def test_the_percentiles_of_one_run_are_its_run_time(queue, clock):
    queue.submit("a", "invoice")
    task = queue.poll(alive_time=60)
    clock.advance(0.3)
    task.finish()
    [tally] = queue.statistics(roll_up=False).totals().values()
    run = tally.run.summary()
    assert (run["count"], run["p50"], run["p95"], run["p99"]) == (
        1,
        pytest.approx(0.3),
        pytest.approx(0.3),
        pytest.approx(0.3),
    )


def test_the_percentiles_of_several_runs_never_exceed_the_longest(queue, clock):
    ran = []  # the run times as the clock tells them (its seconds near 1.7e9 are 2.4e-7 apart)
    for i, seconds in enumerate([0.3, 0.4, 0.45]):  # one bucket of the distribution: (0.25, 0.5]
        queue.submit(f"t{i}", "invoice")
        task = queue.poll(alive_time=60)
        started = clock.now()
        ran.append(clock.advance(seconds) - started)
        task.finish()
    queue.roll_up_stats()
    [tally] = queue.statistics().totals().values()
    run = tally.run.summary()
    assert min(ran) - 1e-9 <= run["p50"] <= run["p95"] <= run["p99"] <= max(ran) + 1e-9


# Statistics reads at bucket boundaries miss nothing; hand-edited statistics rows are
# CorruptRowErrors naming the row; hostile filters are ValidationErrors or mere filters.


GAP = 60.0


def _one_task(q, clock, key="a"):
    q.submit(key, "t")
    clock.advance(2)
    q.poll(alive_time=60).finish()


def test_a_bad_count_names_its_row(queue, clock):
    """CorruptRowError names the row (span, start, queue, type) for a bad distribution; a bad
    count should name it the same way, so that an operator can 'delete it'."""
    _one_task(queue, clock)
    clock.advance(GAP + 1)
    queue.roll_up_stats()
    s = queue.store.stats_t
    queue.db.run(lambda c: c.execute(sa.update(s).where(s.c.span == MINUTE).values(started=-3)))
    with pytest.raises(CorruptRowError) as err:
        queue.statistics(since=clock.now() - 3600, roll_up=False)
    text = str(err.value)
    assert "queue 'default'" in text and "type 't'" in text and "span 60" in text, text


def test_a_huge_count_is_a_corrupt_row_not_a_raw_error(queue, clock):
    """A hand-edited count at the top of BIGINT: the next roll-up adds to it. Expected a
    CorruptRowError naming the row, never a raw OverflowError (SQLite) and nothing
    written half-way."""
    _one_task(queue, clock)
    clock.advance(GAP + 1)
    queue.roll_up_stats()
    s = queue.store.stats_t
    queue.db.run(lambda c: c.execute(sa.update(s).values(started=2**63 - 1)))
    _one_task(queue, clock, "b")
    clock.advance(GAP + 1)
    with pytest.raises(CorruptRowError):
        queue.roll_up_stats()


@pytest.mark.parametrize(
    "bad",
    [
        {"since": True},
        {"until": False},
        {"since": float("inf")},
        {"since": 10**400},
        {"since": dt.datetime(2024, 1, 1)},
        {"since": dt.datetime(1, 1, 1, tzinfo=dt.UTC)},
        {"queue": "a\udcff"},
        {"type": "t\udcff"},
        {"type": "' OR 1=1 --\udc80"},
        {"queue": "x" * 10_000},
        {"type": b"bytes"},
        {"queue": 5},
        {"now": float("nan")},
        {"now": -1.0},
        {"until": "now"},
    ],
)
def test_hostile_filters_are_validation_errors(queue, bad):
    with pytest.raises(ValidationError):
        queue.statistics(**bad)


def test_injection_strings_are_just_filters(queue, clock):
    _one_task(queue, clock)
    clock.advance(GAP + 1)
    st = queue.statistics(since=clock.now() - 3600, type="t' OR '1'='1")
    assert st.buckets == ()


def test_a_read_of_exactly_two_days_after_a_prune_misses_nothing(queue, clock):
    """A read reaching back exactly MINUTE_KEEP is answered from minute buckets, but the prune
    deletes every minute bucket that *starts* before now - MINUTE_KEEP: the bucket holding
    `since` is gone while part of it lies inside the read."""
    minute = math.floor(clock.now() / 60) * 60 + 60
    clock.set(minute + 50)  # the task's events fall 50 s into a minute
    _one_task(queue, clock)  # claimed and finished at minute + 52
    clock.advance(GAP + 1)
    queue.roll_up_stats()
    clock.set(minute + 52 + MINUTE_KEEP - 5)
    queue.prune_stats()  # a worker's cleanup
    since = clock.now() - MINUTE_KEEP  # minute + 47: before the events
    st = queue.statistics(since=since, roll_up=False)
    assert st.span == HOUR  # two days back: its first minute may be pruned, so hours answer
    totals = st.totals()
    assert ("default", "t") in totals, "the events at since+5s are missing from the read"


def test_minute_hour_and_all_time_agree_and_percentiles_are_in_bounds(queue, clock):
    import random

    rng = random.Random(7)
    for i in range(60):
        queue.submit(f"k{i}", "t")
        clock.advance(rng.choice([0.0005, 0.3, 2.0, 7.0, 61.0, 400.0]))
        task = queue.poll(alive_time=100000)
        clock.advance(rng.choice([0.0, 0.001, 0.0025, 1.0, 2.5, 99.0]))
        (task.finish if i % 3 else task.fail)()
    clock.advance(GAP + 1)
    queue.roll_up_stats()
    start = clock.now() - 2 * 86400 + 10
    by_min = queue.statistics(since=start, roll_up=False).totals()[("default", "t")]
    by_hour = queue.statistics(since=clock.now() - 3 * 86400, roll_up=False).totals()[("default", "t")]
    [all_time] = queue.stats_totals()
    for a, b in ((by_min, by_hour), (by_min, all_time.tally)):
        assert (a.started, a.succeeded, a.failed) == (b.started, b.succeeded, b.failed) == (60, 40, 20)
        assert a.wait.counts == b.wait.counts and a.run.counts == b.run.counts
        assert a.wait.total == pytest.approx(b.wait.total) and a.run.total == pytest.approx(b.run.total)
    for d in (by_min.wait, by_min.run):
        for q in (0.5, 0.95, 0.99):
            v = d.quantile(q)
            cum, i = 0, 0
            while cum + d.counts[i] < q * d.count:
                cum += d.counts[i]
                i += 1
            low = BOUNDS[i - 1] if i else 0.0
            high = BOUNDS[i] if i < len(BOUNDS) else math.inf
            assert low <= v <= high, (q, v, low, high)


def test_until_in_the_past_and_since_on_a_minute(queue, clock):
    minute = math.floor(clock.now() / 60) * 60 + 60
    clock.set(minute + 10)
    _one_task(queue, clock, "a")  # events at minute + 12
    clock.set(minute + 70)
    _one_task(queue, clock, "b")  # events at minute + 72
    clock.advance(GAP + 1)
    queue.roll_up_stats()
    only_b = queue.statistics(since=minute + 60, roll_up=False).totals()[("default", "t")]
    assert only_b.started == 1
    only_a = queue.statistics(since=minute, until=minute + 60, roll_up=False).totals()[("default", "t")]
    assert only_a.started == 1
    assert queue.statistics(since=minute - 600, until=minute, roll_up=False).buckets == ()
    assert queue.statistics(since=minute, until=minute + 3600 * 2, roll_up=False).span == MINUTE
    old = queue.statistics(since=minute - 3 * 86400, roll_up=False)
    assert old.span == HOUR and old.totals()[("default", "t")].started == 2
