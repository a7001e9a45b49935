"""perfectsched.rows: what a due schedule row does, decided without a database."""

from __future__ import annotations

import pytest

from perfectsched import rows
from queue_core.validate import check_name, check_time

H = 3600
T0 = 1_700_000_000 - 1_700_000_000 % 86400
ROW = {"key": "s", "type": "t", "cron": "0 * * * *", "timezone": "UTC", "delay": 0, "catchup": "all", "dst": "vixie",
       "data": '{"a": 1}', "next_time": T0, "next_run_time": float(T0)}
OPTS = {"grace": 60.0, "max_data_size": 1000}


def new_task(key, type, data, run_at):
    """What Transaction.new_task checks, without a queue."""
    check_name(key, "task key")
    check_name(type, "task type")
    return key, type, data, check_time(run_at, "run_at")


def test_a_healthy_row_fires_its_due_occurrences_and_advances():
    plan = rows.tick_plan(ROW, T0 + 2 * H + 5, new_task=new_task, **OPTS)
    assert plan == rows.Fire(("s", T0, T0 + 3 * H, T0 + 3 * H),
                             [(f"s.{T0 + i * H}", "t", {"a": 1}, T0 + i * H) for i in range(3)])
    assert rows.poll_plan(ROW, T0 + 5, **OPTS) == rows.Lease(ROW, T0)
    skipped = rows.poll_plan({**ROW, "catchup": "skip"}, T0 + 2 * H + 600, **OPTS)
    assert skipped == rows.Fire(("s", T0, T0 + 3 * H, T0 + 3 * H), [])


@pytest.mark.parametrize("column, value, reason", [
    ("timezone", "Mars/Olympus_Mons", "invalid timezone 'Mars/Olympus_Mons': unknown IANA zone"),
    ("cron", "0 0 1 13 *", "invalid cron '0 0 1 13 *'"),
    ("delay", "3600", "delay must be whole seconds"),  # a text SQLite's type affinity let through
    ("next_time", T0 + 0.5, "next_time 1699920000.5 is not whole seconds"),
    ("next_time", 10**12, "out of the supported range"),  # no occurrence computable after it
    ("data", 123, "TypeError: the JSON object must be str"),
    ("data", '{"a": "' + "x" * 2000 + '"}', "max_data_size"),
])
def test_a_row_that_cannot_be_computed_is_set_aside_with_the_reason(column, value, reason):
    row = {**ROW, column: value}
    for plan in (rows.tick_plan(row, T0 + 5, new_task=new_task, **OPTS), rows.poll_plan(row, T0 + 5, **OPTS)):
        assert isinstance(plan, rows.SetAside) and (plan.key, plan.expected) == ("s", row["next_time"])
        assert reason in plan.reason, plan.reason


def test_a_task_the_queue_refuses_sets_the_row_aside_and_the_reason_is_one_bounded_line():
    def refuse(**_):
        raise ValueError("refused\nby the queue " + "x" * 5000)

    plan = rows.tick_plan(ROW, T0 + 5, new_task=refuse, **OPTS)
    assert plan.reason.startswith("ValueError: refused by the queue x") and len(plan.reason) == rows.MAX_REASON
    assert rows.tick_plan(ROW, T0 - 5, new_task=refuse, **OPTS).tasks == []  # nothing due: no task to refuse
