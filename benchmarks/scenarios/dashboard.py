"""Scenario 15 (issue 16): the dashboard's server time per page at scale.

One queue table with ``poll_finished`` finished rows (one in fifty failed, over five error
classes and two queues; a year of daily occurrences of a schedule among them) and
``poll_future`` waiting rows, due now — the issue's 1,000,000 finished and 100,000 waiting —
plus tagged tasks, workflow runs and schedules. Each run requests every
page and live update of ``pqweb`` through its ASGI app in this process (Starlette's TestClient:
the server's time, no network or browser), ``dash_count`` times each, and takes the p95 of each.
The target: every page ≤ 200 ms (p95).
"""

from __future__ import annotations

import statistics
import time
import warnings

import perfectsched
import pqflow

from ..procs import BenchError
from ..stats import timed_calls
from ..tables import analyze, clone, read_row, tasks_table
from .base import Context, Sample, Scenario

DAY = 86400.0
ERRORS = (
    "TimeoutError: api timed out",
    "ValueError: bad row 17",
    "KeyError: 'customer'",
    "ConnectionError: refused",
    "RuntimeError: quota exceeded",
)

flow = pqflow.Workflow("bench_dash_flow")


@flow.step()
def fetch(ctx):
    return [1, 2, 3]


@flow.step(after=fetch, map="fetch")
def square(ctx, item):
    return item * item


@flow.step(after=square)
def total(ctx, square):
    return sum(square)


#: the pages timed: (metric key, label, path); {task}, {run}: a task and a run of the loaded table
PAGES: tuple[tuple[str, str, str], ...] = (
    ("overview", "overview", "/"),
    ("overview_live", "overview, live update", "/live/overview"),
    ("tasks", "tasks, newest first", "/tasks"),
    ("tasks_next", "tasks, a later page (keyset)", "/tasks?cursor={cursor}"),
    ("tasks_waiting", "tasks, status waiting", "/tasks?status=waiting"),
    ("tasks_failed", "tasks, status failed", "/tasks?status=failed"),
    ("tasks_queue", "tasks, one queue", "/tasks?queue=billing"),
    ("tasks_type", "tasks, one type", "/tasks?type=report"),
    ("tasks_user", "tasks, one user", "/tasks?user=acme"),
    ("tasks_tag", "tasks, one tag", "/tasks?tag=customer:acme"),
    ("tasks_prefix", "tasks, key prefix", "/tasks?key_prefix=f12345"),
    ("task", "task detail", "/task?key={task}"),
    ("failures", "failure groups", "/failures"),
    ("workers", "workers", "/workers"),
    ("schedules", "schedules", "/schedules"),
    ("schedule", "schedule detail (latest occurrences)", "/schedule?key=nightly"),
    ("runs", "workflow runs", "/runs"),
    ("run", "run detail", "/run?id={run}"),
    ("run_live", "run, live update", "/live/run?id={run}"),
    ("run_graph", "run graph (SVG)", "/run/graph.svg?id={run}"),
)


def load(ctx: Context, name: str) -> None:
    """The loaded table ``name`` (see the module's docstring) and its schedules ``name_s``."""
    s = ctx.sizes
    url = ctx.url("dashboard")
    with ctx.queue("dashboard", name) as q:
        now = time.time()
        q.submit("template-done", "noop")
        q.poll().finish(retention_time=400 * DAY)
        q.submit("template-failed", "report", queue="billing")
        q.poll(queues="billing").fail("x", retention_time=400 * DAY)
        q.submit("template-waiting", "noop", user="acme")
    t = tasks_table(name)
    ctx.log(f"loading {s.poll_finished} finished + {s.poll_future} waiting rows")
    done, failed = read_row(url, t, "template-done"), read_row(url, t, "template-failed")
    failures = s.poll_finished // 50
    clone(
        url,
        t,
        done,
        s.poll_finished - failures - 365,
        lambda i: {"key": f"f{i}", "timeout": done["timeout"] + i / 1000, "finished_at": now - DAY + i / 1000},
    )
    clone(
        url,
        t,
        failed,
        failures,
        lambda i: {"key": f"x{i}", "error": ERRORS[i % 5] + f" (call {i})", "finished_at": now - 3600 + i / 1000},
    )
    clone(url, t, done, 365, lambda i: {"key": f"nightly.{int(now - DAY * (365 - i))}", "type": "report"})
    waiting = read_row(url, t, "template-waiting")
    clone(
        url,
        t,
        waiting,
        s.poll_future,
        lambda i: {
            "key": f"w{i}",
            "run_at": now - 600 + i / 1000,
            "timeout": now - 600 + i / 1000,
            "user": "acme" if i % 10 == 0 else None,
        },
    )
    with ctx.queue(
        "dashboard", name, fresh=False
    ) as q:  # the failed rows cloned by hand: noted as a failure notes them
        q.db.run(q.store.failures.note_all_failed, what="note the failed rows")
    analyze(url, name)


class Dashboard(Scenario):
    name = "dashboard"
    title = "15. Dashboard pages at scale"

    def setup(self, ctx: Context) -> None:
        self.table = ctx.table("dash")
        load(ctx, self.table)
        url = ctx.url("dashboard")
        self.sched = perfectsched.open(url, self.table + "_s", self.table)
        self.sched.init()
        for i in range(20):
            self.sched.add(f"s{i}", "report", cron=f"{i} 3 * * *", timezone="Europe/Berlin")
        self.sched.add("nightly", "report", cron="0 2 * * *", timezone="America/New_York")
        q = self.sched.queue
        for i in range(100):
            q.submit(f"tagged{i}", "noop", tags=["customer:acme", "invoice"])
        for i in range(30):
            flow.start(f"run{i}", queue=q)
        self.run_id = "run29"
        self.cursor = q.browse(limit=50).next_cursor

    def run(self, ctx: Context, out: Sample) -> None:
        from pqweb.app import create_app
        from pqweb.settings import WebSettings

        with warnings.catch_warnings():  # Starlette asks for httpx2; httpx serves its TestClient the same
            warnings.simplefilter("ignore")
            from starlette.testclient import TestClient

        client = TestClient(create_app(self.sched.queue, WebSettings(), scheduler=self.sched))
        values = {"task": "x17", "run": self.run_id, "cursor": self.cursor}
        worst = 0.0
        for key, label, path in PAGES:
            url = path.format(**values)
            client.get(url)  # warm-up (templates compiled, connections opened)
            p95 = _p95(timed_calls(lambda u=url: _get(client, u), ctx.sizes.dash_count)) * 1000
            out.metric("dashboard", f"{key}_p95_ms", p95, f"{label}: p95 server time", "ms")
            worst = max(worst, p95)
        out.metric("dashboard", "worst_p95_ms", worst, "slowest page: p95 server time", "ms")

    def teardown(self, ctx: Context) -> None:
        self.sched.close()


def _get(client, url: str) -> None:
    r = client.get(url)
    if r.status_code != 200:
        raise BenchError(f"dashboard page {url} answered {r.status_code}")


def _p95(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=20, method="inclusive")[-1] if len(samples) > 1 else samples[0]
