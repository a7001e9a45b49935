"""A worker whose child dies right after its first claim's COMMIT, before it records the batch in
its lease ledger (loaded by path from real worker processes).

Importing this module makes ``LeaseLedger.record`` SIGKILL its process the first time it is given
a batch of tasks whose data names a ``dir`` without a ``claim.crash`` file (the file is made
first): the fault at the boundary between the database and the ledger, in a real process. With
data["await"], it first waits (up to 15 s) for the file of that name in ``dir`` (the test's
signal to the supervisor sent).
"""

from __future__ import annotations

import os
import signal
import time

from queue_core.worker.lease_ledger import LeaseLedger

_record = LeaseLedger.record


def _record_or_die(self, tasks):
    marker = tasks and tasks[0].data.get("dir") and os.path.join(tasks[0].data["dir"], "claim.crash")
    if marker and not os.path.exists(marker):
        open(marker, "w").close()
        _await(tasks[0].data)
        os.kill(os.getpid(), signal.SIGKILL)
    _record(self, tasks)


def _await(data: dict) -> None:
    if data.get("await"):
        path, deadline = os.path.join(data["dir"], data["await"]), time.monotonic() + 15
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)  # the supervisor has read the signal


LeaseLedger.record = _record_or_die


def ran(task) -> None:
    with open(task.data["log"], "a") as fh:
        fh.write(f"{task.key} {os.getpid()} run\n")
