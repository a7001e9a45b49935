"""The pure core of the statistics: distributions, what each event counts, buckets, the horizon."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_core.rules import statistics
from queue_core.rules.attempt_events import starts_attempt
from queue_core.rules.statistics import (
    BOUNDS,
    Distribution,
    StatsRowError,
    counts_at_end,
    passed_over,
    tally_events,
    without,
)
from queue_core.store.schema import STATS_COUNTS


def _event(kind, at=100.0, *, outcome=None, waited=None, ran=None, queue="q", type_="t", id_=1):
    return {
        "id": id_,
        "kind": kind,
        "at": at,
        "queue": queue,
        "type": type_,
        "outcome": outcome,
        "waited": waited,
        "ran": ran,
    }


def test_the_table_and_the_core_name_the_same_counters():
    assert statistics.COUNTS == STATS_COUNTS


def test_each_event_counts_what_it_says():
    counting = [
        _event("finished", outcome="success", ran=2.0),
        _event("finished", outcome="failure", ran=0.2),
        _event("retried", ran=1.0),
        _event("gave_up", outcome="failure"),
        _event("cancelled", outcome="cancelled"),
        _event("force_finished", outcome="success"),
    ]
    silent = [
        _event("claimed", waited=None),
        _event("moved"),
        _event("released"),
        _event("finished", outcome="skipped"),
    ]  # a step that never ran
    assert all(counts_at_end(e) for e in counting)
    assert not any(counts_at_end(e) for e in [*silent, _event("claimed", waited=0.3)])  # a claim: its end counts it
    tally = tally_events([*counting, *silent])[(60, 60.0, "q", "t")]
    assert (tally.started, tally.succeeded, tally.failed, tally.cancelled, tally.retried) == (0, 2, 2, 1, 1)
    assert tally.wait.count == 0 and tally.run.count == 3
    assert tally.run.total == pytest.approx(3.2)


def test_an_attempt_is_counted_started_with_its_wait_by_the_event_that_ends_it():
    starting = [
        _event("finished", outcome="success", waited=0.3, ran=2.0),
        _event("retried", waited=1.0, ran=1.0),
        _event("released", waited=0.5, ran=0.1),
        _event("expired", waited=2.0, ran=30.0),
        _event("force_finished", outcome="success", waited=0.2, ran=1.0),
        _event("claimed", waited=0.3),
    ]  # a tracked task's claim: its end carries none
    not_starting = [
        _event("finished", outcome="success", ran=1.0),  # that end
        _event("finished", outcome="skipped"),  # never claimed: no wait
        _event("gave_up", outcome="failure", waited=1.0),
    ]  # its expiry counted it
    assert all(starts_attempt(e) for e in starting) and not any(starts_attempt(e) for e in not_starting)
    at = {"at": 10_000.0, "ran": None}  # every start in one minute, whatever the runs
    tally = tally_events([e | at for e in [*starting, *not_starting]])[(60, 9960.0, "q", "t")]
    assert tally.started == 6 and tally.wait.count == 6 and tally.wait.total == pytest.approx(4.3)


def test_every_event_lands_in_its_minute_its_hour_and_all_time():
    tallies = tally_events(
        [
            _event("cancelled", at=3661.5, outcome="cancelled"),
            _event("cancelled", at=3719.0, outcome="cancelled", queue="other"),
        ]
    )
    assert set(tallies) == {
        (60, 3660.0, "q", "t"),
        (3600, 3600.0, "q", "t"),
        (0, 0.0, "q", "t"),
        (60, 3660.0, "other", "t"),
        (3600, 3600.0, "other", "t"),
        (0, 0.0, "other", "t"),
    }
    assert all(t.cancelled == 1 for t in tallies.values())


def test_a_start_lands_in_the_minute_it_started_and_its_end_in_the_minute_it_ended():
    tallies = tally_events([_event("finished", at=3725.0, outcome="success", waited=1.0, ran=65.0)])
    started, ended = tallies[(60, 3660.0, "q", "t")], tallies[(60, 3720.0, "q", "t")]
    assert (started.started, started.succeeded, started.wait.count, started.run.count) == (1, 0, 1, 0)
    assert (ended.started, ended.succeeded, ended.wait.count, ended.run.count) == (0, 1, 0, 1)
    assert (tallies[(3600, 3600.0, "q", "t")].started, tallies[(3600, 3600.0, "q", "t")].succeeded) == (1, 1)


def test_events_that_count_nothing_make_no_bucket():
    assert tally_events([_event("moved"), _event("cancel_requested"), _event("adopted")]) == {}


def test_the_ids_a_read_passed_over_are_the_ranges_missing_between_what_it_found():
    assert passed_over(10, [11, 14, 15, 18]) == [(12, 13), (16, 17)]
    assert passed_over(10, []) == [] and passed_over(0, [1, 2, 3]) == []
    assert passed_over(0, [1_000_001]) == [(1, 1_000_000)]  # a million purged ids: one range


def test_ranges_less_the_ids_found_are_split_around_them():
    assert without([(1, 10)], [1, 5, 10]) == [(2, 4), (6, 9)]
    assert without([(1, 3), (7, 7)], [7, 2, 99]) == [(1, 1), (3, 3)]
    assert without([(5, 6)], []) == [(5, 6)]


def test_quantiles_interpolate_inside_their_bucket():
    d = Distribution()
    for _ in range(100):
        d.add(0.3)  # bucket (0.25, 0.5]
    assert 0.25 <= d.quantile(0.5) <= 0.5
    assert d.mean == pytest.approx(0.3)
    d.add(10**6)  # above the last bound: its lower bound is the answer
    assert d.quantile(1.0) == BOUNDS[-1]
    assert Distribution().quantile(0.5) is None and Distribution().mean is None


@given(st.lists(st.floats(min_value=0, max_value=2e5, allow_nan=False), min_size=1, max_size=200))
def test_quantiles_are_ordered_and_within_the_bounds_of_what_was_added(values):
    d = Distribution()
    for v in values:
        d.add(v)
    p50, p95, p99 = d.quantile(0.5), d.quantile(0.95), d.quantile(0.99)
    assert p50 <= p95 <= p99
    low = max([0.0, *[b for b in BOUNDS if b < min(values)]])
    assert low <= p50 and p99 <= max(max(values), BOUNDS[-1])
    assert d.count == len(values)


def test_distributions_add_up_exactly():
    a, b, both = Distribution(), Distribution(), Distribution()
    for i, v in enumerate([0.001, 0.5, 3.0, 99.0, 7200.0, 0.0]):
        (a if i % 2 else b).add(v)
        both.add(v)
    a.merge(b)
    assert a.counts == both.counts and a.total == pytest.approx(both.total)


def test_a_distribution_column_pq_never_writes_is_refused():
    good = Distribution()
    good.add(1.0)
    assert Distribution.from_columns(good.to_json(), 1.0).counts == good.counts
    for counts, total in (
        ("[1,2]", 0.0),
        ("not json", 0.0),
        (None, 0.0),
        ("[" + ",".join(["-1"] * 24) + "]", 0.0),
        ("[" + ",".join(["1.5"] * 24) + "]", 0.0),
        (good.to_json(), float("nan")),
        (good.to_json(), -1.0),
        (good.to_json(), "1"),
    ):
        with pytest.raises(StatsRowError):
            Distribution.from_columns(counts, total)


def test_reads_use_minutes_while_they_are_kept_then_hours():
    assert statistics.read_span(1000.0, 1000.0 + 86400) == statistics.MINUTE
    assert statistics.read_span(1000.0, 1000.0 + 2 * 86400) == statistics.HOUR  # its first minute may be pruned
    assert statistics.read_span(1000.0, 1000.0 + 3 * 86400) == statistics.HOUR
