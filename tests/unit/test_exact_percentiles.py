"""Percentiles by nearest rank of the values themselves, for a sample small enough to read
them: the smallest value with at least q·n values at or below it, given only when the values are
exactly those the buckets count (else the buckets' estimate)."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from queue_core.rules.statistics import (
    EXACT_MOST,
    HOUR,
    MINUTE,
    Distribution,
    exactly,
    nearest_rank,
    samples_of,
    tally_events,
)

values_st = st.lists(st.floats(min_value=0, max_value=2e5, allow_nan=False), min_size=1, max_size=80)
q_st = st.sampled_from([0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0]) | st.floats(min_value=0, max_value=1)


def distribution(values) -> Distribution:
    d = Distribution()
    for v in values:
        d.add(v)
    return d


@given(values_st, q_st)
def test_nearest_rank_is_the_smallest_value_with_q_of_them_at_or_below_it(values, q):
    n, p = len(values), nearest_rank(values, q)
    assert p in values
    at_or_below = sum(v <= p for v in values)
    below = sum(v < p for v in values)
    assert at_or_below >= q * n - 1e-9 * n  # enough at or below it
    assert below < max(1, math.ceil(q * n - 1e-9))  # and no smaller value has as many


def test_nearest_rank_of_ten_values():
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 10.0, 9.0, 8.0, 7.0, 6.0]
    assert [nearest_rank(values, q) for q in (0.0, 0.07, 0.5, 0.51, 0.95, 0.99, 1.0)] == [1, 1, 5, 6, 10, 10, 10]
    assert nearest_rank([], 0.5) is None


@given(values_st, q_st)
def test_a_distribution_with_its_values_answers_by_nearest_rank(values, q):
    d = exactly(distribution(values), values)
    assert d.quantile(q) == nearest_rank(values, q)
    assert (d.counts, d.total) == (distribution(values).counts, distribution(values).total)


@given(values_st.filter(lambda v: len(v) > 1), st.data())
def test_values_that_are_not_those_counted_leave_the_buckets_estimate(values, data):
    d = distribution(values)
    gone = data.draw(st.integers(0, len(values) - 1))
    fewer = values[:gone] + values[gone + 1 :]
    assert exactly(d, fewer).values is None
    assert exactly(d, [*values, values[0]]).values is None
    assert exactly(d, []).values is None


def test_more_values_than_read_exactly_leave_the_buckets_estimate():
    values = [0.1 * i for i in range(EXACT_MOST + 1)]
    assert exactly(distribution(values), values).values is None
    assert exactly(distribution(values[:-1]), values[:-1]).values is not None


def test_a_merged_distribution_forgets_its_values():
    d = exactly(distribution([0.1, 0.2]), [0.1, 0.2])
    d.merge(distribution([3.0]))
    assert d.values is None


events_st = st.lists(
    st.fixed_dictionaries(
        {
            "queue": st.sampled_from(["a", "b"]),
            "type": st.just("t"),
            "kind": st.sampled_from(["finished", "retried", "gave_up", "claimed", "released", "expired"]),
            "outcome": st.sampled_from([None, "success", "failure"]),
            "at": st.floats(min_value=0, max_value=4 * HOUR, allow_nan=False),
            "waited": st.none() | st.floats(min_value=-1, max_value=500, allow_nan=False),
            "ran": st.none() | st.floats(min_value=-1, max_value=900, allow_nan=False),
        }
    ),
    max_size=40,
)


@given(
    events_st,
    st.sampled_from([MINUTE, HOUR]),
    st.floats(min_value=0, max_value=4 * HOUR),
    st.floats(min_value=0, max_value=4 * HOUR),
)
def test_the_samples_of_a_read_are_the_values_its_buckets_count(events, span, since, until):
    tallies = tally_events(events)
    samples = samples_of(events, span, since, until)
    for key in {(e["queue"], e["type"]) for e in events}:
        window = [
            t
            for (s, start, q, ty), t in tallies.items()
            if s == span and (q, ty) == key and since - span < start < until
        ]
        waits, runs = samples[key]
        assert distribution(waits).counts == sum_counts([t.wait for t in window])
        assert distribution(runs).counts == sum_counts([t.run for t in window])


def sum_counts(dists: list[Distribution]) -> list[int]:
    total = Distribution()
    for d in dists:
        total.merge(d)
    return total.counts
