"""Queue semantics conformance suite: runs on SQLite, MariaDB and PostgreSQL alike."""

from __future__ import annotations

import pytest

import queue_core
from queue_core import (
    AlreadyFinishedError,
    CancelRequestedError,
    IdempotentAlreadyExistsError,
    IdempotentAlreadyFinishedError,
    IdempotentError,
    NotFoundError,
    PreemptedError,
    ValidationError,
)
from queue_core.store.schema import SCHEMA_VERSION

T0 = 1_700_000_000


def test_submit_and_metadata(queue):
    task = queue.submit(
        "k1", "email", {"to": "a@example.com"}, user="alice", max_running=3, priority=2, max_attempts=4, now=T0
    )
    assert task.key == "k1"
    m = task.metadata(now=T0 + 1)
    assert (m.key, m.type, m.data, m.user, m.priority, m.max_running, m.max_attempts) == (
        "k1",
        "email",
        {"to": "a@example.com"},
        "alice",
        2,
        3,
        4,
    )
    assert m.status == "waiting" and m.outcome is None and m.attempts == 0
    assert m.created_at == T0 and m.run_at == T0 and m.error is None
    assert task.exists()


def test_duplicate_submit_is_idempotent_error(queue):
    queue.submit("k1", "t", now=T0)
    with pytest.raises(IdempotentAlreadyExistsError) as ei:
        queue.submit("k1", "other", {"a": 1}, now=T0 + 50)
    assert isinstance(ei.value, IdempotentError)
    assert isinstance(ei.value, queue_core.AlreadyExistsError)
    assert queue["k1"].metadata().type == "t"  # unchanged


def test_keys_are_exact(queue):
    for key in ("a", "A", "a ", "ä", "a\u0301", "x'; DROP TABLE t; --"):
        queue.submit(key, "t", now=T0)
    assert sorted(m.key for m in queue.list()) == sorted(["a", "A", "a ", "ä", "a\u0301", "x'; DROP TABLE t; --"])


def test_duplicate_after_finish_within_retention_then_free_after_cleanup(queue):
    queue.submit("k", "t", now=T0)
    t = queue.poll(now=T0)
    t.finish(now=T0 + 10, retention_time=100)
    with pytest.raises(IdempotentAlreadyExistsError):
        queue.submit("k", "t", now=T0 + 50)
    assert queue["k"].exists()
    assert queue.cleanup(now=T0 + 109) == 0
    assert queue.cleanup(now=T0 + 110) == 1
    assert not queue["k"].exists()
    queue.submit("k", "t", now=T0 + 120)
    assert queue["k"].metadata().status == "waiting"


def test_key_reusable_once_retention_ended_even_before_cleanup(queue):
    queue.submit("k", "t", now=T0)
    queue.poll(now=T0).finish(now=T0, retention_time=10)
    queue.submit("k", "t2", now=T0 + 11)
    assert queue["k"].metadata().type == "t2"


def test_rows_kept_for_ever_outlive_every_cleanup(queue):
    """ "Never purged" has one constant (the store's FOREVER, 1e15), but rows written before it
    keep their purge time: pqflow finished step rows with a retention of 1e12 (its KEEP), and
    purge compares ``timeout <= now``, so those are still kept for 31,000 years."""
    queue.submit("kept-1e12", "t", now=T0)
    old = queue.poll(now=T0)
    queue.transaction(lambda tx: tx.finish(old, retention_time=1e12), now=T0)
    queue.submit("kept-forever", "t", group="g", now=T0)
    queue.poll(now=T0).finish(now=T0)
    queue.transaction(lambda tx: tx.store.run_group_keep(tx.conn, ["g"]), now=T0)  # default: never
    millennium = 1000 * 365 * 86400
    assert queue.cleanup(now=T0 + millennium) == 0
    assert queue["kept-1e12"].exists() and queue["kept-forever"].exists()
    assert queue.cleanup(now=1e13) == 1  # the latest time a clock may give: FOREVER is later
    assert queue["kept-forever"].exists()


def test_submit_many_counts_new(queue):
    queue.submit("a", "t", now=T0)
    n = queue.submit_many(
        [
            {"key": "a", "type": "t"},
            {"key": "b", "type": "t", "data": {"x": 1}},
            {"key": "c", "type": "u", "priority": 3},
        ],
        now=T0,
    )
    assert n == 2
    assert queue["b"].metadata().data == {"x": 1}
    assert queue["c"].metadata().priority == 3


def test_submit_many_is_atomic_on_bad_item(queue):
    with pytest.raises(ValidationError):
        queue.submit_many([{"key": "a", "type": "t"}, {"key": "", "type": "t"}], now=T0)
    assert list(queue.list()) == []


def test_poll_empty_and_future(queue):
    assert queue.poll(now=T0) is None
    assert queue.poll_multi(5, now=T0) == []
    queue.submit("later", "t", run_at=T0 + 100, now=T0)
    assert queue.poll(now=T0 + 99) is None
    assert queue["later"].metadata(now=T0).status == "waiting"
    assert queue.poll(now=T0 + 100).key == "later"


def test_order_priority_then_run_at_then_submission(queue):
    queue.submit("old-low", "t", run_at=T0 - 50, now=T0)
    queue.submit("new-high", "t", priority=5, now=T0)
    queue.submit("b1", "t", run_at=T0 - 10, now=T0)
    queue.submit("b2", "t", run_at=T0 - 10, now=T0)
    queue.submit("old-high", "t", priority=5, run_at=T0 - 5, now=T0)
    got = [queue.poll(now=T0).key for _ in range(5)]
    assert got == ["old-high", "new-high", "old-low", "b1", "b2"]


def test_batch_claim_spans_priority_levels_and_skips_future_rows(queue):
    queue.submit_many(
        [{"key": f"future-top{i}", "type": "t", "priority": 9, "run_at": T0 + 100} for i in range(5)]
        + [
            {"key": "p5", "type": "t", "priority": 5, "run_at": T0 - 1},
            {"key": "p0-late", "type": "t", "run_at": T0 - 2},
            {"key": "p0-early", "type": "t", "run_at": T0 - 3},
            {"key": "neg", "type": "t", "priority": -4, "run_at": T0 - 9},
            {"key": "future-neg", "type": "t", "priority": -4, "run_at": T0 + 1},
        ],
        now=T0 - 10,
    )
    got = [t.key for t in queue.poll_multi(10, now=T0)]
    assert got == ["p5", "p0-early", "p0-late", "neg"]
    assert [t.key for t in queue.poll_multi(10, now=T0 + 1)] == ["future-neg"]
    assert len(queue.poll_multi(10, now=T0 + 100)) == 5


def test_a_task_with_limited_attempts_is_leased_alone_or_first(queue):
    queue.submit_many(
        [
            {"key": "a", "type": "t", "run_at": T0 - 3},
            {"key": "limited", "type": "t", "run_at": T0 - 2, "max_attempts": 2},
            {"key": "c", "type": "t", "run_at": T0 - 1},
        ],
        now=T0 - 10,
    )
    assert [t.key for t in queue.poll_multi(5, now=T0)] == ["a"]  # not behind another task
    assert [t.key for t in queue.poll_multi(5, now=T0)] == ["limited", "c"]


def test_lease_expiry_boundary_and_reacquire(queue):
    queue.submit("k", "t", now=T0)
    a = queue.poll(alive_time=10, now=T0)
    assert a.attempts == 1
    assert queue.poll(now=T0 + 5) is None
    assert queue["k"].metadata(now=T0 + 9).status == "running"
    assert queue["k"].metadata(now=T0 + 10).status == "waiting"  # expired lease reads waiting
    b = queue.poll(alive_time=10, now=T0 + 10)  # timeout <= now is acquirable
    assert b.key == "k" and b.attempts == 2
    assert b.lease_token != a.lease_token


def test_heartbeat_extends(queue):
    queue.submit("k", "t", now=T0)
    a = queue.poll(alive_time=10, now=T0)
    a.heartbeat(alive_time=10, now=T0 + 8)
    assert queue.poll(now=T0 + 12) is None
    assert queue["k"].metadata(now=T0 + 12).status == "running"
    assert queue.poll(now=T0 + 18).key == "k"


def test_fencing_after_takeover(queue):
    queue.submit("k", "t", now=T0)
    a = queue.poll(alive_time=10, now=T0)
    b = queue.poll(alive_time=10, now=T0 + 11)
    for op in (
        lambda: a.heartbeat(now=T0 + 12),
        lambda: a.finish(now=T0 + 12),
        lambda: a.fail("x", now=T0 + 12),
        lambda: a.retry(now=T0 + 12),
        lambda: a.release(now=T0 + 12),
        lambda: a.update_data({"z": 1}, now=T0 + 12),
    ):
        with pytest.raises(PreemptedError):
            op()
    m = queue["k"].metadata(now=T0 + 12)
    assert m.status == "running" and m.data == {} and m.attempts == 2
    b.finish(now=T0 + 13)
    assert queue["k"].metadata().outcome == "success"


def test_fencing_after_force_finish(queue):
    queue.submit("k", "t", now=T0)
    a = queue.poll(now=T0)
    queue["k"].force_finish(now=T0 + 1)
    with pytest.raises(PreemptedError):
        a.heartbeat(now=T0 + 2)
    with pytest.raises(PreemptedError):
        a.finish(now=T0 + 2)
    with pytest.raises(IdempotentAlreadyFinishedError):
        queue["k"].force_finish(now=T0 + 3)


def test_finish_twice(queue):
    queue.submit("k", "t", now=T0)
    a = queue.poll(now=T0)
    a.finish(now=T0 + 1)
    with pytest.raises(IdempotentAlreadyFinishedError):
        a.finish(now=T0 + 2)
    m = queue["k"].metadata(now=T0 + 2)
    assert m.status == "finished" and m.outcome == "success" and m.finished_at == T0 + 1


def test_finish_batched_with_the_next_claim(queue):
    for i in range(5):
        queue.submit(f"k{i}", "t", now=T0 + i)
    first = queue.poll_multi(3, now=T0 + 10)
    assert [t.key for t in first] == ["k0", "k1", "k2"]
    nxt = queue.poll_multi(3, finish=first, now=T0 + 11)
    assert [t.key for t in nxt] == ["k3", "k4"]
    for t in first:
        assert t.done and not t.lost and t.status == "finished" and t.outcome == "success"
        m = queue[t.key].metadata(now=T0 + 12)
        assert (m.status, m.outcome, m.finished_at, m.attempts) == ("finished", "success", T0 + 11, 1)
    assert queue.poll_multi(0, finish=nxt, now=T0 + 12) == []
    assert queue.stats(now=T0 + 12)["finished"] == 5
    with pytest.raises(ValidationError):
        queue.poll_multi(0, now=T0 + 12)  # nothing to finish: a claim of 0 is a mistake


def test_batched_finish_is_fenced(queue):
    queue.submit("a", "t", now=T0)
    queue.submit("b", "t", now=T0)
    held = queue.poll_multi(2, alive_time=10, now=T0)
    taker = queue.poll(alive_time=10, now=T0 + 11)  # a's lease expired and was taken over
    assert taker.key == "a"
    lost = queue.finish_many(held, now=T0 + 12)
    assert [t.key for t in lost] == ["a"] and lost[0].lost and not lost[0].done
    assert queue["a"].metadata(now=T0 + 12).status == "running"  # still the taker's
    assert queue["b"].metadata(now=T0 + 12).outcome == "success"
    assert queue.finish_many([held[1]], now=T0 + 13) == []  # finished by us already: not lost
    taker.finish(now=T0 + 14)
    assert queue["a"].metadata().outcome == "success"


def test_holder_heartbeat_after_expiry_without_takeover_is_refused(queue):
    """An expired lease is never revived, even when nobody has taken the task
    yet (another worker may hold its user's slot by now). The holder learns it lost the task."""
    queue.submit("k", "t", now=T0)
    a = queue.poll(alive_time=10, now=T0)
    with pytest.raises(PreemptedError):
        a.heartbeat(alive_time=10, now=T0 + 20)
    b = queue.poll(now=T0 + 25)
    assert b is not None and b.key == "k"


def test_retry_and_release(queue):
    queue.submit("k", "t", now=T0)
    a = queue.poll(now=T0)
    a.retry(retry_wait=30, now=T0 + 1, error="boom")
    m = queue["k"].metadata(now=T0 + 2)
    assert m.status == "waiting" and m.error == "boom" and m.run_at == T0 + 31
    assert queue.poll(now=T0 + 30) is None
    b = queue.poll(now=T0 + 31)
    assert b.attempts == 2
    b.release(now=T0 + 40)
    c = queue.poll(now=T0 + 40)
    assert c.key == "k" and c.attempts == 2  # a release gives its attempt back: it did not run
    with pytest.raises(PreemptedError):
        b.finish(now=T0 + 41)


def test_fail_keeps_error(queue):
    queue.submit("k", "t", now=T0)
    queue.poll(now=T0).fail(ValueError("bad row 7"), now=T0 + 1)
    m = queue["k"].metadata()
    assert m.status == "finished" and m.outcome == "failure" and "bad row 7" in m.error


def test_update_data_merges_and_persists(queue):
    queue.submit("k", "t", {"a": 1, "b": 2}, now=T0)
    a = queue.poll(alive_time=10, now=T0)
    a.update_data({"b": 3, "c": 4}, now=T0 + 5)
    assert a.data == {"a": 1, "b": 3, "c": 4}
    assert queue.poll(now=T0 + 12) is None  # lease extended by update_data
    a.release(now=T0 + 13)
    assert queue.poll(now=T0 + 13).data == {"a": 1, "b": 3, "c": 4}


def test_cancel_waiting_finishes_at_once(queue):
    queue.submit("k", "t", now=T0)
    queue["k"].cancel_request(now=T0 + 1)
    m = queue["k"].metadata(now=T0 + 2)
    assert m.status == "finished" and m.outcome == "cancelled"
    assert queue.poll(now=T0 + 2) is None
    with pytest.raises(AlreadyFinishedError):
        queue["k"].cancel_request(now=T0 + 3)


def test_cancel_running_told_through_heartbeat(queue):
    queue.submit("k", "t", now=T0)
    a = queue.poll(alive_time=10, now=T0)
    assert queue["k"].cancel_request(now=T0 + 1) == "running"
    assert queue["k"].metadata(now=T0 + 1).status == "running"
    with pytest.raises(CancelRequestedError):
        a.heartbeat(alive_time=10, now=T0 + 5)
    assert a.cancel_requested
    assert queue.poll(now=T0 + 12) is None  # lease still extended for winding down
    a.finish(now=T0 + 14, outcome="cancelled")
    assert queue["k"].metadata().outcome == "cancelled"


def test_cancel_requested_task_whose_holder_died_is_not_rerun(queue):
    queue.submit("k", "t", now=T0)
    queue.poll(alive_time=10, now=T0)
    queue["k"].cancel_request(now=T0 + 1)
    assert queue.poll(now=T0 + 20) is None
    assert queue["k"].metadata().outcome == "cancelled"


def test_the_timeout_is_read_by_its_name_in_each_status(queue):
    """One column, three meanings: due time (waiting), lease expiry (running), purge time (finished)."""
    queue.submit("k", "t", run_at=T0 + 5, now=T0)
    waiting = queue["k"].metadata(now=T0)
    assert (waiting.status, waiting.due_at, waiting.lease_expires_at, waiting.purge_at) == (
        "waiting",
        T0 + 5,
        None,
        None,
    )
    held = queue.poll(alive_time=30, now=T0 + 5)
    running = queue["k"].metadata(now=T0 + 6)
    assert (running.status, running.due_at, running.lease_expires_at) == ("running", None, T0 + 35)
    expired = queue["k"].metadata(now=T0 + 35)  # its lease ended: claimable again, from its expiry
    assert (expired.status, expired.due_at, expired.lease_expires_at) == ("waiting", T0 + 35, None)
    held.finish(now=T0 + 7)
    done = queue["k"].metadata(now=T0 + 8)
    retention = queue.config["retention_time"]
    assert (done.status, done.due_at, done.lease_expires_at, done.purge_at) == (
        "finished",
        None,
        None,
        T0 + 7 + retention,
    )


def test_cancel_and_metadata_of_missing_key(queue):
    with pytest.raises(NotFoundError):
        queue["nope"].metadata()
    with pytest.raises(NotFoundError):
        queue["nope"].cancel_request()
    with pytest.raises(NotFoundError):
        queue["nope"].force_finish()
    assert not queue["nope"].exists()


def test_max_attempts_gives_up_when_leases_keep_expiring(queue):
    queue.submit("k", "t", max_attempts=2, now=T0)
    queue.poll(alive_time=10, now=T0)
    queue.poll(alive_time=10, now=T0 + 10)
    assert queue.poll(alive_time=10, now=T0 + 20) is None
    m = queue["k"].metadata()
    assert m.outcome == "failure" and "2 attempts" in m.error


def test_retry_or_fail_backoff(queue):
    queue.config.update(retry_wait=10, max_retry_wait=35)
    queue.submit("k", "t", max_attempts=3, now=T0)
    now = T0
    waits = []
    for _ in range(2):
        a = queue.poll(now=now)
        assert a.retry_or_fail(RuntimeError("x"), now=now) == "retry"
        m = queue["k"].metadata(now=now)
        waits.append(m.run_at - now)
        now = m.run_at
    assert 8 <= waits[0] <= 12 and 16 <= waits[1] <= 24
    a = queue.poll(now=now)
    assert a.retry_or_fail(RuntimeError("final"), now=now) == "failure"
    m = queue["k"].metadata()
    assert m.outcome == "failure" and "final" in m.error and m.attempts == 3


class _LowestDraw:
    """A random source whose draw puts the jitter factor at its lowest, 0.8."""

    def random(self) -> float:
        return 0.0


def test_retry_or_fail_waits_come_from_the_queues_random_source(queue):
    queue.rng = _LowestDraw()
    queue.config.update(retry_wait=10, max_retry_wait=35)
    queue.submit("k", "t", now=T0)
    now, waits = T0, []
    for _ in range(4):
        a = queue.poll(now=now)
        assert a.retry_or_fail(RuntimeError("x"), now=now) == "retry"
        waits.append(queue["k"].metadata(now=now).run_at - now)
        now += waits[-1]
    assert waits == pytest.approx([8, 16, 28, 28])  # 10, 20, 35 (the cap), 35; each x 0.8
    same = queue_core.open(queue.config["url"], queue.table, rng=queue.rng)
    try:
        assert same.rng is queue.rng
    finally:
        same.close()


def test_list_filters_and_limit(queue):
    queue.submit("a", "x", user="u1", now=T0)
    queue.submit("b", "y", user="u2", now=T0)
    queue.submit("c", "x", now=T0)
    queue.poll(now=T0).finish(now=T0)  # a
    queue.poll(alive_time=100, now=T0)  # b running
    assert [m.key for m in queue.list(status="finished", now=T0 + 1)] == ["a"]
    assert [m.key for m in queue.list(status="running", now=T0 + 1)] == ["b"]
    assert [m.key for m in queue.list(status="waiting", now=T0 + 1)] == ["c"]
    assert [m.key for m in queue.list(type="x")] == ["a", "c"]
    assert [m.key for m in queue.list(user="u2")] == ["b"]
    assert len(list(queue.list(limit=2))) == 2
    with pytest.raises(ValidationError):
        list(queue.list(status="bogus"))


def test_stats(queue):
    queue.submit("a", "x", now=T0)
    queue.submit("b", "y", now=T0)
    queue.submit("c", "y", now=T0)
    queue.poll(now=T0).fail("e", now=T0)
    queue.poll(alive_time=50, now=T0)
    s = queue.stats(now=T0 + 1)
    assert (s["waiting"], s["running"], s["finished"], s["total"]) == (1, 1, 1, 3)
    assert s["outcomes"]["failure"] == 1
    assert s["types"]["y"] == {"pending": 0, "waiting": 1, "running": 1, "finished": 0}


def test_bad_input_is_refused_and_changes_nothing(queue):
    bad_calls = [
        dict(key="", type="t"),
        dict(key="a" * 256, type="t"),
        dict(key="a\x00b", type="t"),
        dict(key=5, type="t"),
        dict(key="k", type=""),
        dict(key="k", type="t", data=[1, 2]),
        dict(key="k", type="t", data={"x": object()}),
        dict(key="k", type="t", data={"x": float("nan")}),
        dict(key="k", type="t", max_running=0),
        dict(key="k", type="t", priority="high"),
        dict(key="k", type="t", run_at=float("inf")),
        dict(key="k", type="t", run_at=-5),
        dict(key="k", type="t", max_attempts=0),
        dict(key="\ud800", type="t"),
        dict(key="k", type="t", data={"big": "x" * 1_100_000}),
    ]
    for kw in bad_calls:
        with pytest.raises(ValidationError):
            queue.submit(now=T0, **kw)
    nested: dict = {}
    cur = nested
    for _ in range(100_000):
        cur["a"] = {}
        cur = cur["a"]
    with pytest.raises(ValidationError):
        queue.submit("deep", "t", nested, now=T0)
    assert list(queue.list()) == []


def test_max_data_size_configurable(db_url, table_name, backend):
    q = queue_core.open(db_url, table_name, max_data_size=100)
    q.init()
    try:
        q.submit("small", "t", {"x": "y" * 50})
        with pytest.raises(ValidationError, match="limit is 100"):
            q.submit("big", "t", {"x": "y" * 200})
    finally:
        q.close()
        if backend != "sqlite":
            from conftest import drop_tables

            drop_tables(db_url, table_name)


def test_unicode_and_large_data_round_trip(queue):
    data = {
        "名前": "テスト",
        "emoji": "🙂",
        "nul": "a\x00b",
        "quote": "'\"\\",
        "list": list(range(1000)),
        "lone": "\udcff",
    }
    queue.submit("u", "t", data, now=T0)
    assert queue.poll(now=T0).data == data


def test_init_is_idempotent_and_force_recreates(queue):
    queue.submit("k", "t", now=T0)
    queue.init()
    assert queue["k"].exists()
    queue.init(force=True)
    assert not queue["k"].exists()
    assert queue.store.tables_version() == SCHEMA_VERSION == 10


def test_init_upgrades_a_version_1_table(queue):
    """A table of the first release (no result/workflow/definition columns) is upgraded in place
    by init, its rows kept."""
    from conftest import downgrade

    queue.submit("old", "t", {"a": 1}, now=T0)
    store = queue.store
    downgrade(store, ("result", "workflow", "definition", "queue"), 1)
    assert store.tables_version() == 1
    queue.init()
    assert store.tables_version() == SCHEMA_VERSION
    assert queue["old"].metadata().queue_name == "default"
    assert queue["old"].metadata().data == {"a": 1}
    queue.submit("new", "t", now=T0)
    assert queue.poll(now=T0).key == "old"


def test_missing_table_gives_schema_error(db_url, backend):
    q = queue_core.open(db_url, "never_created_tbl")
    try:
        with pytest.raises(queue_core.SchemaError, match="init"):
            q.submit("k", "t")
    finally:
        q.close()


@pytest.mark.parametrize("name", ["bad-name", "1abc", "a b", "t;drop", "", "x" * 41])
def test_bad_table_names(name):
    with pytest.raises(queue_core.ConfigError):
        queue_core.open("sqlite://", name)


def test_unknown_config_key():
    with pytest.raises(queue_core.ConfigError, match="unknown config key"):
        queue_core.open("sqlite://", alive_tme=3)
    with pytest.raises(queue_core.ConfigError):
        queue_core.open("sqlite://", alive_time=-1)


def test_injected_clock_is_used(queue, clock):
    queue.submit("k", "t")
    m = queue["k"].metadata()
    assert m.created_at == clock.now()
    a = queue.poll(alive_time=10)
    clock.advance(11)
    assert queue.poll().key == "k"
    with pytest.raises(PreemptedError):
        a.finish()


def test_context_manager(db_url, table_name, backend):
    with queue_core.open(db_url, table_name) as q:
        q.init()
        q.submit("k", "t")
        assert q["k"].exists()
    if backend != "sqlite":
        from conftest import drop_tables

        drop_tables(db_url, table_name)
