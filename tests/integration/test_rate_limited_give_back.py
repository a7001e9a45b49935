"""A rate-limited task its processor gives back unrun (too late to start it within its start
grace) never started: its counted start is deleted with the give-back, in the same transaction and
fenced by its lease, so that the window has that start again. The grace a processor promises covers
its last measured prefetch, and is never shorter than ``policy.RATE_GRACE_FLOOR``."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from queue_core import config
from queue_core.errors import TaskError
from queue_core.rules import policy
from queue_core.worker.main import Processor

T0 = 1_700_000_000.0


def _starts(queue) -> list[float]:
    st = queue.store.starts_t
    return queue.db.run(lambda c: [r[0] for r in c.execute(sa.select(st.c.started_at))], write=False)


def _processor(queue, target):
    s = config.build({"url": queue.config["url"], "table": queue.table})
    return Processor(target, s, burst=True, queue=queue)


def test_a_task_given_back_unstarted_spends_none_of_its_rate(queue, clock):
    ran = []
    proc = _processor(queue, ran.append)
    queue.limit("api", rate="1/1h")
    queue.submit("a", "t", {}, queue="api", now=clock.now() - 1)
    (task,) = queue.poll_multi(1, queues="api", start_within=policy.RATE_START_GRACE)
    proc.monitor.hold(task)
    clock.advance(policy.RATE_START_GRACE)  # past its decision share: given back
    proc.process(task)
    assert ran == [] and _starts(queue) == []
    (again,) = queue.poll_multi(1, queues="api", start_within=policy.RATE_START_GRACE)  # the hour's one start
    assert again.key == "a" and _starts(queue) == [again.start_by]


def test_a_give_back_by_a_lease_no_longer_held_deletes_no_start(queue, clock):
    queue.limit("api", rate="1/1h")
    queue.submit("a", "t", {}, queue="api", now=clock.now() - 1)
    (task,) = queue.poll_multi(1, queues="api", start_within=policy.RATE_START_GRACE)
    queue.store.task_release(task._id, task._token, clock.now())  # the lease ends, given back already
    with pytest.raises(TaskError):
        task.give_back_unstarted()
    assert _starts(queue) == [task.start_by]


def test_the_start_grace_is_never_shorter_than_its_floor(queue):
    queue.limit("api", rate="10/0.1s", now=T0)
    queue.submit("a", "t", {}, queue="api", now=T0 - 10)
    (task,) = queue.poll_multi(1, now=T0, queues="api", start_within=policy.RATE_START_GRACE)
    assert task.start_by == T0 + policy.RATE_GRACE_FLOOR


def test_the_promised_grace_covers_the_last_measured_prefetch():
    assert policy.start_grace(0.0) == policy.start_grace(0.01) == policy.RATE_START_GRACE
    grace = policy.start_grace(0.4)
    assert grace * policy.START_DECISION_SHARE >= policy.PREFETCH_GRACE_FACTOR * 0.4


def test_a_grace_covering_a_slow_prefetch_may_take_a_quarter_of_the_window(queue):
    queue.limit("api", rate="10/10s", now=T0)
    queue.submit("a", "t", {}, queue="api", now=T0 - 10)
    within = policy.start_grace(0.4)
    (task,) = queue.poll_multi(1, now=T0, queues="api", start_within=within)
    assert task.start_by == T0 + within and within > 10 * policy.RATE_GRACE_SHARE
