"""Handlers of the immediate-stop tests (test_immediate_stop.py), loaded by path from real worker processes.

Each run appends "<key> <pid> run" (and "<key> <pid> done" when it returns) to data["log"], as
tests/acceptance/handlers.py does, so a test counts handler runs from the outside.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time

import queue_core


def _record(task, what="run"):
    path = task.data.get("log")
    if path:
        with open(path, "a") as fh:
            fh.write(f"{task.key} {os.getpid()} {what}\n")
            fh.flush()


class Handler(queue_core.Application):
    """data: log, sleep (seconds), gate (a path: wait until it exists before returning),
    child (a path: start a subprocess that writes its pid there and sleeps), who (a path: the
    processor thread's name is appended there), only (a thread name: on
    any other thread it raises, to be retried at once), finish_first (the handler finishes its task
    itself before it waits for its gate)."""

    def perform(self):
        d = self.task.data
        if d.get("only") and threading.current_thread().name != d["only"]:
            raise RuntimeError("not on the wanted thread: retried (retry_wait 0)")
        _record(self.task)
        if d.get("who"):  # which processor thread runs it (thread mode)
            with open(d["who"], "a") as fh:
                fh.write(f"{self.task.key} {threading.current_thread().name}\n")
        if d.get("child"):
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    f"import os, time\nopen({d['child']!r}, 'w').write(str(os.getpid()))\ntime.sleep(120)\n",
                ]
            )
        if d.get("finish_first"):  # its own finish, written now: nothing left to write when it returns
            self.task.finish()
        if d.get("gate"):
            while not os.path.exists(d["gate"]):
                time.sleep(0.01)
        if d.get("sleep"):
            time.sleep(d["sleep"])
        _record(self.task, "done")


class Worker(queue_core.Dispatch):
    routes = [(re.compile(r".*"), Handler)]
