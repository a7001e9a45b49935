"""A handler class whose prefetch is slow (tests/acceptance/test_rate_limited_task_after_slow_prefetch.py)."""

from __future__ import annotations

import time

import queue_core


class _Stamped(queue_core.Runner):
    def run(self):
        with open(self.task.data["log"], "a") as fh:
            fh.write(f"{self.task.key} {time.time()} run\n")


class SlowPrefetch(queue_core.Dispatch):
    """A handler class reading what its batch needs (as pqflow's Decider does) in 0.4 s: a loaded
    database, or a batch of workflow steps with large inputs."""

    routes = [("stamped", _Stamped)]

    @classmethod
    def prefetch(cls, queue, tasks):
        time.sleep(0.4)


class Plain(queue_core.Dispatch):
    """The same handler without a prefetch."""

    routes = [("stamped", _Stamped)]
