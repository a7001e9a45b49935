"""Named queues example: calls to a partner API in a queue of their own, paused while the partner
is down and rate-limited when it comes back; reports in the default queue go on meanwhile.

Run it with examples/queues/run.sh.
"""

from __future__ import annotations

import json
import os
import sys
import time

import queue_core

CALLS = "partner-calls.log"  # one line per call to the pretend API: the time it was made


def call_partner_api(invoice: str) -> None:
    """A pretend partner API: it only records when it was called."""
    with open(CALLS, "a") as fh:
        fh.write(f"{time.time()} {invoice}\n")


class SendInvoice(queue_core.Application):
    def perform(self):
        call_partner_api(self.task.data["invoice"])


class Report(queue_core.Application):
    def perform(self):
        print(f"report {self.task.data['name']} done", flush=True)


class Worker(queue_core.Dispatch):
    routes = [("send_invoice", SendInvoice), ("report", Report)]


def most_in_any(times: list[float], seconds: float) -> int:
    """The most of ``times`` in any window of ``seconds``."""
    times = sorted(times)
    return max((sum(1 for t in times[i:] if t < first + seconds) for i, first in enumerate(times)), default=0)


if __name__ == "__main__":
    # summary: the partner's calls, and the starts the queue counted (perfectqueue list --format json on stdin)
    if sys.argv[1:] != ["summary"]:
        sys.exit(f"usage: perfectqueue list --queue partner --format json | {os.path.basename(sys.argv[0])} summary")
    with open(CALLS) as fh:
        calls = [float(line.split()[0]) for line in fh]
    starts = [task["started_at"] for task in json.load(sys.stdin)]
    print(f"partner API calls: {len(calls)}")
    print(f"most starts in any second: {most_in_any(starts, 1.0)} (the limit: 4)")
