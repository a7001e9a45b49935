"""Handlers for the tasks perfectsched submits (see run.sh).

Each occurrence of a schedule arrives as an ordinary queue task of the schedule's type and
data, keyed "<schedule key>.<scheduled time>": the key says which occurrence it is.
"""

from __future__ import annotations

from datetime import UTC, datetime

import queue_core


def scheduled_time(task) -> int:
    """The occurrence's nominal time (epoch seconds): the part of the key after the last dot."""
    return int(task.key.rsplit(".", 1)[1])


class Report(queue_core.Application):
    def perform(self):
        when = datetime.fromtimestamp(scheduled_time(self.task), UTC).isoformat()
        print(f"report scheduled for {when} sent to {self.task.data['to']} (task {self.task.key})",
              flush=True)


class Worker(queue_core.Dispatch):
    routes = [("report", Report)]
