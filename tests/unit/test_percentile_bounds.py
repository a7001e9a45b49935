"""Percentiles of the statistics never leave the range of what was observed: never above the
largest value nor below the smallest, whatever the sample, and exact for a single value (or
values all alike), from the counts per bucket and the sum the statistics keep."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_core.rules.statistics import Distribution, seconds_counted

QS = (0.0, 0.01, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0)
#: the sums are of floats: a bound derived from them may be off by rounding, never more
SLACK = 1e-9


def distribution(values) -> Distribution:
    d = Distribution()
    for v in values:
        d.add(v)
    return d


@given(st.lists(st.floats(min_value=0, max_value=2e5, allow_nan=False), min_size=1, max_size=60))
def test_percentiles_stay_between_the_smallest_and_the_largest_value(values):
    d = distribution(values)
    counted = [seconds_counted(v) for v in values]
    low, high = min(counted), max(counted)
    found = [d.quantile(q) for q in QS]
    assert found == sorted(found)
    for q, p in zip(QS, found, strict=True):
        assert low - SLACK * max(1.0, low) <= p <= high + SLACK * max(1.0, high), (q, p, low, high)


@pytest.mark.parametrize("value", [0.0, 0.0003, 0.3, 2.0, 59.0, 4000.0, 1e6])
def test_one_value_is_every_percentile(value):
    d = distribution([value])
    assert [d.quantile(q) for q in QS] == [value] * len(QS)


@pytest.mark.parametrize("value", [0.3, 7.0, 1e6])
def test_values_all_alike_are_every_percentile(value):
    d = distribution([value] * 5)
    assert all(d.quantile(q) == pytest.approx(value) for q in QS)


def test_a_long_tail_above_the_bounds_is_answered_within_it():
    d = distribution([0.3] * 99 + [100_000.0])
    assert d.quantile(0.5) <= 0.5 and d.quantile(1.0) <= 100_000.0
