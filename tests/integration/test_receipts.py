"""Receipts (``queue_core/store/receipts.py``) on SQLite, MariaDB and PostgreSQL: a transaction run
with a receipt whose COMMIT applied but whose acknowledgement was lost is not run again (the result
of the run that committed is returned); one whose COMMIT never applied runs again; receipts are
purged an hour on; a receipt needs a transaction.

The faults: ``lost_commit`` (tests/integration/test_operator_change_rerun_after_an_unknown_commit.py)
commits or rolls back the next write transaction, then makes its client see the connection drop at COMMIT.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from test_operator_change_rerun_after_an_unknown_commit import lost_commit

from queue_core.store.receipts import RECEIPT_KEEP

T0 = 1_700_000_000.0


def _receipt_count(q) -> int:
    with q.db.engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(q.store.receipts.t)).scalar_one()


def _counting(q, runs: list):
    """A transaction function counting its runs (it reads once: a real transaction)."""

    def work(conn):
        runs.append(1)
        conn.execute(sa.select(q.store.receipts.t.c.token).limit(1)).all()
        return len(runs)

    return work


@pytest.mark.parametrize("applied", [True, False])
def test_a_receipted_transaction_runs_again_only_when_its_commit_did_not_apply(queue, applied):
    runs: list = []
    before = _receipt_count(queue)
    with lost_commit(queue, applied=applied) as state:
        result = queue.db.run(_counting(queue, runs), what="test", receipt=queue.store.receipts.at(T0))
    assert state["fired"] == 1
    if applied:
        assert (result, len(runs)) == (1, 1)  # the first run's result; the re-run found its receipt
    else:
        assert (result, len(runs)) == (2, 2)  # rolled back: run again, and its receipt written then
    assert _receipt_count(queue) == before + 1


def test_without_a_fault_each_run_writes_one_receipt_and_runs_once(queue):
    runs: list = []
    before = _receipt_count(queue)
    assert queue.db.run(_counting(queue, runs), what="test", receipt=queue.store.receipts.at(T0)) == 1
    assert queue.db.run(_counting(queue, runs), what="test", receipt=queue.store.receipts.at(T0)) == 2
    assert _receipt_count(queue) == before + 2


def test_a_receipt_needs_a_transaction(queue):
    with pytest.raises(ValueError, match="transaction"):
        queue.db.run(lambda conn: None, autocommit=True, receipt=queue.store.receipts.at(T0))


def test_cleanup_purges_receipts_an_hour_old_by_the_time_of_their_change(queue):
    queue.submit("a", "t", now=T0)
    queue.move("a", "other", now=T0 + 5)  # an operator's change: one receipt, stamped T0 + 5
    assert _receipt_count(queue) == 1
    queue.cleanup(now=T0 + 5 + RECEIPT_KEEP - 1)
    assert _receipt_count(queue) == 1
    queue.cleanup(now=T0 + 5 + RECEIPT_KEEP + 1)
    assert _receipt_count(queue) == 0
