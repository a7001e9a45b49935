"""MySQL's rows rendered a column at a time (``store/mysql.py``:
``rendered_values``, ``column_literals``, ``_in_order``) must be, text for text, what rendering
each value one by one with ``sql_literal`` gives, for ANY rows; and ``insert_rows`` must take
rows as ``[r[c] for c in columns] for r in rows`` takes them."""

from __future__ import annotations

import math

import pytest

from queue_core.store.mysql import _in_order, column_literals, rendered_values, sql_literal


def one_by_one(rows):
    return [f"({','.join(map(sql_literal, r))})" for r in rows]


class Sub(str):
    pass


def test_rows_of_no_column_render_as_one_empty_tuple_each():
    """``INSERT INTO t () VALUES (),()`` is MySQL's insert of rows of defaults: one ``()`` a row.
    Rendered a column at a time, rows without a column vanish (zip of no column is empty)."""
    rows = [(), ()]
    assert rendered_values(rows) == one_by_one(rows) == ["()", "()"]


def test_values_in_order_of_no_column_are_empty_tuples():
    """What ``insert_rows`` took before (``[r[c] for c in columns]``) for no column: an empty
    row per row. ``operator.itemgetter()`` of no name raises TypeError instead."""
    assert _in_order([{"a": 1}, {"a": 2}], ()) == [(), ()]


@pytest.mark.parametrize(
    "column",
    [
        [True, 1, 1.0, 0, False, 0.0, -0.0],
        [-0.0] * 5 + [0.0] * 5,
        [0.0] * 9 + [-0.0],
        [1.5] * 10 + [-0.0],
        [2**64, 2**200, -(2**63) - 1, 0],
        ["a", "a", "\udcff", "\udcff", "é", "e\u0301", ""],
        [None] * 3,
        [None, 1.5, 1.5, 1.5, None],
        [1700000000] * 4 + [1700000000.0] * 4,
        [1e16, 1e16, 1e-7, 1e-7, 5e-324, 5e-324, 1.7976931348623157e308, 1.7976931348623157e308],
    ],
)
def test_columns_of_edge_values_render_as_one_by_one(column):
    rows = [(v, i) for i, v in enumerate(column)]
    assert rendered_values(rows) == one_by_one(rows)
    assert rendered_values([(v,) for v in column]) == one_by_one([(v,) for v in column])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_the_same_nan_object_repeated_is_refused_as_one_by_one(bad):
    column = [bad] * 6 + [1.0]
    with pytest.raises(ValueError):
        one_by_one([(v,) for v in column])
    with pytest.raises(ValueError):
        rendered_values([(v,) for v in column])


def test_str_subclasses_are_refused_as_one_by_one():
    for column in ([Sub("a")] * 3, ["a", Sub("a")], [Sub("a"), "a", "a", "a"]):
        with pytest.raises(TypeError):
            one_by_one([(v,) for v in column])
        with pytest.raises(TypeError):
            rendered_values([(v,) for v in column])


def test_generators_of_rows_and_of_values():
    rows = [(1, "a", 1.5), (2, "a", 1.5), (3, "b", -0.0)]
    assert rendered_values(iter(rows)) == one_by_one(rows)
    assert rendered_values(iter(r) for r in rows) == one_by_one(rows)


def test_in_order_follows_the_columns_and_refuses_a_missing_key():
    rows = [{"b": 2, "a": 1, "c": 3}, {"c": 6, "a": 4, "b": 5}]
    assert _in_order(rows, ("c", "a")) == [(3, 1), (6, 4)]
    assert _in_order(rows, ("b",)) == [(2,), (5,)]
    assert _in_order(iter(rows), ("a", "b", "c")) == [(1, 2, 3), (4, 5, 6)]
    with pytest.raises(KeyError):
        _in_order([{"a": 1}, {"b": 2}], ("a",))


def test_a_column_of_one_repeated_value_is_the_same_text_each_time():
    assert column_literals(["x"] * 3) == ["X'78'"] * 3
    assert column_literals([7] * 3) == ["7"] * 3
