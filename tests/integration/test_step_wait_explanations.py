"""What ``why`` says a waiting step waits for, on SQLite, MariaDB and PostgreSQL, driven
in-process with an injected clock: the backoff of a retry (when, which attempt of how many), no
live worker serving its type, a paused queue; a run no live decider serves says so."""

from __future__ import annotations

import datetime as dt
import json

import pytest

import pqflow
from pqflow import decision
from queue_core.store.workers import WorkerIdentity

#: midnight UTC: a backoff of an hour ends the same day
MIDNIGHT = 1_699_920_000.0

slow = pqflow.Workflow("why_slow", retries=3, retry_wait=3600)


@slow.step()
def load(ctx):
    raise ValueError("api down")


class Decider(pqflow.Decider):
    workflows = [slow]


def register(q, pid: int, types, queues=("default",)) -> None:
    """A live worker in the registry serving ``types`` (None: any) from ``queues``."""
    types_json = None if types is None else json.dumps(sorted(types))
    worker = WorkerIdentity(f"host:{pid}", "host", pid, json.dumps(list(queues)), types_json, "test")
    q.store.worker_register(worker, q.now())


def drive(q) -> None:
    """Serve every due task in this process, as a worker would, until none is due."""
    while (task := q.poll(alive_time=30)) is not None:
        Decider(task).run()
        if task.deferred is not None:
            assert q.finish_many([task]) == []


def at(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%H:%M:%SZ")


@pytest.fixture
def q(queue, clock):
    clock.set(MIDNIGHT)
    return queue


def test_a_step_in_backoff_says_when_it_retries_and_which_attempt(q, clock):
    register(q, 1, Decider.served_types())
    slow.start("r1", {}, queue=q)
    drive(q)
    due = q["r1#load"].metadata().run_at
    assert due > clock.now() + 60  # in its backoff
    run = pqflow.get_run("r1", queue=q)
    assert run.steps["load"].status == "waiting"
    assert run.why("load") == f"step 'load' is waiting: retrying at {at(due)} (attempt 2 of 4, backoff)"
    clock.set(due + 1)
    register(q, 1, Decider.served_types())  # renewed while it ran
    drive(q)  # the second attempt fails too: the third is due an hour later
    due = q["r1#load"].metadata().run_at
    assert pqflow.get_run("r1", queue=q).why("load").endswith(f"retrying at {at(due)} (attempt 3 of 4, backoff)")


def test_a_step_whose_type_no_live_worker_serves_says_so(q, clock):
    slow.start("r2", {}, queue=q)
    register(q, 2, ["other.type"])
    register(q, 3, Decider.served_types(), queues=("elsewhere",))
    run = pqflow.get_run("r2", queue=q)
    assert run.steps["load"].status == "waiting"
    assert run.why("load") == (
        "step 'load' is waiting: no live worker serves queue default (type why_slow.load is served in other queues)"
    )
    q.store.worker_remove("host:3")
    assert run.why("load") == "step 'load' is waiting: no live worker serves type why_slow.load"
    register(q, 4, None)  # serves any type
    assert run.why("load") == "step 'load' is waiting: in the queue for a free worker (a live worker serves it)"
    q.pause("default")
    assert run.why("load") == "step 'load' is waiting: queue default is paused"


def test_a_worker_silent_past_the_registry_timeout_serves_nothing(q, clock):
    register(q, 5, Decider.served_types())
    slow.start("r3", {}, queue=q)
    run = pqflow.get_run("r3", queue=q)
    assert "no live worker" not in run.why("load")
    clock.advance(q.config["registry_timeout"] + 1)
    assert run.why("load") == "step 'load' is waiting: no live worker serves type why_slow.load"


def test_a_run_no_live_decider_serves_says_so_in_why_and_in_the_listing(q):
    q.submit("r4", "why_slwo", {})  # a misspelt workflow, started as a plain task
    register(q, 6, Decider.served_types())
    run = pqflow.get_run("r4", queue=q)
    assert run.snapshot is None and run.status == "running"
    expected = "no live worker serves workflow why_slwo"
    assert run.unserved() == expected
    assert run.why("anything") == f"run 'r4' has not been picked up by a decider yet: {expected}"
    q.transaction(lambda tx: tx.store.run_name_register(tx.conn, "workflow", "why_slwo"))
    listed = pqflow.runs_page(q, workflow="why_slwo").runs
    assert [(r.run_id, r.unserved) for r in listed] == [("r4", expected)]
    register(q, 7, ["why_slwo"])
    assert run.unserved() is None
    assert run.why("anything") == (
        "run 'r4' has not been picked up by a decider yet (a live decider serves workflow why_slwo)"
    )


class _Worker:
    def __init__(self, queues, types):
        self.queues, self.types = tuple(queues), types


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_waiting_for_is_decided_from_the_row_and_the_registry_alone(backend):
    wait = decision.Waiting("etl.load", "default", due_at=MIDNIGHT + 50 * 60, failures=1, retries=3)
    served = [_Worker(["default"], ("etl.load",))]
    assert decision.waiting_for(wait, served, MIDNIGHT) == "retrying at 00:50:00Z (attempt 2 of 4, backoff)"
    late = MIDNIGHT - 3600  # the day before: the date is shown
    assert decision.waiting_for(wait, served, late) == "retrying at 2023-11-14 00:50:00Z (attempt 2 of 4, backoff)"
    first = decision.Waiting("etl.load", "default", due_at=MIDNIGHT + 10)
    assert decision.waiting_for(first, [], MIDNIGHT) == "due at 00:00:10Z; no live worker serves type etl.load"
    assert (
        decision.waiting_for(first, served, MIDNIGHT + 10) == "in the queue for a free worker (a live worker serves it)"
    )
