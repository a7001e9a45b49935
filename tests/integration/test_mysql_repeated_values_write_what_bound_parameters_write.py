"""MySQL's ``insert_rows`` renders a batch a column at a time (``store/mysql.py``: repeated
strings and repeated times rendered once, numbers by map). What lands in the table must be, bit
for bit, what a bound-parameter INSERT of the same rows writes; the batches here repeat their
values (the paths that render a repeated value once), where the rows of
test_mysql_literals_write_what_bound_parameters_write.py are mostly distinct."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from event_checks import bits
from test_mysql_literals_write_what_bound_parameters_write import _max_id, _written

from queue_core.store.events import COLUMNS

T0 = 1_700_000_000.0


def _batches():
    keys = ["k", "k\udcff\udcfe", "'", "\\", "%s", "k"]  # (key: VARBINARY, any bytes)
    out = {}
    # a batch as a settle writes it: one time, one queue, one owner; zeros of both signs in a
    # repeated column; a column of ints beside one of floats; bools beside ints
    out["settle"] = [
        dict(
            zip(
                COLUMNS,
                (
                    i,
                    keys[i % len(keys)],
                    "default",
                    "noop",
                    "finished",
                    T0 + 0.125,
                    1,
                    "host:1",
                    "success",
                    None,
                    [0.0, -0.0][i % 2],
                    0.25,
                    None,
                    [0, False, 1, True][i % 4],
                    None,
                ),
                strict=True,
            )
        )
        for i in range(1, 41)
    ]
    out["int_times"] = [  # now= given as an int: a column of ints into a DOUBLE
        dict(
            zip(
                COLUMNS,
                (i, "k", "q", "t", "claimed", 1_700_000_000, 1, "o", None, None, 0, 1, 1_700_000_000, 1, None),
                strict=True,
            )
        )
        for i in range(1, 11)
    ]
    out["mixed_time"] = [  # one column of ints and floats, floats repeated
        dict(
            zip(
                COLUMNS,
                (
                    i,
                    "k",
                    "q",
                    "t",
                    "claimed",
                    [T0, 1_700_000_000][i % 2],
                    1,
                    "o",
                    None,
                    None,
                    [-0.0, 0.0, 5e-324, 5e-324][i % 4],
                    2.0**-1074,
                    [None, -0.0][i % 2],
                    0,
                    None,
                ),
                strict=True,
            )
        )
        for i in range(1, 21)
    ]
    out["huge_repeats"] = [
        dict(
            zip(
                COLUMNS,
                (
                    2**63 - 1 - i % 2,
                    "k",
                    "q",
                    "t",
                    "x",
                    1.7976931348623157e308,
                    2**31 - 1,
                    "o",
                    "o",
                    "d" * 1000,
                    1e-320,
                    1e-320,
                    1e-320,
                    1,
                    "t" * 2000,
                ),
                strict=True,
            )
        )
        for i in range(1, 9)
    ]
    return out


@pytest.mark.parametrize("batch", sorted(_batches()))
def test_batches_of_repeated_values_write_what_bound_parameters_write(queue, backend, batch):
    if backend != "mysql":
        pytest.skip("MySQL's client-rendered insert")
    rows = _batches()[batch]
    e = queue.store.events_t
    before = _max_id(queue)
    queue.db.run(lambda c: queue.db.dialect.insert_rows(c, e, list(COLUMNS)[::-1], rows))
    mid = _max_id(queue)
    queue.db.run(lambda c: c.execute(sa.insert(e), rows))
    rendered, bound = _written(queue, before)[: len(rows)], _written(queue, mid)
    assert len(rendered) == len(bound) == len(rows)
    for r, b, want in zip(rendered, bound, rows, strict=True):
        for col in COLUMNS:
            if isinstance(want[col], float) or isinstance(b[col], float):
                assert bits(r[col]) == bits(b[col]), (col, want[col], r[col], b[col])
            else:
                assert r[col] == b[col] and type(r[col]) is type(b[col]), (col, want[col], r[col], b[col])
