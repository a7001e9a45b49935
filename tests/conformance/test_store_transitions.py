"""Conformance suite of the store's named transitions, on SQLite, MariaDB and PostgreSQL alike.

Every transition of ``queue_core.store.transitions`` (task rows and schedule leases) has a test
``test_task_<name>`` or ``test_schedule_<name>`` here: it applies from its allowed state(s), and
when its precondition no longer holds (wrong state, stale lease token, row gone) it reports so
(False, None, 0 or the documented typed error) and writes nothing.
"""

from __future__ import annotations

import sys
import threading

import pytest
import sqlalchemy as sa

import perfectsched
import queue_core
from queue_core import (
    CancelRequestedError,
    IdempotentAlreadyFinishedError,
    IdempotentNotFoundError,
    PreemptedError,
    TaskRunningError,
    ValidationError,
)
from queue_core.store import lost_claims
from queue_core.store.schedules import NewSchedule
from queue_core.store.tasks import FOREVER
from queue_core.store.transitions import SCHEDULE_TRANSITIONS, TASK_TRANSITIONS

T0 = 1_699_999_200.0  # a whole hour
RUN = {"workflow": '{"w": 1}'}


# -- helpers ----------------------------------------------------------------------------------------
def run(q, fn):
    return q.db.run(fn, what="test")


def row(q, key):
    return q.store.task_get(key)


def unchanged(q, key, fn):
    """Call ``fn()``; assert the row of ``key`` (or its absence) did not change; return fn()'s value."""
    before = row(q, key)
    out = fn()
    assert row(q, key) == before
    return out


def refused(q, key, error, fn):
    before = row(q, key)
    with pytest.raises(error):
        fn()
    assert row(q, key) == before


def held(q, key="k", alive=10, now=T0):
    q.submit(key, "t", {"a": 1}, now=now)
    return q.poll(alive_time=alive, now=now)


def rows_of_run(q, *items, now=T0):
    q.transaction(
        lambda tx: tx.submit_rows([{"key": k, "type": "t", "group": "g", **RUN, **o} for k, o in items]), now=now
    )
    return {k: row(q, k) for k, _ in items}


# -- task rows ----------------------------------------------------------------------------------------
def test_task_submit(queue):
    assert queue.store.task_submit([queue._new_task("k", "t", {}, now=T0)], T0) == 1
    assert (
        unchanged(queue, "k", lambda: queue.store.task_submit([queue._new_task("k", "u", {"x": 1}, now=T0)], T0)) == 0
    )


def test_task_claim(queue):
    queue.submit("k", "t", run_at=T0 + 5, now=T0)
    assert unchanged(queue, "k", lambda: queue.poll(now=T0 + 4)) is None  # not due
    a = queue.poll(alive_time=10, now=T0 + 5)
    r = row(queue, "k")
    assert (r["state"], r["leased"], r["lease_token"], r["timeout"], r["attempts"]) == (0, 1, a.lease_token, T0 + 15, 1)
    assert unchanged(queue, "k", lambda: queue.poll(now=T0 + 14)) is None  # held
    b = queue.poll(alive_time=10, now=T0 + 15)  # expired: claimable again, new token
    assert b.lease_token != a.lease_token and row(queue, "k")["attempts"] == 2


def test_task_give_up(queue):
    queue.submit("k", "t", max_attempts=1, now=T0)
    queue.poll(alive_time=10, now=T0)
    assert unchanged(queue, "k", lambda: queue.poll(now=T0 + 9)) is None  # held: not due yet
    assert queue.poll(now=T0 + 10) is None  # expired with its attempts used up: ends as failure
    r = row(queue, "k")
    assert (r["state"], r["outcome"], r["lease_token"]) == (1, "failure", None)


def hand_edit(q, key, **values):
    """Change a task row by hand, as an operator's SQL would."""
    t = q.store.t
    run(q, lambda c: c.execute(sa.update(t).where(t.c.key == key).values(**values)))


def test_task_set_aside(queue):
    queue.submit("w", "t", run_at=T0 + 5, now=T0)
    hand_edit(queue, "w", data="not json")
    assert unchanged(queue, "w", lambda: queue.poll(now=T0 + 4)) is None  # not due
    assert queue.poll(now=T0 + 5) is None  # due and corrupt: ends as failure instead of being leased
    held(queue, "l", alive=10, now=T0)
    hand_edit(queue, "l", max_running=0)
    assert unchanged(queue, "l", lambda: queue.poll(now=T0 + 9)) is None  # held: not due yet
    assert queue.poll(now=T0 + 10) is None  # the lease expired
    for key, column in (("w", "data"), ("l", "max_running")):
        r = row(queue, key)
        assert (r["state"], r["leased"], r["outcome"], r["lease_token"]) == (1, 0, "failure", None)
        assert r["error"].startswith(f"set aside by the claim: task '{key}' in table {queue.table}: column {column}")
    assert unchanged(queue, "w", lambda: queue.poll(now=T0 + 99)) is None  # finished: never claimed again


def test_task_heartbeat(queue):
    a = held(queue)
    a.heartbeat(alive_time=20, now=T0 + 1)
    assert row(queue, "k")["timeout"] == T0 + 21
    a.update_data({"b": 2}, alive_time=30, now=T0 + 2)
    assert row(queue, "k")["timeout"] == T0 + 32
    queue.poll(alive_time=10, now=T0 + 40)  # taken over
    refused(queue, "k", PreemptedError, lambda: a.heartbeat(now=T0 + 41))
    refused(queue, "k", PreemptedError, lambda: a.update_data({"c": 3}, now=T0 + 41))


def test_task_heartbeat_never_revives_an_expired_lease(queue):
    a = held(queue)  # its lease ends at T0 + 10
    refused(queue, "k", PreemptedError, lambda: a.heartbeat(alive_time=20, now=T0 + 10))  # nobody took it
    refused(queue, "k", PreemptedError, lambda: a.update_data({"c": 3}, now=T0 + 11))
    refused(
        queue, "k", PreemptedError, lambda: queue.store.task_heartbeat(a.row_id, a.lease_token, 89, lambda: T0 + 10)
    )
    assert queue.poll(alive_time=10, now=T0 + 10).key == "k"  # due to any worker


def test_task_heartbeat_tells_a_cancel_request_and_keeps_the_lease(queue):
    a = held(queue)
    queue["k"].cancel_request(now=T0 + 1)
    with pytest.raises(CancelRequestedError):
        a.heartbeat(alive_time=20, now=T0 + 2)
    assert row(queue, "k")["timeout"] == T0 + 22  # extended while the handler winds down
    queue["k"].force_finish(now=T0 + 3)
    refused(queue, "k", PreemptedError, lambda: a.heartbeat(now=T0 + 4))


def test_a_late_heartbeat_of_a_cancelled_task_never_writes_a_lease_taken_meanwhile(queue, db_url, table_name, backend):
    """Regression: a heartbeat refused because a cancel was requested re-read the row, then
    extended the lease by id alone. A claim committed between the two (the lease had expired;
    the claim ends the cancelled task) had its row rewritten: a finished row's purge time
    became the old holder's lease expiry, and the old holder was told to wind down instead of
    being told it lost the task."""
    if backend == "sqlite":
        pytest.skip("SQLite serialises writers: no claim can commit inside the heartbeat's transaction")
    a = held(queue)
    queue["k"].cancel_request(now=T0 + 1)
    other = queue_core.open(db_url, table_name, clock=queue.clock)
    seen, me = [], threading.get_ident()

    def claim_after_the_second_statement(conn, cursor, statement, *_):
        if threading.get_ident() == me and statement.lstrip().upper().startswith(("UPDATE", "SELECT")):
            seen.append(statement)
            if len(seen) == 2:
                claimer = threading.Thread(target=lambda: other.poll(alive_time=100, now=T0 + 20))
                claimer.start()
                claimer.join(timeout=30)

    sa.event.listen(queue.db.engine, "after_cursor_execute", claim_after_the_second_statement)
    try:
        with pytest.raises((CancelRequestedError, PreemptedError)) as told:
            a.heartbeat(alive_time=10, now=T0 + 20)  # late, but not taken over when it starts
    finally:
        sa.event.remove(queue.db.engine, "after_cursor_execute", claim_after_the_second_statement)
        other.close()
    r = row(queue, "k")
    if r["state"] == 1:  # the claim came first and ended the cancelled task
        assert told.type is PreemptedError and r["timeout"] == T0 + 20 + 300
    else:  # the heartbeat kept its row locked: the claim found nothing
        assert told.type is CancelRequestedError and (r["lease_token"], r["timeout"]) == (a.lease_token, T0 + 30)


def test_task_finish(queue):
    a = held(queue)
    a.finish(now=T0 + 1)
    r = row(queue, "k")
    assert (r["state"], r["leased"], r["outcome"], r["finished_at"]) == (1, 0, "success", T0 + 1)
    refused(queue, "k", IdempotentAlreadyFinishedError, lambda: a.finish(now=T0 + 2))
    b = held(queue, "k2")
    queue.poll(alive_time=10, now=T0 + 20)  # taken over
    refused(queue, "k2", PreemptedError, lambda: b.fail("x", now=T0 + 21))


def test_task_finish_batched_with_a_stale_token_is_reported_lost(queue):
    a = held(queue)
    queue.poll(alive_time=10, now=T0 + 20)
    assert unchanged(queue, "k", lambda: queue.finish_many([a], now=T0 + 21)) == [a]
    assert a.lost


def test_task_retry(queue):
    a = held(queue)
    a.retry(retry_wait=5, error="boom", now=T0 + 1)
    r = row(queue, "k")
    assert (r["state"], r["leased"], r["timeout"], r["run_at"], r["error"], r["owner"]) == (
        0,
        0,
        T0 + 6,
        T0 + 6,
        "boom",
        None,
    )
    refused(queue, "k", PreemptedError, lambda: a.retry(now=T0 + 2))  # already given back


def test_task_release(queue):
    a = held(queue)
    a.release(now=T0 + 1)
    r = row(queue, "k")
    assert (r["state"], r["leased"], r["timeout"], r["attempts"]) == (0, 0, T0 + 1, 0)
    refused(queue, "k", PreemptedError, lambda: a.release(now=T0 + 2))
    b = queue.poll(alive_time=10, now=T0 + 2)
    b.finish(now=T0 + 3)
    refused(queue, "k", PreemptedError, lambda: a.release(now=T0 + 4))


def test_task_release_batch(queue):
    """One claim's unstarted tasks given back in one transaction: only those the token still holds."""
    for k in ("a", "b", "c", "d"):
        queue.submit(k, "t", {}, now=T0)
    batch = queue.poll_multi(4, alive_time=10, now=T0)
    assert len({t.lease_token for t in batch}) == 1
    by_key = {t.key: t for t in batch}
    by_key["b"].finish(now=T0 + 1)  # finished meanwhile: not released
    n = queue.release_many([by_key[k] for k in ("a", "b", "c")], now=T0 + 2)
    assert n == 2
    for k in ("a", "c"):
        r = row(queue, k)
        assert (r["state"], r["leased"], r["timeout"], r["attempts"]) == (0, 0, T0 + 2, 0)
    assert row(queue, "b")["state"] == 1 and row(queue, "d")["leased"] == 1
    token = by_key["d"].lease_token
    ids = [by_key[k].row_id for k in ("a", "b", "c")]
    assert unchanged(queue, "a", lambda: queue.store.task_release_batch(ids, token, T0 + 3)) == []  # released before
    assert unchanged(queue, "d", lambda: queue.store.task_release_batch([by_key["d"].row_id], token + 1, T0 + 3)) == []
    assert queue.store.task_release_batch([], token, T0 + 3) == []
    assert unchanged(queue, "d", lambda: queue.store.task_release_batch(None, token + 1, T0 + 3)) == []  # not its claim
    assert queue.store.task_release_batch(None, token, T0 + 3) == [by_key["d"].row_id]  # every row its claim holds
    assert (row(queue, "d")["leased"], row(queue, "d")["timeout"]) == (0, T0 + 3)


def taken_over(q, key):
    """A lease of ``key`` that expired and the lease another claim took over (attempts 2)."""
    first = held(q, key)
    return first, q.poll(alive_time=10, now=T0 + 20)


def test_task_return_attempt(queue):
    a, b = taken_over(queue, "k")
    give_back = queue.store.task_lost_before_start
    assert give_back(a.row_id, "k", T0, a.lease_token, T0 + 21) == "returned"
    r = row(queue, "k")
    assert (r["state"], r["leased"], r["lease_token"], r["attempts"]) == (0, 1, b.lease_token, 1)
    c, d = taken_over(queue, "f")
    d.finish(now=T0 + 21)
    # finished by the later lease: its history
    assert give_back(c.row_id, "f", T0, c.lease_token, T0 + 21) == "returned"
    assert (row(queue, "f")["state"], row(queue, "f")["attempts"]) == (1, 1)
    queue.submit("w", "t", now=T0)
    queue["w"].cancel_request(now=T0 + 1)  # ended by an operator: no lease token to compare with
    assert unchanged(queue, "w", lambda: give_back(row(queue, "w")["id"], "w", T0, a.lease_token, T0 + 21)) == ""
    held(queue, "z").release(now=T0 + 1)  # its attempt already given back: never below 0
    assert row(queue, "z")["attempts"] == 0
    assert unchanged(queue, "z", lambda: give_back(row(queue, "z")["id"], "z", T0, a.lease_token, T0 + 21)) == ""


def test_task_return_attempt_to_another_task_with_the_row_s_id_is_refused(queue):
    """The same-task fence: a lease's attempt goes back to its own task only, never to a row that
    took its id (SQLite numbers a new row after the largest id left), of another key or of the
    same key submitted again."""
    a, b = taken_over(queue, "k")
    give_back = queue.store.task_lost_before_start
    assert unchanged(queue, "k", lambda: give_back(a.row_id, "other", T0, a.lease_token, T0 + 21)) == ""
    assert unchanged(queue, "k", lambda: give_back(a.row_id, "k", T0 + 1, a.lease_token, T0 + 21)) == ""  # resubmitted


def test_task_lost_before_start_of_a_lease_nobody_took_releases_it(queue):
    """A lease that expired while its task waited to start, still the row's: the holder releases
    it (due now, its attempt given back); a second call finds nothing to give back."""
    a = held(queue, "k")
    assert queue.store.task_lost_before_start(a.row_id, "k", T0, a.lease_token, T0 + 30) == "released"
    r = row(queue, "k")
    assert (r["state"], r["leased"], r["timeout"], r["attempts"]) == (0, 0, T0 + 30, 0)
    assert (
        unchanged(queue, "k", lambda: queue.store.task_lost_before_start(a.row_id, "k", T0, a.lease_token, T0 + 31))
        == ""
    )


def test_task_force_finish(queue):
    queue.submit("w", "t", run_at=T0 + 100, now=T0)  # waiting, not yet due
    held(queue, "h")
    for key in ("w", "h"):
        queue[key].force_finish(now=T0 + 1)
        assert (row(queue, key)["state"], row(queue, key)["outcome"], row(queue, key)["lease_token"]) == (
            1,
            "success",
            None,
        )
    refused(queue, "w", IdempotentAlreadyFinishedError, lambda: queue["w"].force_finish(now=T0 + 2))
    refused(queue, "gone", IdempotentNotFoundError, lambda: queue["gone"].force_finish(now=T0 + 2))
    rows_of_run(queue, ("s", {}))
    refused(queue, "s", ValidationError, lambda: queue["s"].force_finish(now=T0 + 2))


def test_task_cancel(queue):
    queue.submit("w", "t", now=T0)
    assert queue["w"].cancel_request(now=T0 + 1) == "finished"
    assert (row(queue, "w")["state"], row(queue, "w")["outcome"]) == (1, "cancelled")
    refused(queue, "w", IdempotentAlreadyFinishedError, lambda: queue["w"].cancel_request(now=T0 + 2))
    refused(queue, "gone", IdempotentNotFoundError, lambda: queue["gone"].cancel_request(now=T0 + 2))
    held(queue, "h")  # running: the cancel statement's precondition does not hold
    values = dict(state=1, outcome="cancelled")
    assert (
        unchanged(
            queue,
            "h",
            lambda: run(
                queue,
                lambda c: queue.store.changes._by_id(c, row(queue, "h")["id"], "cancel", values, T0 + 1, now=T0 + 1),
            ),
        )
        is False
    )


def test_task_requeue(queue):
    held(queue, "f").fail("boom", now=T0 + 1)
    id_ = row(queue, "f")["id"]
    assert queue.store.failure_requeue([id_], T0 + 2) == [id_]
    r = row(queue, "f")
    assert (r["state"], r["leased"], r["attempts"], r["timeout"], r["outcome"]) == (0, 0, 0, T0 + 2, None)
    assert unchanged(queue, "f", lambda: queue.store.failure_requeue([id_], T0 + 3)) == []  # waiting: not failed
    held(queue, "ok", now=T0 + 4).finish(now=T0 + 5)
    assert (
        unchanged(queue, "ok", lambda: queue.store.failure_requeue([row(queue, "ok")["id"]], T0 + 6)) == []
    )  # a success
    rows_of_run(queue, ("s", {}))
    step = row(queue, "s")
    run(
        queue,
        lambda c: c.execute(
            sa.update(queue.store.t).where(queue.store.t.c.id == step["id"]).values(state=1, outcome="failure")
        ),
    )
    assert unchanged(queue, "s", lambda: queue.store.failure_requeue([step["id"]], T0 + 7)) == []  # a run's: pqflow's


def test_task_move(queue):
    queue.submit("w", "t", run_at=T0 + 100, now=T0)  # waiting, not yet due
    queue.move("w", "other", now=T0 + 1)
    assert row(queue, "w")["queue"] == "other"
    rows_of_run(queue, ("p", {"pending": True}))
    queue.move("p", "other", now=T0 + 1)  # a pending step moves too (it keeps its queue when promoted)
    assert row(queue, "p")["queue"] == "other"
    held(queue, "h")  # running: refused, nothing written
    refused(queue, "h", TaskRunningError, lambda: queue.move("h", "other", now=T0 + 1))
    queue.move("h", "other", now=T0 + 11)  # its lease expired: waiting again
    assert row(queue, "h")["queue"] == "other"
    queue["w"].force_finish(now=T0 + 2)
    refused(queue, "w", IdempotentAlreadyFinishedError, lambda: queue.move("w", "default", now=T0 + 3))
    refused(queue, "gone", IdempotentNotFoundError, lambda: queue.move("gone", "default", now=T0 + 3))


def test_task_request_cancel(queue):
    held(queue)
    assert queue["k"].cancel_request(now=T0 + 1) == "running"
    r = row(queue, "k")
    assert (r["state"], r["leased"], r["cancel_requested"]) == (0, 1, 1)
    rows_of_run(queue, ("p", {"pending": True}))
    refused(queue, "p", ValidationError, lambda: queue["p"].cancel_request(now=T0 + 1))  # only its run decides
    assert (
        unchanged(
            queue,
            "p",
            lambda: run(
                queue,
                lambda c: queue.store.changes._by_id(
                    c, row(queue, "p")["id"], "request_cancel", {"cancel_requested": 1}, T0 + 1
                ),
            ),
        )
        is False
    )


def test_task_set_data(queue):
    queue.submit("k", "t", {"a": 1}, now=T0)
    assert queue.transaction(lambda tx: tx.update_data("k", {"b": 2}), now=T0) is True
    queue["k"].force_finish(now=T0 + 1)
    assert queue.transaction(lambda tx: tx.update_data("k", {"c": 3}), now=T0 + 2) is True
    assert queue["k"].metadata().data == {"c": 3}
    assert unchanged(queue, "gone", lambda: queue.transaction(lambda tx: tx.update_data("gone", {}), now=T0)) is False


def test_task_track(queue):
    """Any row, any state: only ``tracked`` changes (a held lease, a pending row, a finished one)."""
    held(queue, "h")
    rows_of_run(queue, ("p", {"pending": True}))
    queue.submit("f", "t", now=T0)
    queue["f"].force_finish(now=T0)
    for key in ("h", "p", "f"):
        before = row(queue, key)
        queue[key].track()
        assert row(queue, key) == {**before, "tracked": 1}
        queue[key].untrack()
        assert row(queue, key) == before
    refused(queue, "gone", queue_core.errors.NotFoundError, lambda: queue["gone"].track())


def test_task_purge(queue):
    queue.submit("done", "t", now=T0)
    queue.submit("live", "t", now=T0)  # due (timeout <= now) but live: never purged
    queue["done"].force_finish(now=T0)
    assert unchanged(queue, "done", lambda: queue.cleanup(now=T0 + 299)) == 0
    assert queue.cleanup(now=T0 + 300) == 1
    assert row(queue, "done") is None and row(queue, "live") is not None


def _runs(q, fn, now=T0):
    return q.transaction(lambda tx: fn(tx.store, tx.conn), now=now)


def test_task_adopt(queue):
    a = held(queue)
    args = ('{"run": 1}', "{}", "#runs", T0 + 1)
    assert _runs(queue, lambda r, c: r.run_adopt(c, a.row_id, a.lease_token, *args)) is True
    assert (row(queue, "k")["state"], row(queue, "k")["leased"]) == (2, 0)
    assert (
        unchanged(queue, "k", lambda: _runs(queue, lambda r, c: r.run_adopt(c, a.row_id, a.lease_token, *args)))
        is False
    )
    b = held(queue, "k2")
    queue.poll(alive_time=10, now=T0 + 20)  # taken over
    assert (
        unchanged(queue, "k2", lambda: _runs(queue, lambda r, c: r.run_adopt(c, b.row_id, b.lease_token, *args)))
        is False
    )


def test_task_mark(queue):
    queue.submit("k", "t", now=T0)
    id_ = row(queue, "k")["id"]
    assert _runs(queue, lambda r, c: r.run_mark(c, id_, "#runs", '{"unpicked": true}')) is True
    assert unchanged(queue, "k", lambda: _runs(queue, lambda r, c: r.run_mark(c, id_, "#runs", "{}"))) is False


def test_task_start_map(queue):
    rows = rows_of_run(queue, ("m", {"pending": True}), ("w", {}))
    read, started = RUN["workflow"], '{"w": 1, "n": 3}'
    assert _runs(queue, lambda r, c: r.run_start_maps(c, [(rows["m"]["id"], read, started)])) == 1
    assert (row(queue, "m")["workflow"], row(queue, "m")["state"]) == (started, 2)  # still pending
    assert (
        unchanged(queue, "m", lambda: _runs(queue, lambda r, c: r.run_start_maps(c, [(rows["m"]["id"], read, "{}")])))
        == 0
    )  # its bookkeeping is no longer what was read: started once
    assert (
        unchanged(queue, "w", lambda: _runs(queue, lambda r, c: r.run_start_maps(c, [(rows["w"]["id"], read, "{}")])))
        == 0
    )  # not pending


def test_task_renew_claim(queue):
    a = held(queue)  # leased until T0 + 10

    def renew(token, now):
        per_row = queue.db.dialect.per_row
        return run(
            queue, lambda c: lost_claims.renewed_under(queue.store.t, c, token, [T0 + 10], lambda: now, 10, per_row)
        )

    assert unchanged(queue, "k", lambda: renew(a.lease_token + 1, T0 + 20)) == []  # not its token
    (r,) = renew(a.lease_token, T0 + 20)  # expired, nobody claimed it since: renewed from now
    assert (r["key"], r["timeout"], row(queue, "k")["timeout"]) == ("k", T0 + 30, T0 + 30)
    queue.poll(alive_time=10, now=T0 + 40)  # taken over: a new token
    assert unchanged(queue, "k", lambda: renew(a.lease_token, T0 + 41)) == []


def test_task_set_workflow(queue):
    rows = rows_of_run(queue, ("p", {"pending": True}), ("w", {}))
    assert _runs(queue, lambda r, c: r.run_set_workflow(c, rows["p"]["id"], '{"n": 2}')) is True
    assert row(queue, "p")["workflow"] == '{"n": 2}'
    assert (
        unchanged(queue, "w", lambda: _runs(queue, lambda r, c: r.run_set_workflow(c, rows["w"]["id"], "{}"))) is False
    )  # expected pending, is waiting
    assert _runs(queue, lambda r, c: r.run_set_workflow_many(c, [(rows["w"]["id"], '{"n": 3}')], state=0)) == 1
    assert (
        unchanged(
            queue,
            "p",
            lambda: _runs(queue, lambda r, c: r.run_set_workflow_many(c, [(rows["p"]["id"], "{}")], state=0)),
        )
        == 0
    )


def test_task_promote(queue):
    rows = rows_of_run(queue, ("p", {"pending": True}), ("w", {}))
    assert _runs(queue, lambda r, c: r.run_promote(c, [(rows["p"]["id"], "{}")], T0 + 1)) == 1
    assert (row(queue, "p")["state"], row(queue, "p")["timeout"]) == (0, T0 + 1)
    assert (
        unchanged(queue, "w", lambda: _runs(queue, lambda r, c: r.run_promote(c, [(rows["w"]["id"], "{}")], T0))) == 0
    )


def test_task_close(queue):
    rows = rows_of_run(queue, ("p", {"pending": True}), ("q", {"pending": True}), ("w", {}))
    assert _runs(queue, lambda r, c: r.run_close(c, rows["p"]["id"], "skipped", T0 + 1)) is True
    assert (row(queue, "p")["state"], row(queue, "p")["outcome"]) == (1, "skipped")
    assert (
        unchanged(queue, "p", lambda: _runs(queue, lambda r, c: r.run_close(c, rows["p"]["id"], "failure", T0)))
        is False
    )
    entry = {"outcome": "skipped", "error": None, "workflow": "{}"}
    assert _runs(queue, lambda r, c: r.run_close_many(c, [{"id": rows["q"]["id"], **entry}], T0)) == 1
    assert (
        unchanged(
            queue, "w", lambda: _runs(queue, lambda r, c: r.run_close_many(c, [{"id": rows["w"]["id"], **entry}], T0))
        )
        == 0
    )


def test_task_keep_group(queue):
    rows_of_run(queue, ("f", {}), ("w", {}))
    queue.poll(now=T0).finish(now=T0)  # one of them finishes
    done = "f" if row(queue, "f")["state"] == 1 else "w"
    live = "w" if done == "f" else "f"
    assert unchanged(queue, live, lambda: _runs(queue, lambda r, c: r.run_group_keep(c, ["g"], T0 + 99))) == 1
    assert row(queue, done)["timeout"] == T0 + 99


def test_task_reopen(queue):
    rows = rows_of_run(queue, ("p", {"pending": True}), ("w", {}))
    _runs(queue, lambda r, c: r.run_close(c, rows["p"]["id"], "failure", T0))
    assert _runs(queue, lambda r, c: r.run_reopen_steps(c, [rows["p"]["id"]], T0 + 1)) == 1
    r = row(queue, "p")
    assert (r["state"], r["outcome"], r["attempts"], r["timeout"]) == (0, None, 0, T0 + 1)
    assert unchanged(queue, "w", lambda: _runs(queue, lambda r, c: r.run_reopen_steps(c, [rows["w"]["id"]], T0))) == 0
    assert unchanged(queue, "w", lambda: _runs(queue, lambda r, c: r.run_reopen(c, rows["w"]["id"], "{}", T0))) is False


def test_task_clear_group(queue):
    rows_of_run(queue, ("s", {}))
    queue.submit("plain", "t", group="g", now=T0)
    assert unchanged(queue, "plain", lambda: _runs(queue, lambda r, c: r.run_group_clear(c, "g"))) == 1
    assert row(queue, "s") is None


def test_step_finish_and_retry_of_a_lost_lease_are_refused(queue):
    rows_of_run(queue, ("s", {}))
    a = queue.poll(alive_time=10, now=T0)
    queue.poll(alive_time=10, now=T0 + 20)  # taken over
    finish = dict(error=None, result=None)
    refused(
        queue,
        "s",
        PreemptedError,
        lambda: _runs(queue, lambda r, c: r.run_finish_held(c, a.row_id, a.lease_token, "success", T0 + 21, **finish)),
    )
    refused(
        queue,
        "s",
        PreemptedError,
        lambda: _runs(
            queue, lambda r, c: r.run_retry_held(c, a.row_id, a.lease_token, T0 + 30, T0 + 21, error="x", workflow="{}")
        ),
    )
    entry = {"id": a.row_id, "token": a.lease_token, "outcome": "success", **finish}
    assert unchanged(queue, "s", lambda: _runs(queue, lambda r, c: r.run_finish_held_many(c, [entry], T0 + 21))) == (
        [a.row_id],
        [],
    )


# -- schedule leases -----------------------------------------------------------------------------------
M = 60  # the schedules below run every minute, from T0 (a whole minute)


def srow(sc, key="s"):
    return sc.store.schedule_get(key)


def s_unchanged(sc, fn, key="s"):
    before = srow(sc, key)
    out = sc.db.run(fn, what="test")
    assert srow(sc, key) == before
    return out


def s_refused(sc, error, fn, key="s"):
    before = srow(sc, key)
    with pytest.raises(error):
        fn()
    assert srow(sc, key) == before


def every_minute(sc, key="s", **opts):
    return sc.add(key, "t", cron="* * * * *", now=T0 - 1, **opts)


def aside(sc, key="s"):
    """A schedule set aside at its first occurrence (T0)."""
    every_minute(sc, key)
    assert sc.db.run(lambda c: sc.store.schedule_set_aside(c, key, int(T0), "why", T0), what="test") is True


def test_schedule_add(sched):
    new = NewSchedule(
        key="s",
        type="t",
        cron="* * * * *",
        delay=0,
        timezone="UTC",
        data="{}",
        next_time=int(T0),
        next_run_time=T0,
        catchup="all",
        dst="vixie",
    )
    assert sched.db.run(lambda c: sched.store.schedule_add(c, new, T0), what="test") is True
    r = srow(sched)
    assert (r["leased"], r["timeout"], r["lease_token"]) == (0, T0, None)
    assert (
        s_unchanged(sched, lambda c: sched.store.schedule_add(c, NewSchedule(**{**new.__dict__, "type": "u"}), T0))
        is False
    )


def test_schedule_lease(sched):
    every_minute(sched)
    st = sched.store
    assert (
        s_unchanged(sched, lambda c: st.schedule_lease(c, "s", int(T0), int(T0), T0 - 1, T0 + 9, 7)) is False
    )  # not due
    assert (
        s_unchanged(sched, lambda c: st.schedule_lease(c, "s", int(T0) + M, int(T0) + M, T0, T0 + 9, 7)) is False
    )  # stale
    assert sched.db.run(lambda c: st.schedule_lease(c, "s", int(T0), int(T0), T0, T0 + 10, 5), what="test") is True
    r = srow(sched)
    assert (r["leased"], r["lease_token"], r["timeout"], r["next_time"]) == (1, 5, T0 + 10, T0)
    assert (
        s_unchanged(sched, lambda c: st.schedule_lease(c, "s", int(T0), int(T0), T0 + 9, T0 + 19, 7)) is False
    )  # held


def test_schedule_advance(sched):
    every_minute(sched)
    st = sched.store
    assert s_unchanged(sched, lambda c: st.schedule_advance_many(c, [("s", int(T0), int(T0) + M, T0 + M)], T0 - 1)) == 0
    assert s_unchanged(sched, lambda c: st.schedule_advance_many(c, [("s", int(T0) + M, int(T0) + 2 * M, T0)], T0)) == 0
    a = sched.poll(alive_time=10, now=T0)
    assert (
        sched.db.run(lambda c: st.schedule_advance_many(c, [("s", int(T0), int(T0) + M, T0 + M)], T0 + 10), what="test")
        == 1
    )  # its lease expired: advanced, lease and token dropped
    r = srow(sched)
    assert (r["leased"], r["lease_token"], r["next_time"], r["timeout"]) == (0, None, T0 + M, T0 + M)
    s_refused(sched, PreemptedError, lambda: a.finish(now=T0 + 11))


def test_schedule_set_aside(sched):
    every_minute(sched)
    st = sched.store
    assert s_unchanged(sched, lambda c: st.schedule_set_aside(c, "s", int(T0), "why", T0 - 1)) is False  # not due
    assert s_unchanged(sched, lambda c: st.schedule_set_aside(c, "s", int(T0) + M, "why", T0)) is False  # stale
    a = sched.poll(alive_time=10, now=T0)
    assert s_unchanged(sched, lambda c: st.schedule_set_aside(c, "s", int(T0), "why", T0 + 9)) is False  # held
    assert (
        sched.db.run(lambda c: st.schedule_set_aside(c, "s", int(T0), "why", T0 + 10), what="test") is True
    )  # expired
    r = srow(sched)
    assert (r["error"], r["leased"], r["lease_token"], r["next_time"], r["next_run_time"], r["timeout"]) == (
        "why",
        0,
        None,
        T0,
        T0,
        FOREVER,
    )  # never due; the occurrence it stopped at kept
    assert s_unchanged(sched, lambda c: st.schedule_set_aside(c, "s", int(T0), "again", T0 + 99 * M)) is False
    s_refused(sched, PreemptedError, lambda: a.finish(now=T0 + 11))
    assert (
        s_unchanged(sched, lambda c: st.schedule_lease(c, "s", int(T0), int(T0), T0 + 99 * M, T0 + 99 * M, 7)) is False
    )
    assert (
        s_unchanged(sched, lambda c: st.schedule_advance_many(c, [("s", int(T0), int(T0) + M, T0 + M)], T0 + 99 * M))
        == 0
    )
    assert st.schedule_count_due(T0 + 99 * M) == 0


def test_schedule_resume(sched):
    every_minute(sched)
    st = sched.store
    assert s_unchanged(sched, lambda c: st.schedule_resume(c, "s", int(T0), T0)) is False  # not set aside
    assert sched.db.run(lambda c: st.schedule_set_aside(c, "s", int(T0), "why", T0), what="test") is True
    assert s_unchanged(sched, lambda c: st.schedule_resume(c, "s", int(T0) + M, T0 + 1)) is False  # stale
    assert sched.db.run(lambda c: st.schedule_resume(c, "s", int(T0), T0 + 5 * M), what="test") is True
    r = srow(sched)
    assert (r["error"], r["leased"], r["next_time"], r["timeout"], r["updated_at"]) == (None, 0, T0, T0, T0 + 5 * M)
    assert s_unchanged(sched, lambda c: st.schedule_resume(c, "s", int(T0), T0 + 6 * M)) is False  # already back
    assert sched.tick(now=T0 + 5 * M) == 6  # from the occurrence it stopped at (catch-up all)


def test_schedule_heartbeat(sched):
    every_minute(sched)
    a = sched.poll(alive_time=10, now=T0)
    a.heartbeat(alive_time=20, now=T0 + 1)
    assert srow(sched)["timeout"] == T0 + 21
    sched.poll(alive_time=10, now=T0 + 21)  # taken over
    s_refused(sched, PreemptedError, lambda: a.heartbeat(now=T0 + 22))
    assert s_unchanged(sched, lambda c: sched.store.schedule_heartbeat(c, "s", a._token, T0 + 99, T0 + 22)) is False


def test_schedule_heartbeat_never_revives_an_expired_lease(sched):
    every_minute(sched)
    a = sched.poll(alive_time=10, now=T0)
    s_refused(sched, PreemptedError, lambda: a.heartbeat(alive_time=10, now=T0 + 10))  # expired, not taken over
    assert s_unchanged(sched, lambda c: sched.store.schedule_heartbeat(c, "s", a._token, T0 + 99, T0 + 10)) is False
    b = sched.poll(alive_time=10, now=T0 + 10)
    assert b is not None and b.scheduled_time == a.scheduled_time


def test_schedule_finish(sched):
    every_minute(sched)
    a = sched.poll(alive_time=10, now=T0)
    a.finish(now=T0 + 1)
    r = srow(sched)
    assert (r["leased"], r["next_time"], r["timeout"], r["updated_at"]) == (0, T0 + M, T0 + M, T0 + 1)
    s_refused(sched, perfectsched.IdempotentAlreadyFinishedError, lambda: a.finish(now=T0 + 2))
    assert s_unchanged(sched, lambda c: sched.store.schedule_finish(c, "s", a._token, int(T0) + 2 * M, T0, T0)) is False


def test_schedule_retry(sched):
    every_minute(sched)
    a = sched.poll(alive_time=10, now=T0)
    a.retry(retry_wait=5, now=T0 + 1)
    assert (srow(sched)["leased"], srow(sched)["timeout"], srow(sched)["next_time"]) == (0, T0 + 6, T0)
    s_refused(sched, PreemptedError, lambda: a.retry(now=T0 + 2))  # already given back


def test_schedule_release(sched):
    every_minute(sched)
    a = sched.poll(alive_time=10, now=T0)
    a.release(now=T0 + 1)
    assert (srow(sched)["leased"], srow(sched)["timeout"]) == (0, T0 + 1)
    sched.poll(alive_time=10, now=T0 + 2).finish(now=T0 + 3)
    s_refused(sched, PreemptedError, lambda: a.release(now=T0 + 4))


def test_schedule_configure(sched):
    every_minute(sched)
    a = sched.poll(alive_time=10, now=T0)
    sched.modify("s", type="u", data={"v": 1}, catchup="skip", now=T0 + 1)  # lease kept
    r = srow(sched)
    assert (r["type"], r["catchup"], r["leased"], r["lease_token"]) == ("u", "skip", 1, a._token)
    assert s_unchanged(sched, lambda c: sched.store.schedule_configure(c, "gone", T0, type="x"), key="gone") is False
    aside(sched, "x")  # a set-aside schedule is changed by reschedule only (from now)
    assert s_unchanged(sched, lambda c: sched.store.schedule_configure(c, "x", T0 + 2, type="u"), key="x") is False


def test_schedule_reschedule(sched):
    every_minute(sched)
    a = sched.poll(alive_time=10, now=T0)
    sched.modify("s", cron="0 * * * *", now=T0 + 1)  # new times: the lease is dropped
    r = srow(sched)
    assert (r["cron"], r["leased"], r["lease_token"], r["next_time"]) == ("0 * * * *", 0, None, T0 + 3600)
    s_refused(sched, PreemptedError, lambda: a.finish(now=T0 + 2))
    assert (
        s_unchanged(
            sched,
            lambda c: sched.store.schedule_reschedule(
                c, "gone", T0, cron="* * * * *", timezone="UTC", delay=0, dst="vixie", next_time=int(T0)
            ),
            key="gone",
        )
        is False
    )
    aside(sched, "x")
    assert (
        sched.db.run(
            lambda c: sched.store.schedule_reschedule(
                c, "x", T0 + 2, cron="0 * * * *", timezone="UTC", delay=0, dst="vixie", next_time=int(T0) + 3600
            ),
            what="test",
        )
        is True
    )
    r = srow(sched, "x")
    assert (r["error"], r["leased"], r["next_time"], r["timeout"]) == (None, 0, T0 + 3600, T0 + 3600)  # back


def test_schedule_delete(sched):
    every_minute(sched)
    a = sched.poll(alive_time=10, now=T0)
    sched["s"].delete()
    assert srow(sched) is None
    with pytest.raises(perfectsched.IdempotentNotFoundError):
        sched["s"].delete()
    with pytest.raises(PreemptedError):
        a.finish(now=T0 + 1)
    aside(sched, "x")
    sched["x"].delete()
    assert srow(sched, "x") is None


def test_a_holder_whose_occurrence_a_catch_up_set_aside_is_told_preempted(sched):
    """Regression: poll's catch-up skip advanced the schedule but left the old holder's token,
    so that holder's finish was refused as "occurrence already finished" (it never was)."""
    sched.add("s", "t", cron="0 * * * *", catchup="skip", now=T0 - 1)
    a = sched.poll(alive_time=10, now=T0)
    assert sched.poll(now=T0 + 1800) is None  # 30 min late: set aside, the schedule moves on
    assert (srow(sched)["next_time"], srow(sched)["lease_token"]) == (T0 + 3600, None)
    s_refused(sched, PreemptedError, lambda: a.finish(now=T0 + 1801))


# -- the suite covers the table -------------------------------------------------------------------------
def test_every_transition_has_its_conformance_test():
    here = {name for name in dir(sys.modules[__name__]) if name.startswith("test_")}
    missing = [f"test_task_{n}" for n in TASK_TRANSITIONS if f"test_task_{n}" not in here]
    missing += [f"test_schedule_{n}" for n in SCHEDULE_TRANSITIONS if f"test_schedule_{n}" not in here]
    assert not missing, f"transitions without a conformance test: {missing}"
