"""Who is charged when a worker process dies (policy rule 3): the task whose handler was running,
nobody else; the ledger a child keeps in its supervisor's memory says which one it was, and
survives the child's SIGKILL."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_core.errors import DatabaseError
from queue_core.rules import policy
from queue_core.rules.policy import CRASH_ALLOWANCE, LeaseEnd
from queue_core.worker.lease_ledger import LeaseLedger, NoLedger
from queue_core.worker.processor import give_back_orphans


def test_a_crash_is_charged_to_the_running_task_only():
    assert policy.crash_end(running=True) is LeaseEnd.EXPIRED and policy.spends_attempt(LeaseEnd.EXPIRED)
    assert policy.crash_end(running=False) is LeaseEnd.ORPHANED and not policy.spends_attempt(LeaseEnd.ORPHANED)


@given(attempts=st.lists(st.integers(min_value=0, max_value=1000), min_size=1, max_size=30), data=st.data())
def test_a_dead_batch_charges_one_attempt_to_the_running_task_and_none_to_the_others(attempts, data):
    """Each task of the batch had ``a`` attempts before the claim counted one; after its process
    died while the handler of task ``k`` ran (or none ran), only task ``k`` keeps that attempt."""
    k = data.draw(st.one_of(st.none(), st.integers(min_value=0, max_value=len(attempts) - 1)))
    after = [policy.attempts_after(policy.crash_end(i == k), a + 1) for i, a in enumerate(attempts)]
    assert after == [a + (1 if i == k else 0) for i, a in enumerate(attempts)]


def test_a_step_is_refused_once_its_worker_died_more_than_the_allowance_while_running_it():
    assert policy.crash_refusal(attempts=CRASH_ALLOWANCE + 1, failures=0) is None  # 5 crashes: one more try
    assert policy.crash_refusal(attempts=CRASH_ALLOWANCE + 2, failures=1) is None
    assert policy.crash_refusal(attempts=CRASH_ALLOWANCE + 2, failures=0) == (
        "its worker died 6 times while running it (lease expired)"
    )


def _tasks(*pairs):
    return [SimpleNamespace(_id=i, _token=token) for i, token in pairs]


def _died_after(ledger: LeaseLedger, write) -> None:
    """Run ``write(ledger)`` in a forked child that then SIGKILLs itself."""
    pid = os.fork()
    if pid == 0:
        write(ledger)
        os.kill(os.getpid(), signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


def test_the_ledger_of_a_killed_child_names_its_leases_and_the_running_one():
    ledger = LeaseLedger()
    batch = _tasks((11, 7), (12, 7), (13, 7))

    def write(led):
        led.record(batch)
        led.running(batch[0])
        led.running(None)
        led.running(batch[1])

    _died_after(ledger, write)
    assert ledger.read() == [(11, 7, False), (12, 7, True), (13, 7, False)]


def test_the_ledger_counts_the_whole_batch_as_running_in_code_run_for_all_of_it():
    ledger = LeaseLedger()
    batch = _tasks((1, 5), (2, 5))
    _died_after(ledger, lambda led: (led.record(batch), led.running_all()))
    assert ledger.read() == [(1, 5, True), (2, 5, True)]


def test_a_new_batch_replaces_the_last_and_a_clear_empties_it():
    ledger = LeaseLedger(capacity=2)
    ledger.record(_tasks((1, 5), (2, 5)))
    ledger.running(SimpleNamespace(_id=9, _token=9))  # not of the batch: no handler of it runs
    assert ledger.read() == [(1, 5, False), (2, 5, False)]
    ledger.record(_tasks((3, 6), (4, 6), (5, 6)))  # past its capacity: the rest unrecorded
    assert ledger.read() == [(3, 6, False), (4, 6, False)]
    ledger.clear()
    assert ledger.read() == [] and NoLedger().read() == []


def test_a_child_killed_between_its_claim_and_its_record_leaves_the_claims_token():
    ledger = LeaseLedger()
    ledger.record(_tasks((1, 5)))
    _died_after(ledger, lambda led: led.claiming(8))
    assert ledger.unrecorded_claim() == 8
    assert ledger.read() == [(1, 5, False)]  # the last batch's successes go back with the new claim
    _died_after(ledger, lambda led: led.record(_tasks((2, 8), (3, 8))))
    assert ledger.unrecorded_claim() is None and ledger.read() == [(2, 8, False), (3, 8, False)]
    ledger.claiming(9)
    ledger.clear()
    assert ledger.unrecorded_claim() is None and NoLedger().unrecorded_claim() is None


class _Queue:
    def __init__(self, fail: bool = False):
        self.fail, self.given = fail, []

    def release_leases(self, leases, claims=()):
        if self.fail:
            raise DatabaseError("down")
        self.given.append((list(leases), list(claims)))
        return len(leases) + 2 * len(claims)


@pytest.mark.parametrize("fail", [False, True])
def test_give_back_returns_every_lease_but_the_running_one_and_empties_the_ledger(fail):
    ledger = LeaseLedger()
    batch = _tasks((1, 5), (2, 5), (3, 5))
    ledger.record(batch)
    ledger.running(batch[1])
    queue = _Queue(fail)
    give_back_orphans(queue, ledger)
    assert queue.given == ([] if fail else [([(1, 5), (3, 5)], [])])
    assert ledger.read() == []
    give_back_orphans(queue, ledger)  # nothing held: nothing written
    assert len(queue.given) == (0 if fail else 1)


def test_give_back_returns_every_lease_of_a_claim_its_child_never_recorded():
    ledger = LeaseLedger()
    ledger.record(_tasks((1, 5)))
    ledger.claiming(8)
    queue = _Queue()
    give_back_orphans(queue, ledger)
    assert queue.given == [([(1, 5)], [8])]
    assert ledger.read() == [] and ledger.unrecorded_claim() is None
