"""Bugs found by the hostile-input tests in code this suite does not own (queue_core/api/queue.py,
queue_core/clock.py, perfectsched/scheduler.py, pqflow/decider.py). Each test states the
contract and is a strict xfail until the fix lands; the diagnosis and the proposed patch are in
each reason below."""

from __future__ import annotations

import sys

import pytest
from hostile_support import (  # noqa: F401 - fixtures
    Snapshot,
    shared_queue_fixture,
    shared_tables_fixture,
)

import perfectsched
import pqflow
import queue_core
from queue_core import TaskError, ValidationError
from queue_core.api.app import make_runner

T0 = 1_700_000_000.0


@pytest.fixture
def sq(shared_queue):
    return shared_queue


@pytest.fixture
def ssnap(shared_queue, db_url):
    s = Snapshot(db_url, shared_queue.table)
    yield s
    s.close()


def _key(q, prefix):
    n = getattr(q, "_bug_counter", 0) + 1
    q._bug_counter = n
    return f"{prefix}{n}"


# -- numbers ---------------------------------------------------------------------------------------
def test_huge_integers_are_refused_with_validation_error(sq, ssnap):
    before = ssnap()
    calls = {
        "run_at": lambda: sq.submit(_key(sq, "big-"), "t", run_at=2**2000, now=T0),
        "priority": lambda: sq.submit(_key(sq, "big-"), "t", priority=10**5000, now=T0),
        "max_running": lambda: sq.submit(_key(sq, "big-"), "t", user="u", max_running=10**5000, now=T0),
        "alive_time": lambda: sq.poll(alive_time=2**2000, now=T0),
        "next_time (perfectsched add)": lambda: queue_core.api.queue.check_time(2**2000, "next_time"),
    }
    failures = {}
    for what, call in calls.items():
        try:
            call()
        except ValidationError:
            pass
        except BaseException as exc:  # noqa: BLE001 - that is the bug
            failures[what] = type(exc).__name__
    assert failures == {}
    assert ssnap() == before


@pytest.mark.parametrize("now", [float("nan"), float("inf"), -1.0])
def test_now_is_validated_like_every_other_time(sq, ssnap, now):
    before = ssnap()
    with pytest.raises(ValidationError):
        sq.submit(_key(sq, "now-"), "t", now=now)
    assert ssnap() == before


def test_backoff_of_a_task_that_failed_very_often(sq):
    sq.submit(_key(sq, "often-"), "t", now=T0, priority=2**31 - 1)
    task = sq.poll(now=T0)
    task.attempts = 1100  # what the row holds after 1100 acquisitions
    assert task.retry_or_fail(RuntimeError("again"), now=T0) == "retry"
    assert task.run_at <= T0 + sq.config["max_retry_wait"] * 1.2


# -- task data -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "data",
    [{1: "a", "1": "b"}, {True: 1}, {None: 0}, {"x": {2.5: "y"}}],
    ids=["int-collides", "bool", "none", "nested-float"],
)
def test_data_with_non_string_keys_is_refused(sq, ssnap, data):
    before = ssnap()
    with pytest.raises(ValidationError):
        sq.submit(_key(sq, "keys-"), "t", data, now=T0)
    assert ssnap() == before


def _deeper(frames: int, fn):
    return fn() if frames == 0 else _deeper(frames - 1, fn)


def _deepest_accepted(q) -> int:
    """The deepest nesting ``q.submit`` accepts when called from the caller's stack depth."""
    lo, hi = 1, 5000
    while lo < hi:
        mid = (lo + hi + 1) // 2
        data: dict = {}
        for _ in range(mid):
            data = {"a": data}
        try:
            q._new_task("probe", "t", data, now=T0)  # what submit runs, at the same depth
            lo = mid
        except ValidationError:
            hi = mid - 1
    return lo


def test_deeply_nested_data_is_refused_or_stays_readable(sq):
    depth = _deepest_accepted(sq)
    data: dict = {}
    for _ in range(depth):
        data = {"a": data}
    key = _key(sq, "deep-")
    try:
        sq.submit(key, "t", data, now=T0)
    except ValidationError:
        return  # refused: fine
    _deeper(60, lambda: sq[key].metadata())  # what a worker or the CLI does, a few frames deeper


# -- error texts -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "error",
    ["name \udcff.txt", RuntimeError("cannot read b\udcffd.csv"), "BAD_STR"],
    ids=["surrogate-text", "surrogate-exception", "broken-str"],
)
def test_any_error_can_be_recorded(sq, error):
    class BrokenStr(Exception):
        def __str__(self):
            raise RuntimeError("no text for you")

    if error == "BAD_STR":
        error = BrokenStr()
    sq.submit(_key(sq, "err-"), "t", now=T0, priority=2**31 - 1)
    task = sq.poll(now=T0)
    task.fail(error, now=T0)
    assert sq[task.key].metadata().outcome == "failure"


def test_long_non_ascii_error_is_stored(sq, backend, request):
    """MariaDB's TEXT holds 65,535 bytes; _error_text cuts at 65,000 characters."""
    sq.submit(_key(sq, "long-"), "t", now=T0, priority=2**31 - 1)
    task = sq.poll(now=T0)
    task.fail("é" * 40000, now=T0)
    assert sq[task.key].metadata().error.startswith("é" * 1000)


# -- lookups by hostile keys -------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["\ud800", "a\x00b"], ids=["surrogate", "nul"])
def test_lookups_by_invalid_keys_raise_validation_or_not_found(db_url, table_name, backend, key, request):
    sched = perfectsched.open(db_url, table_name + "_s", table_name)
    sched.init()
    failures = {}
    try:
        for what, call in {
            "Scheduler.modify": lambda: sched.modify(key, delay=5),
            "pqflow.get_run": lambda: pqflow.get_run(key, queue=sched.queue),
            "cancel_run": lambda: pqflow.cancel_run(sched.queue, key),
            "retry_run": lambda: pqflow.retry_run(sched.queue, key),
        }.items():
            try:
                call()
            except (ValidationError, queue_core.NotFoundError, pqflow.UnknownRunError):
                pass
            except BaseException as exc:  # noqa: BLE001
                failures[what] = type(exc).__name__
    finally:
        sched.close()
        if backend != "sqlite":
            from conftest import drop_tables

            drop_tables(db_url, table_name, table_name + "_s")
    assert failures == {}


# -- pqflow ------------------------------------------------------------------------------------------
LONG = pqflow.Workflow("hostile_long_ids", retries=0, retry_wait=0)


@LONG.step()
def a_step_with_a_name(ctx):
    return 1


class LongDecider(pqflow.Decider):
    workflows = [LONG]


def test_a_run_id_too_long_for_its_step_keys_is_refused_or_fails(sq):
    run_id = "r" * 240
    try:
        LONG.start(run_id, {}, queue=sq)
    except ValidationError:
        return
    task = sq.poll(now=sq.clock.now())
    try:
        make_runner(LongDecider, task).run()
    except TaskError:
        pass
    assert pqflow.get_run(run_id, queue=sq).status != "running"


def test_why_of_an_unknown_step_is_a_flow_error(sq):
    run_id = _key(sq, "why-")
    LONG.start(run_id, {}, queue=sq)
    with pytest.raises(pqflow.FlowError):
        pqflow.get_run(run_id, queue=sq).why("no_such_step")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


# -- configuration and URLs ----------------------------------------------------------------------
def test_a_config_file_that_is_not_utf8_is_a_config_error(tmp_path):
    from queue_core import config

    path = tmp_path / "latin1.toml"
    path.write_bytes("[development]\ntable = 'tâches'\n".encode("latin-1"))
    with pytest.raises(queue_core.ConfigError):
        config.load_file(str(path), "development")


def test_an_unknown_driver_option_in_the_url_is_a_config_error():
    q = queue_core.open("mysql+pymysql://u:pw@127.0.0.1:1/x?sslmode=require", "t", max_retry_count=0)
    try:
        with pytest.raises((queue_core.ConfigError, queue_core.DatabaseError)):
            list(q.list())
    finally:
        q.close()
