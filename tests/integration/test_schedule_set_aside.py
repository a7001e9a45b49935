"""A schedule that cannot be computed is set aside; the others keep firing.

One schedule row that cannot be computed (a timezone this host's tzdata lacks, a row edited by
hand) used to abort the whole tick (or poll) transaction; batches are read in due order, so the
healthy schedules behind it never advanced. Now such a schedule is set aside with its error
recorded (``SqlScheduleStore.schedule_set_aside``), logged once, shown by ``list``, and never due again until
an operator modifies or resumes it. Database errors are not schedule errors: they set nothing
aside. Every case runs on SQLite, MariaDB and PostgreSQL with an injected ``now``.
"""

from __future__ import annotations

import logging

import pytest
import sqlalchemy as sa

import perfectsched
import queue_core

H = 3600
T0 = 1_700_000_000 - 1_700_000_000 % 86400  # a UTC midnight


def edit(sc, which, **values):
    """Change schedule ``which`` by hand, as an operator's SQL would (past every check of the library)."""
    t = sc.store.t
    sc.db.run(lambda c: c.execute(sa.update(t).where(t.c.key == which).values(**values)), what="hand edit")


def task_keys(sc):
    return sorted(m.key for m in sc.queue.list())


def aside_lines(caplog, key):
    return [r for r in caplog.records if "set aside" in r.getMessage() and key in r.getMessage()]


#: (column, the value it is edited to, a fragment of the error recorded): every column the
#: scheduler reads to compute a schedule
BROKEN = [
    ("cron", "not a cron", "invalid cron"),
    ("cron", "0 0 30 2 *", "never fires"),
    ("timezone", "Mars/Olympus_Mons", "unknown IANA zone"),
    ("timezone", "JST-9", "invalid timezone"),
    ("delay", -3600, "delay"),
    ("delay", 10**9, "delay"),
    ("next_time", -(10**12), "next_time"),
    ("next_run_time", -5.0, "next_run_time"),
    ("data", "{not json", "not valid JSON"),
    ("data", "[1, 2]", "JSON object"),
    ("type", "", "must not be empty"),
    ("catchup", "maybe", "catchup"),
    ("dst", "never", "dst"),
    ("key", "k" * 250, "240"),
]
IDS = [f"{c}={str(v)[:12]}" for c, v, _ in BROKEN]


def broken_and_healthy(sc, column, value) -> str:
    """A schedule due at T0 edited by hand, and a healthy one due right behind it (T0 + 1)."""
    sc.add("broken", "t", cron="0 * * * *", now=T0 - 1)
    sc.add("healthy", "t", cron="0 * * * *", delay=1, now=T0 - 1)
    edit(sc, "broken", **{column: value})
    return value if column == "key" else "broken"


def assert_set_aside(sc, key, reason):
    m = sc[key].metadata()
    assert m.status == "set_aside" and reason in m.error, (m.status, m.error)
    assert not m.leased


@pytest.mark.parametrize("column, value, reason", BROKEN, ids=IDS)
def test_tick_sets_aside_a_schedule_that_cannot_be_computed_and_the_others_fire(sched, caplog, column, value, reason):
    sched.options["tick_batch"] = 1  # batches in due order: the broken schedule's comes first
    key = broken_and_healthy(sched, column, value)
    with caplog.at_level(logging.INFO, logger="perfectsched"):
        assert sched.tick(now=T0 + 10) == 1
        assert sched.tick(now=T0 + H + 10) == 1  # the healthy one keeps firing; the broken one is not due
        assert sched.tick(now=T0 + 2 * H + 10) == 1
    assert task_keys(sched) == [f"healthy.{T0 + i * H}" for i in range(3)]
    assert_set_aside(sched, key, reason)
    assert sched.store.schedule_count_due(T0 + 99 * H) == 1  # the healthy one only
    (line,) = aside_lines(caplog, key)  # logged once, when it was set aside
    assert line.levelno == logging.ERROR and reason in line.getMessage()


@pytest.mark.parametrize("column, value, reason", BROKEN, ids=IDS)
def test_poll_sets_aside_a_schedule_that_cannot_be_computed_and_leases_the_next(sched, caplog, column, value, reason):
    key = broken_and_healthy(sched, column, value)
    with caplog.at_level(logging.INFO, logger="perfectsched"):
        task = sched.poll(alive_time=30, now=T0 + 10)
        assert (task.key, task.scheduled_time) == ("healthy", T0)
        task.finish(now=T0 + 11)
        assert sched.poll(now=T0 + 12) is None
        assert sched.poll(now=T0 + H + 10).key == "healthy"
    assert_set_aside(sched, key, reason)
    assert len(aside_lines(caplog, key)) == 1


def test_the_broken_and_the_healthy_schedules_of_one_batch(sched, caplog):
    """The default batch holds them all: every healthy one fires in the same tick."""
    edits = {"b-zone": {"timezone": "Mars/Olympus_Mons"}, "b-cron": {"cron": "61 * * * *"}, "b-data": {"data": "{"}}
    for i in range(3):
        sched.add(f"b{i}", "t", cron="0 * * * *", now=T0 - 1)
        sched.add(f"ok{i}", "t", cron="0 * * * *", now=T0 - 1)
    for i, (name, values) in enumerate(edits.items()):
        edit(sched, f"b{i}", key=name, **values)
    with caplog.at_level(logging.INFO, logger="perfectsched"):
        assert sched.tick(now=T0 + 5) == 3
        assert sched.tick(now=T0 + H + 5) == 3
    assert task_keys(sched) == sorted(f"ok{i}.{T0 + h * H}" for i in range(3) for h in range(2))
    assert {m.key: m.status for m in sched.list()} == {
        **{f"ok{i}": "active" for i in range(3)},
        **dict.fromkeys(edits, "set_aside"),
    }
    assert [len(aside_lines(caplog, name)) for name in edits] == [1, 1, 1]


def test_the_scheduler_lists_a_set_aside_schedule_with_its_error(sched):
    sched.add("zone", "t", cron="0 * * * *", now=T0 - 1)
    sched.add("data", "t", cron="0 * * * *", now=T0 - 1)
    sched.add("fine", "t", cron="0 * * * *", now=T0 - 1)
    edit(sched, "zone", timezone="Mars/Olympus_Mons")
    edit(sched, "data", data="{not json")
    listed = {m.key: m for m in sched.list()}  # a row that cannot be decoded does not hide the others
    assert listed["data"].data == {"value": "{not json"} and listed["data"].status == "active"
    sched.tick(now=T0)
    listed = {m.key: m for m in sched.list()}
    assert (listed["fine"].status, listed["fine"].error) == ("active", None)
    assert listed["zone"].status == "set_aside" and "invalid timezone 'Mars/Olympus_Mons'" in listed["zone"].error
    assert listed["zone"].to_dict()["error"] == listed["zone"].error
    assert listed["zone"].next_time == T0  # the occurrence it stopped at
    assert sched.queue.owner in listed["zone"].error  # which scheduler (host:pid) could not compute it


# -- bringing one back ---------------------------------------------------------------------------------
def set_aside(sc, key="s", catchup="all", **values):
    sc.add(key, "t", cron="0 * * * *", catchup=catchup, now=T0 - 1)
    edit(sc, key, **values)
    sc.tick(now=T0)
    assert sc[key].metadata().status == "set_aside"


def test_modify_brings_a_set_aside_schedule_back_from_now(sched):
    set_aside(sched, timezone="Mars/Olympus_Mons")
    before = sched.store.schedule_get("s")
    with pytest.raises(perfectsched.InvalidTimezoneError):  # the change leaves it broken: nothing written
        sched.modify("s", type="u", now=T0 + 3 * H + 5)
    assert sched.store.schedule_get("s") == before
    m = sched.modify("s", timezone="Asia/Tokyo", now=T0 + 3 * H + 5)
    assert (m.status, m.error, m.timezone, m.next_time) == ("active", None, "Asia/Tokyo", T0 + 4 * H)
    assert sched.tick(now=T0 + 4 * H) == 1
    assert task_keys(sched) == [f"s.{T0 + 4 * H}"]


def test_modify_of_what_broke_it_only_brings_it_back_from_now(sched):
    set_aside(sched, data="[1, 2]")
    m = sched.modify("s", data={"fixed": True}, now=T0 + 3 * H + 5)  # data only: still from now
    assert (m.status, m.error, m.data, m.next_time) == ("active", None, {"fixed": True}, T0 + 4 * H)


def test_resume_continues_from_the_occurrence_it_stopped_at(sched):
    set_aside(sched, timezone="Mars/Olympus_Mons")
    edit(sched, "s", timezone="UTC")  # the host got its tzdata: nothing to change in the schedule
    assert sched["s"].resume(now=T0 + 3 * H + 5) is True
    m = sched["s"].metadata()
    assert (m.status, m.error, m.next_time, m.timeout) == ("active", None, T0, T0)
    assert sched.tick(now=T0 + 3 * H + 5) == 4  # the catch-up policy (all) decides about the missed ones
    assert task_keys(sched) == sorted(f"s.{T0 + i * H}" for i in range(4))


def test_resume_refuses_a_schedule_still_broken_and_does_nothing_to_an_active_one(sched):
    set_aside(sched, cron="61 * * * *")
    before = sched.store.schedule_get("s")
    with pytest.raises(perfectsched.InvalidCronError, match="61"):
        sched["s"].resume(now=T0 + 5)
    assert sched.store.schedule_get("s") == before
    sched.add("fine", "t", cron="0 * * * *", now=T0 - 1)
    before = sched.store.schedule_get("fine")
    assert sched["fine"].resume(now=T0 + 5) is False
    assert sched.store.schedule_get("fine") == before
    with pytest.raises(perfectsched.IdempotentNotFoundError):
        sched["missing"].resume()


def test_a_holder_of_a_set_aside_schedule_is_told_why(sched):
    sched.add("s", "t", cron="0 * * * *", now=T0 - 1)
    a = sched.poll(alive_time=10, now=T0)
    edit(sched, "s", cron="61 * * * *")
    assert sched.poll(now=T0 + 11) is None  # its lease expired: set aside
    with pytest.raises(perfectsched.PreemptedError, match="set aside"):
        a.finish(now=T0 + 12)


# -- database errors are not schedule errors --------------------------------------------------------------
def failing(monkeypatch, obj, name, times):
    """Make ``obj.name`` raise a transient database error (a lost connection) ``times`` times."""
    real, calls = getattr(obj, name), []

    def fail(*args, **kwargs):
        calls.append(1)
        if len(calls) <= times:
            raise sa.exc.OperationalError("UPDATE", {}, Exception("connection lost"), connection_invalidated=True)
        return real(*args, **kwargs)

    monkeypatch.setattr(obj, name, fail)
    return calls


def test_a_database_error_sets_nothing_aside(sched, caplog, monkeypatch):
    broken_and_healthy(sched, "timezone", "Mars/Olympus_Mons")
    sched.db.max_retry_count = 0
    failing(monkeypatch, sched.store, "schedule_advance_many", times=1)
    with caplog.at_level(logging.INFO, logger="perfectsched"), pytest.raises(queue_core.DatabaseError):
        sched.tick(now=T0 + 10)
    assert {m.key: (m.status, m.error) for m in sched.list()} == {
        "broken": ("active", None),
        "healthy": ("active", None),
    }
    assert task_keys(sched) == [] and aside_lines(caplog, "broken") == []
    with caplog.at_level(logging.INFO, logger="perfectsched"):
        assert sched.tick(now=T0 + 10) == 1  # the database is back
    assert sched["broken"].metadata().status == "set_aside" and len(aside_lines(caplog, "broken")) == 1


def test_a_tick_retried_after_a_transient_error_logs_the_set_aside_once(sched, caplog, monkeypatch):
    broken_and_healthy(sched, "cron", "61 * * * *")
    calls = failing(monkeypatch, sched.store, "schedule_advance_many", times=1)
    with caplog.at_level(logging.INFO, logger="perfectsched"):
        assert sched.tick(now=T0 + 10) == 1  # its first attempt set it aside, then rolled back
    assert len(calls) == 3  # the batch failed, its retry committed, then the empty batch that ends the tick
    assert sched["broken"].metadata().status == "set_aside" and len(aside_lines(caplog, "broken")) == 1


# -- the column ---------------------------------------------------------------------------------------------
def test_init_upgrades_a_version_1_schedule_table(sched):
    """A schedule table of a release before set-aside schedules (no error column) is upgraded in
    place by init, its rows kept."""
    from conftest import downgrade

    sched.add("old", "t", cron="0 * * * *", data={"a": 1}, now=T0 - 1)
    store = sched.store
    downgrade(store, ["error", "queue", "tags"], 1)
    assert store.tables_version() == 1
    with pytest.raises(queue_core.SchemaError, match="run 'init' to upgrade it"):  # perfectsched run's probe
        sched.check_tables()
    sched.init()
    sched.check_tables()
    assert store.tables_version() == 4
    m = sched["old"].metadata()
    assert m.queue_name == "default" and m.tags == ()
    assert (m.data, m.status, m.error, m.next_time) == ({"a": 1}, "active", None, T0)
    edit(sched, "old", timezone="Mars/Olympus_Mons")
    assert sched.tick(now=T0) == 0 and sched["old"].metadata().status == "set_aside"
