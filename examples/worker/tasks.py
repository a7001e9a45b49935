"""A worker example: two task types, one that fails now and then and is retried.

Run it with examples/worker/run.sh, or by hand:
    perfectqueue init
    perfectqueue submit greet-1 greet '{"name": "Ada"}'
    perfectqueue run examples/worker/tasks.py:Worker --burst
"""

from __future__ import annotations

import queue_core


class Greet(queue_core.Application):
    def perform(self):
        print(f"hello, {self.task.data.get('name', 'world')} (attempt {self.task.attempts})", flush=True)


class Invoice(queue_core.Application):
    def perform(self):
        customer = self.task.data["customer"]
        if self.task.data.get("flaky") and self.task.attempts < 2:
            raise RuntimeError(f"billing API timed out for {customer}")  # retried with backoff
        print(f"invoiced {customer}", flush=True)
        # Follow-up work is just another task; its key makes it idempotent.
        try:
            self.queue.submit(f"receipt-{customer}", "greet", {"name": customer})
        except queue_core.IdempotentAlreadyExistsError:
            pass


class Worker(queue_core.Dispatch):
    routes = [("greet", Greet), ("invoice", Invoice)]
