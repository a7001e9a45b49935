"""``Queue.statistics`` answers the percentiles of a few tasks exactly, by nearest rank of their
wait and run times read from the events, while every event its buckets count is still there;
once the events are purged, from the buckets (never above the largest value), on SQLite,
MariaDB and PostgreSQL."""

from __future__ import annotations

import math

import pytest

from queue_core.rules.statistics import Distribution

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
