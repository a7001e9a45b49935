"""The leases a dead process held without running them are given back by (task id, lease token):
due now, their attempts given back; a lease finished or taken over meanwhile is left alone."""

from __future__ import annotations

import threading
import time

import pytest
import sqlalchemy as sa

from queue_core import config
from queue_core.errors import DatabaseError
from queue_core.worker.lease_ledger import LeaseLedger
from queue_core.worker.processor import Processor, give_back_orphans
from queue_core.worker.supervisor import Supervisor


def test_release_leases_gives_back_only_the_dead_holders_own_leases(queue, clock):
    for k in ("a", "b", "c", "d"):
        queue.submit(k, "t")
    batch = queue.poll_multi(4, alive_time=10)
    assert [t.key for t in batch] == ["a", "b", "c", "d"] and {t.attempts for t in batch} == {1}
    by_key = {t.key: t for t in batch}
    by_key["b"].finish()
    clock.advance(11)  # every lease expired; another worker takes c over
    (again,) = queue.poll_multi(1, alive_time=10)
    assert again.key == "a"  # the longest due first: a, then c, d
    queue.release_leases([(t._id, t._token) for t in batch])
    assert queue["a"].metadata().attempts == 2  # held by its new holder: left alone
    assert queue["b"].metadata().status == "finished"
    for k in ("c", "d"):
        m = queue[k].metadata()
        assert (m.status, m.attempts) == ("waiting", 0), k
        assert m.run_at == clock.now()


def test_release_leases_returns_how_many_it_gave_back(queue, clock):
    queue.submit("a", "t")
    queue.submit("b", "t")
    batch = queue.poll_multi(2, alive_time=10)
    assert queue.release_leases([(t._id, t._token) for t in batch]) == 2
    assert queue.release_leases([(t._id, t._token) for t in batch]) == 0  # not held any more
    assert [t.key for t in queue.poll_multi(2, alive_time=10)] == ["a", "b"]


def test_release_leases_gives_back_every_row_of_a_claim_whose_batch_was_never_recorded(queue, clock):
    """A child that died after its claim's COMMIT, before it learnt the batch: its successor knows
    only the claim's token. Every row still leased under it goes back, due now, uncharged; a row
    of that claim finished or taken over since, and the leases of other claims, are left alone."""
    for k in ("a", "b", "c", "d"):
        queue.submit(k, "t")
    tokens: list[int] = []
    lost = queue.poll_multi(3, alive_time=10, announce=tokens.append)  # its holder "never saw" it
    other = queue.poll_multi(1, alive_time=10)
    (token,) = tokens
    assert [t.key for t in lost] == ["a", "b", "c"] and [t.key for t in other] == ["d"]
    lost[0].finish()
    assert queue.release_leases([], claims=[token]) == 2
    assert {k: (queue[k].metadata().status, queue[k].metadata().attempts) for k in "abcd"} == {
        "a": ("finished", 1),
        "b": ("waiting", 0),
        "c": ("waiting", 0),
        "d": ("running", 1),
    }
    assert queue["b"].metadata().run_at == clock.now()
    assert queue.release_leases([], claims=[token]) == 0  # given back already
    assert [t.key for t in queue.poll_multi(3, alive_time=10)] == ["b", "c"]


def test_a_supervisor_gives_back_what_a_child_it_does_not_replace_held_but_the_running_task(wq):
    """A child that ended and is not forked again (the worker stops): its supervisor gives back,
    from a process of its own, each lease of its ledger but the one whose handler was running."""
    for k in ("a", "b", "c"):
        wq.submit(k, "t")
    batch = wq.poll_multi(3, alive_time=60)
    sup = Supervisor(
        lambda *_: 0, config.build({"url": wq.config["url"], "table": wq.table}), burst=False, config_loader=None
    )
    ledger = sup.ledgers[0] = LeaseLedger()
    ledger.record(batch)
    ledger.running(batch[1])
    sup._give_back(0)
    assert ledger.read() == []
    assert {k: (wq[k].metadata().status, wq[k].metadata().attempts) for k in ("a", "b", "c")} == {
        "a": ("waiting", 0),
        "b": ("running", 1),
        "c": ("waiting", 0),
    }


def test_a_claim_that_raised_after_its_commit_is_given_back_by_the_next_one(queue, clock):
    """A claim whose error hid its COMMIT (its acknowledgement lost, the retries spent) leased rows
    its processor never learnt: the next claim gives them back first, so they run now, uncharged,
    not once their leases expire."""
    for k in ("a", "b"):
        queue.submit(k, "t")
    s = config.build({"url": queue.config["url"], "table": queue.table, "alive_time": 600, "task_prefetch": 1})
    ledger = LeaseLedger()
    proc = Processor(lambda task: None, s, burst=True, queue=queue, ledger=ledger)
    assert len(queue.poll_multi(2, alive_time=600, announce=proc._announce)) == 2  # as if it had raised
    batch = proc._lease()
    assert [(t.key, t.attempts) for t in batch] == [("a", 1), ("b", 1)]
    assert ledger.unrecorded_claim() is None and [i for i, _, _ in ledger.read()] == [t._id for t in batch]


class _Killed(BaseException):
    """The child dies (SIGKILL) inside its claim, before the COMMIT."""


def test_a_failed_claims_give_back_keeps_the_unwritten_successes_of_the_last_batch(queue, clock):
    """The claim after a failed one gives the failed one's token back, and only that: the last
    batch's successes, put back unwritten, stay in the ledger for a successor should the child
    die in the next claim (both were run: neither is charged)."""
    for k in ("a", "b"):
        queue.submit(k, "t")
    s = config.build({"url": queue.config["url"], "table": queue.table, "alive_time": 600, "task_prefetch": 1})
    ledger = LeaseLedger()
    proc = Processor(lambda task: None, s, burst=True, queue=queue, ledger=ledger)
    proc._run_batch(proc._lease())
    assert proc.settler.waiting
    calls = []

    def claim(*args, **kw):
        calls.append(kw["announce"](12345))  # its token, noted before it runs
        if len(calls) == 1:
            raise DatabaseError("connection lost before the COMMIT")
        raise _Killed()

    real, queue.poll_multi = queue.poll_multi, claim
    try:
        with pytest.raises(DatabaseError):
            proc._lease()
        with pytest.raises(_Killed):
            proc._lease()
    finally:
        queue.poll_multi = real
    give_back_orphans(queue, ledger)  # the child forked in its place
    assert {k: (queue[k].metadata().status, queue[k].metadata().attempts) for k in "ab"} == dict.fromkeys(
        "ab", ("waiting", 0)
    )


def test_a_supervisor_gives_back_the_unrecorded_claim_of_a_child_it_does_not_replace(wq):
    for k in ("a", "b"):
        wq.submit(k, "t")
    sup = Supervisor(
        lambda *_: 0, config.build({"url": wq.config["url"], "table": wq.table}), burst=False, config_loader=None
    )
    ledger = sup.ledgers[0] = LeaseLedger()
    assert len(wq.poll_multi(2, alive_time=60, announce=ledger.claiming)) == 2  # committed; the child died
    sup._give_back(0)
    assert {k: (wq[k].metadata().status, wq[k].metadata().attempts) for k in "ab"} == dict.fromkeys(
        "ab", ("waiting", 0)
    )
    assert ledger.unrecorded_claim() is None


@pytest.mark.parametrize("ledger", [LeaseLedger, None], ids=["process", "thread"])
def test_a_processor_gives_back_a_claim_whose_error_hid_its_commit_before_it_stops(queue, clock, ledger):
    """Its COMMIT's acknowledgement lost and the retries spent, the claim raised; the processor is
    stopped during the backoff: it gives the claim back as it ends (with or without a ledger)."""
    for k in ("a", "b"):
        queue.submit(k, "t")
    s = config.build({"url": queue.config["url"], "table": queue.table, "alive_time": 600})
    proc = Processor(lambda task: None, s, burst=False, queue=queue, ledger=ledger and ledger())
    real = queue.poll_multi

    def committed_then_raised(*args, **kw):
        real(*args, **kw)
        proc.stop()
        raise DatabaseError("the acknowledgement of the COMMIT was lost")

    queue.poll_multi = committed_then_raised
    try:
        proc.run(listen=False)
    finally:
        queue.poll_multi = real
    assert {k: (queue[k].metadata().status, queue[k].metadata().attempts) for k in "ab"} == dict.fromkeys(
        "ab", ("waiting", 0)
    )


def test_a_thread_processor_runs_at_once_what_a_claim_whose_error_hid_its_commit_leased(queue, clock):
    queue.submit("a", "t")
    s = config.build({"url": queue.config["url"], "table": queue.table, "alive_time": 600})
    ran = []
    proc = Processor(lambda task: ran.append(task.key), s, burst=True, queue=queue)  # no ledger
    real, calls = queue.poll_multi, []

    def first_raises(*args, **kw):
        calls.append(1)
        out = real(*args, **kw)
        if len(calls) == 1:
            raise DatabaseError("the acknowledgement of the COMMIT was lost")
        return out

    queue.poll_multi = first_raises
    try:
        assert proc.run(listen=False) == 0
    finally:
        queue.poll_multi = real
    assert ran == ["a"] and queue["a"].metadata().attempts == 1


def test_a_give_back_by_claim_token_waits_for_no_other_holders_lock(queue, backend):
    """The rows of a token are found by a read that locks nothing: another worker's transaction
    holding its own leased row does not hold the give-back (a locking scan did, on MariaDB)."""
    if backend == "sqlite":
        pytest.skip("SQLite serialises writers: a give-back always waits for the write lock")
    for k in ("mine", "other"):
        queue.submit(k, "t")
    tokens: list[int] = []
    queue.poll_multi(1, alive_time=60, announce=tokens.append)
    (other,) = queue.poll_multi(1, alive_time=60)
    t = queue.store.t
    engine = sa.create_engine(queue.config["url"])
    out: dict = {}

    def give_back():
        out["n"] = queue.release_leases([], claims=tokens)

    try:
        with engine.begin() as conn:
            conn.execute(sa.select(t.c.id).where(t.c.id == other._id).with_for_update())
            th = threading.Thread(target=give_back, daemon=True)
            began = time.monotonic()
            th.start()
            th.join(3)
            waited = th.is_alive()
        th.join(30)
    finally:
        engine.dispose()
    assert not waited and out == {"n": 1}, (time.monotonic() - began, out)


def test_an_immediate_stop_gives_back_a_claim_whose_error_hid_its_commit(queue, clock):
    """Thread mode (nothing survives the process): QUIT during the backoff after such a claim
    gives its rows back before the process ends."""
    for k in ("a", "b"):
        queue.submit(k, "t")
    s = config.build({"url": queue.config["url"], "table": queue.table, "alive_time": 600})
    proc = Processor(lambda task: None, s, burst=False, queue=queue)
    real = queue.poll_multi

    def committed_then_raised(*args, **kw):
        real(*args, **kw)
        raise DatabaseError("the acknowledgement of the COMMIT was lost")

    queue.poll_multi = committed_then_raised
    try:
        with pytest.raises(DatabaseError):
            proc._lease()
    finally:
        queue.poll_multi = real
    proc.give_back_now()
    assert {k: (queue[k].metadata().status, queue[k].metadata().attempts) for k in "ab"} == dict.fromkeys(
        "ab", ("waiting", 0)
    )


def test_unstarted_tasks_a_stop_could_not_release_stay_in_the_ledger_for_the_supervisor(queue, clock):
    for k in ("a", "b"):
        queue.submit(k, "t")
    s = config.build({"url": queue.config["url"], "table": queue.table, "alive_time": 600, "task_prefetch": 1})
    ledger = LeaseLedger()
    proc = Processor(lambda task: proc.stop(), s, burst=False, queue=queue, ledger=ledger)  # TERM while a runs

    def release_fails(*args, **kw):
        raise DatabaseError("connection lost")

    real, queue.release_many = queue.release_many, release_fails
    try:
        proc.run(listen=False)
    finally:
        queue.release_many = real
    give_back_orphans(queue, ledger)  # the supervisor's, for a slot it does not fork again
    assert queue["a"].metadata().status == "finished"
    assert (queue["b"].metadata().status, queue["b"].metadata().attempts) == ("waiting", 0)
