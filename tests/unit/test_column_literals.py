"""MySQL's batch of rows rendered a column at a time (``store/mysql.py``: ``rendered_values``,
``column_literals``) must be, text for text, the rows rendered one value at a time by
``sql_literal`` (the rule checked against bound parameters on a real server in
tests/integration/test_mysql_literals_write_what_bound_parameters_write.py), whatever
the columns hold: one type or mixed, repeated or not, zeros of both signs, values it refuses."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queue_core.store.mysql import column_literals, rendered_values, sql_literal

VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 1.5, 1e-320, 2.0**-1074, 1700000000.25]),
    st.text(max_size=12),
    st.sampled_from(["default", "noop", "host:1:abc", "\udcff", "'", "\\"]),
)


def one_by_one(rows):
    return [f"({','.join(map(sql_literal, r))})" for r in rows]


def _columns_of_one_kind(kind):
    return st.lists(st.lists(kind, min_size=3, max_size=3), min_size=1, max_size=30)


ROWS = st.integers(min_value=1, max_value=6).flatmap(
    lambda width: st.lists(st.lists(VALUES, min_size=width, max_size=width), max_size=40)
)


@settings(max_examples=300, deadline=None)
@given(ROWS)
def test_mixed_columns_render_as_one_value_at_a_time(rows):
    assert rendered_values(rows) == one_by_one(rows)


@settings(max_examples=200, deadline=None)
@given(_columns_of_one_kind(st.sampled_from([0.0, -0.0, 2.5, 1700000000.125])))
def test_repeated_floats_and_both_zeros_keep_their_own_literals(rows):
    assert rendered_values(rows) == one_by_one(rows)


@settings(max_examples=200, deadline=None)
@given(_columns_of_one_kind(st.sampled_from(["a", "b", "\udcff", "é"])) | _columns_of_one_kind(st.integers()))
def test_columns_of_one_type_render_as_one_value_at_a_time(rows):
    assert rendered_values(rows) == one_by_one(rows)


def test_a_repeated_zero_column_keeps_each_sign():
    assert column_literals([0.0, -0.0, 0.0, 0.0, -0.0]) == ["0.0e0", "-0.0e0", "0.0e0", "0.0e0", "-0.0e0"]


def test_a_repeated_time_is_rendered_once_and_the_same():
    assert column_literals([1700000001.5] * 4) == ["1700000001.5e0"] * 4


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("repeats", [1, 4])
def test_a_column_holding_what_mysql_has_no_literal_for_is_refused(bad, repeats):
    with pytest.raises(ValueError):
        column_literals([bad] * repeats)
    with pytest.raises(ValueError):
        column_literals([1.0] * repeats + [bad])


def test_a_value_of_a_type_it_cannot_write_is_refused_in_any_column():
    with pytest.raises(TypeError):
        column_literals([1.0, b"bytes"])
    with pytest.raises(TypeError):
        column_literals([object()] * 3)


def test_rows_of_different_lengths_are_refused():
    with pytest.raises(ValueError):
        rendered_values([(1, 2), (1,)])


def test_no_rows_render_as_none():
    assert rendered_values([]) == []
