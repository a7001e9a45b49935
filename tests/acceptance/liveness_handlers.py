"""Handlers of tests/acceptance/test_liveness_beat.py (loaded by path by real worker processes).

Each run appends "<key> <pid> <what>" to the file named by the task's data["log"].
"""

from __future__ import annotations

import os
import sys
import time

import queue_core


def _record(task, what: str) -> None:
    with open(task.data["log"], "a") as fh:
        fh.write(f"{task.key} {os.getpid()} {what}\n")


class KillExits(queue_core.Runner):
    """Runs for data["sleep"] seconds; its kill() (a cancel) calls sys.exit in the monitor's thread."""

    def run(self) -> None:
        _record(self.task, "run")
        time.sleep(self.task.data["sleep"])
        _record(self.task, "done")

    def kill(self, reason) -> None:
        _record(self.task, "kill")
        sys.exit(3)


class Worker(queue_core.Dispatch):
    routes = [("kill_exits", KillExits)]
