"""The burst end of a worker's processors: one decision from its facts, and the board they share."""

from __future__ import annotations

import os

import pytest

from queue_core.worker.burst import AfterEmpty, BurstBoard, after_empty_claim, holds_nothing

IDLE = {"ended_rows": False, "wrote": False, "rate_limited": False}


def test_an_idle_processor_ends_only_once_its_siblings_are_idle():
    assert after_empty_claim(burst=True, siblings_busy=False, **IDLE) is AfterEmpty.END
    assert after_empty_claim(burst=True, siblings_busy=True, **IDLE) is AfterEmpty.WAIT


@pytest.mark.parametrize("burst", [True, False])
def test_ended_rows_claim_again_at_once(burst):
    facts = {**IDLE, "ended_rows": True}
    assert after_empty_claim(burst=burst, siblings_busy=False, **facts) is AfterEmpty.CLAIM


def test_what_it_wrote_or_a_rate_limit_keeps_a_burst_processor_going():
    assert after_empty_claim(burst=True, siblings_busy=False, **{**IDLE, "wrote": True}) is AfterEmpty.CLAIM
    assert after_empty_claim(burst=True, siblings_busy=False, **{**IDLE, "rate_limited": True}) is AfterEmpty.WAIT
    assert not holds_nothing(**{**IDLE, "wrote": True}) and not holds_nothing(**{**IDLE, "rate_limited": True})
    assert holds_nothing(**IDLE)


def test_a_serving_processor_waits_whatever_it_wrote():
    for facts in (IDLE, {**IDLE, "wrote": True}):
        assert after_empty_claim(burst=False, siblings_busy=False, **facts) is AfterEmpty.WAIT


def test_the_board_starts_busy_and_is_shared_with_a_forked_child():
    board = BurstBoard(3)
    assert board.others_busy(0)
    board.mark(1, False)
    board.mark(2, False)
    assert not board.others_busy(0) and board.others_busy(1)
    pid = os.fork()
    if pid == 0:
        board.mark(2, True)
        os._exit(0)
    os.waitpid(pid, 0)
    assert board.others_busy(0) and board.others_busy(1)
    board.mark(5000, True)  # past the board: counted as idle
    board.mark(0, False)
    board.mark(2, False)
    assert not board.others_busy(1)
