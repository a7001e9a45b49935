"""The ScheduleStore protocol's reads and the lease operations a scheduler's poll uses, on SQLite,
MariaDB and PostgreSQL alike (the other transitions of a schedule: test_store_transitions.py)."""

from __future__ import annotations

import pytest
from store_support import in_tx

from queue_core.errors import CorruptRowError

T0 = 1_699_999_200.0  # a whole hour
M = 60


def hourly_and_minutely(sched) -> None:
    sched.add("hourly", "t", cron="0 * * * *", now=T0 - 1)  # due at T0
    sched.add("minutely", "t", cron="* * * * *", now=T0 - 1)


def test_schedules_are_listed_next_due_first_and_read_by_key(sched):
    hourly_and_minutely(sched)
    sched.add("later", "t", cron="30 * * * *", now=T0 - 1)
    s = sched.store
    assert [r["key"] for r in s.schedule_list()] == ["hourly", "minutely", "later"]
    assert s.schedule_get("later")["cron"] == "30 * * * *"
    assert s.schedule_get("absent") is None
    assert s.schedule_next_due() == ("hourly", T0, int(T0), "UTC")
    assert s.schedule_next_due_time() == T0
    assert s.schedule_count_due(T0) == 2
    assert in_tx(sched, lambda c: s.schedule_lock(c, "later"))["key"] == "later"
    assert in_tx(sched, lambda c: s.schedule_lock(c, "absent")) is None


def test_a_store_without_schedules_has_no_next_due(sched):
    assert (sched.store.schedule_next_due(), sched.store.schedule_next_due_time(), sched.store.schedule_list()) == (
        None,
        None,
        [],
    )


def test_the_due_schedules_are_locked_up_to_a_limit_and_set_aside_ones_never(sched):
    hourly_and_minutely(sched)
    s = sched.store
    assert sorted(r["key"] for r in in_tx(sched, lambda c: s.schedule_due(c, T0, 10))) == ["hourly", "minutely"]
    assert len(in_tx(sched, lambda c: s.schedule_due(c, T0, 1))) == 1
    assert in_tx(sched, lambda c: s.schedule_due(c, T0 - 1, 10)) == []
    assert in_tx(sched, lambda c: s.schedule_set_aside(c, "hourly", int(T0), "why", T0)) is True
    assert [r["key"] for r in in_tx(sched, lambda c: s.schedule_due(c, T0, 10))] == ["minutely"]


def test_a_poll_s_lease_is_found_by_its_token_and_given_back_by_release_or_retry(sched):
    hourly_and_minutely(sched)
    s = sched.store
    token = s.schedule_token()
    assert isinstance(token, int) and token != s.schedule_token()
    assert in_tx(sched, lambda c: s.schedule_lease(c, "minutely", int(T0), int(T0), T0, T0 + 30, token)) is True
    assert in_tx(sched, lambda c: s.schedule_leased_under(c, token, T0 + 30))["key"] == "minutely"
    assert in_tx(sched, lambda c: s.schedule_leased_under(c, token + 1, T0 + 30)) is None
    assert in_tx(sched, lambda c: s.schedule_retry(c, "minutely", token + 1, T0 + 5)) is False  # not the holder
    assert in_tx(sched, lambda c: s.schedule_retry(c, "minutely", token, T0 + 5)) is True
    row = s.schedule_get("minutely")
    assert (row["leased"], row["timeout"]) == (0, T0 + 5)
    assert in_tx(sched, lambda c: s.schedule_lease(c, "minutely", int(T0), int(T0), T0 + 5, T0 + 35, token)) is True
    assert in_tx(sched, lambda c: s.schedule_release(c, "minutely", token, T0 + 6)) is True
    assert (s.schedule_get("minutely")["leased"], s.schedule_get("minutely")["timeout"]) == (0, T0 + 6)
    assert in_tx(sched, lambda c: s.schedule_release(c, "minutely", token, T0 + 7)) is False  # released already


def test_a_schedule_is_deleted_once(sched):
    hourly_and_minutely(sched)
    s = sched.store
    assert in_tx(sched, lambda c: s.schedule_delete(c, "hourly")) is True
    assert in_tx(sched, lambda c: s.schedule_delete(c, "hourly")) is False
    assert [r["key"] for r in s.schedule_list()] == ["minutely"]


def test_a_row_edited_into_a_value_perfectsched_never_writes_is_named_corrupt(sched):
    hourly_and_minutely(sched)
    s = sched.store
    row = s.schedule_get("hourly")
    assert s.schedule_check(row) == row
    with pytest.raises(CorruptRowError, match="hourly"):
        s.schedule_check({**row, "timezone": "Mars/Olympus_Mons"})
