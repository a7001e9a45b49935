"""A rate limit bounds handler starts: a rate-limited queue's task is leased only first in a
batch (never behind another task, whose run would delay its start past the time it was counted
at), its start is counted at the latest time its holder may start it (``start_within``), and a
worker's processor that could not start it by then gives it back unrun."""

from __future__ import annotations

import sqlalchemy as sa

from queue_core import config
from queue_core.rules import policy
from queue_core.worker.main import Processor

T0 = 1_700_000_000.0


def _starts(queue) -> list[float]:
    st = queue.store.starts_t
    return queue.db.run(lambda c: [r[0] for r in c.execute(sa.select(st.c.started_at))], write=False)


def test_a_rate_limited_task_is_never_leased_behind_another_queues_task(queue):
    queue.limit("api", rate="1/3s", now=T0)
    queue.submit("s", "t", {}, queue="slow", now=T0 - 10)
    queue.submit("a", "t", {}, queue="api", now=T0 - 10)
    got = queue.poll_multi(3, now=T0, queues="slow,api")
    assert [t.key for t in got] == ["s"]
    assert _starts(queue) == []  # no start counted for a task not leased
    got = queue.poll_multi(3, now=T0, queues="slow,api")  # nothing ahead of it now
    assert [t.key for t in got] == ["a"]


def test_a_rate_limited_start_is_counted_at_the_latest_time_its_handler_starts(queue):
    queue.limit("api", rate="1/3s", now=T0)
    for key in ("a", "b"):
        queue.submit(key, "t", {}, queue="api", now=T0 - 10)
    (task,) = queue.poll_multi(3, now=T0, queues="api", start_within=0.125)
    assert task.start_by == T0 + 0.125 and _starts(queue) == [T0 + 0.125]
    assert queue.poll_multi(3, now=T0 + 3.1, queues="api") == []  # its window ends at T0 + 3.125
    assert [t.key for t in queue.poll_multi(3, now=T0 + 3.125, queues="api")] == ["b"]


def test_the_start_grace_is_at_most_a_twentieth_of_the_window(queue):
    queue.limit("api", rate="5/1s", now=T0)
    queue.submit("a", "t", {}, queue="api", now=T0 - 10)
    (task,) = queue.poll_multi(3, now=T0, queues="api", start_within=0.25)
    assert task.start_by == T0 + 0.05 and _starts(queue) == [T0 + 0.05]
    queue.submit("c", "t", {}, now=T0)
    (plain,) = queue.poll_multi(3, now=T0 + 4, start_within=0.25)  # the default queue: no limit
    assert plain.start_by is None


def _processor(queue, target):
    s = config.build({"url": queue.config["url"], "table": queue.table})
    return Processor(target, s, burst=True, queue=queue)


def test_a_processor_gives_back_a_rate_limited_task_it_could_not_start_in_time(queue, clock):
    ran = []
    proc = _processor(queue, ran.append)
    queue.limit("api", rate="1/3s")
    queue.submit("a", "t", {}, queue="api", now=clock.now() - 1)
    (task,) = queue.poll_multi(1, queues="api", start_within=policy.RATE_START_GRACE)
    proc.monitor.hold(task)
    clock.advance(0.15 + 0.01)  # stalled past the time its start was counted at (3 s / 20 after its claim)
    proc.process(task)
    m = queue["a"].metadata()
    assert ran == [] and (m.status, m.attempts) == ("waiting", 0)


def test_a_processor_decides_to_start_within_the_first_share_of_the_grace(queue, clock):
    """Past half the grace (the margin left for reaching the handler's first line), given back."""
    ran = []
    proc = _processor(queue, ran.append)
    queue.limit("api", rate="1/3s")
    queue.submit("a", "t", {}, queue="api", now=clock.now() - 1)
    (task,) = queue.poll_multi(1, queues="api", start_within=policy.RATE_START_GRACE)
    proc.monitor.hold(task)
    clock.advance(0.15 * policy.START_DECISION_SHARE + 0.01)
    proc.process(task)
    assert ran == [] and queue["a"].metadata().status == "waiting"


def test_a_processor_starts_a_rate_limited_task_decided_within_its_share_of_the_grace(queue, clock):
    ran = []
    proc = _processor(queue, lambda task: ran.append(task.key))
    queue.limit("api", rate="1/3s")
    queue.submit("a", "t", {}, queue="api", now=clock.now() - 1)
    (task,) = queue.poll_multi(1, queues="api", start_within=policy.RATE_START_GRACE)
    proc.monitor.hold(task)
    clock.advance(0.15 * policy.START_DECISION_SHARE)
    proc.process(task)
    proc.settler.flush()
    assert ran == ["a"] and queue["a"].metadata().outcome == "success"
