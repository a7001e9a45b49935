"""perfectsched.rows: what a due schedule row does, decided without a database."""

from __future__ import annotations

import pytest

from perfectsched import rows
from queue_core.rules.validate import check_name, check_time

H = 3600
T0 = 1_700_000_000 - 1_700_000_000 % 86400
ROW = {
    "key": "s",
    "type": "t",
    "cron": "0 * * * *",
    "timezone": "UTC",
    "delay": 0,
    "catchup": "all",
    "dst": "vixie",
    "data": '{"a": 1}',
    "next_time": T0,
    "next_run_time": float(T0),
    "queue": "default",
}
OPTS = {"grace": 60.0, "max_data_size": 1000}


def new_task(key, type, data, run_at, queue, tags):
    """What Transaction.new_task checks, without a queue."""
    assert queue == "default" and tags == ()
    check_name(key, "task key")
    check_name(type, "task type")
    return key, type, data, check_time(run_at, "run_at")


def test_a_healthy_row_fires_its_due_occurrences_and_advances():
    plan = rows.tick_plan(ROW, T0 + 2 * H + 5, new_task=new_task, **OPTS)
    assert plan == rows.Fire(
        ("s", T0, T0 + 3 * H, T0 + 3 * H), [(f"s.{T0 + i * H}", "t", {"a": 1}, T0 + i * H) for i in range(3)]
    )
    assert rows.poll_plan(ROW, T0 + 5, **OPTS) == rows.Lease(ROW, T0)
    skipped = rows.poll_plan({**ROW, "catchup": "skip"}, T0 + 2 * H + 600, **OPTS)
    assert skipped == rows.Fire(("s", T0, T0 + 3 * H, T0 + 3 * H), [])


@pytest.mark.parametrize(
    "column, value, reason",
    [
        ("timezone", "Mars/Olympus_Mons", "invalid timezone 'Mars/Olympus_Mons': unknown IANA zone"),
        ("cron", "0 0 1 13 *", "invalid cron '0 0 1 13 *'"),
        ("delay", "3600", "delay must be whole seconds"),  # a text SQLite's type affinity let through
        ("next_time", T0 + 0.5, "next_time 1699920000.5 is not whole seconds"),
        ("next_time", 10**12, "out of the supported range"),  # no occurrence computable after it
        ("data", 123, "TypeError: the JSON object must be str"),
        ("data", '{"a": "' + "x" * 2000 + '"}', "max_data_size"),
    ],
)
def test_a_row_that_cannot_be_computed_is_set_aside_with_the_reason(column, value, reason):
    row = {**ROW, column: value}
    for plan in (rows.tick_plan(row, T0 + 5, new_task=new_task, **OPTS), rows.poll_plan(row, T0 + 5, **OPTS)):
        assert isinstance(plan, rows.SetAside) and (plan.key, plan.expected) == ("s", row["next_time"])
        assert reason in plan.reason, plan.reason


def test_a_task_the_queue_refuses_sets_the_row_aside_and_the_reason_is_one_bounded_line():
    def refuse(**_):
        raise ValueError("refused\nby the queue " + "x" * 5000)

    plan = rows.tick_plan(ROW, T0 + 5, new_task=refuse, **OPTS)
    assert plan.reason.startswith("ValueError: refused by the queue x")
    # cut to MAX_REASON bytes (within the digits of its count) and saying so (validate.cap_text)
    assert rows.MAX_REASON - 8 < len(plan.reason.encode()) <= rows.MAX_REASON and "\n" not in plan.reason
    assert plan.reason.endswith(" bytes more]")
    assert rows.tick_plan(ROW, T0 - 5, new_task=refuse, **OPTS).tasks == []  # nothing due: no task to refuse


@pytest.mark.parametrize(
    "column, value, reason",
    [
        ("leased", 7, "column leased: 7, not one of (0, 1)"),
        ("lease_token", -1, "column lease_token: -1, outside 1.."),
        ("timeout", float("nan"), "column timeout: nan, not a time pq writes"),
        ("created_at", 1e300, "column created_at: 1e+300, not a time pq writes"),
        ("cron", "* * * * *\n", "column cron: '* * * * *\\n', not a cron expression as perfectsched stores one"),
        ("data", "", "column data: '', not JSON"),
        ("error", 5, "column error: 5, not text"),
    ],
)
def test_a_value_only_the_store_s_check_refuses_sets_the_row_aside_naming_the_column(column, value, reason):
    """Every column of the row, not only those computing it reads: a value perfectsched
    never writes is a row edited by hand, set aside with the column's name."""
    whole = {
        **ROW,
        "leased": 0,
        "lease_token": None,
        "timeout": float(T0),
        "created_at": 1.0,
        "updated_at": 1.0,
        "error": None,
    }
    assert rows.problem(whole, OPTS["max_data_size"]) is None
    row = {**whole, column: value}
    for plan in (rows.tick_plan(row, T0 + 5, new_task=new_task, **OPTS), rows.poll_plan(row, T0 + 5, **OPTS)):
        assert isinstance(plan, rows.SetAside) and plan.reason.startswith(reason), plan.reason
        assert plan.reason.endswith("(perfectsched never writes that: edited by hand?)")
    assert rows.problem(row, OPTS["max_data_size"]) == plan.reason
