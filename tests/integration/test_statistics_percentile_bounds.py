"""The percentiles ``Queue.statistics`` reads back from the database stay within the run times
observed (one task: exactly its run time), on SQLite, MariaDB and PostgreSQL."""

from __future__ import annotations

import pytest


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
