"""Tags on schedules and workflow steps, on SQLite, MariaDB and PostgreSQL: every task a
schedule submits carries its tags (changed by modify, for the occurrences after it); a workflow's
tags go on its run row and every step and map item, a step's own on its tasks; found by
``list(tag=...)``. Hostile tags are typed errors, and a tags column edited by hand sets the
schedule aside with the column named."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from workflow_faults.fault_support import drive

import pqflow
from pqflow import WorkflowDefinitionError
from queue_core import ValidationError

T0 = 1_700_000_000.0  # the clock fixture's start (a Tuesday, 22:13:20 UTC)

tagged = pqflow.Workflow("it_tagged", retry_wait=0, tags=["etl", "customer:acme"])


@tagged.step()
def extract(ctx):
    return [1, 2]


@tagged.step(map=extract, tags=["heavy"])
def crunch(ctx, item):
    return item


@tagged.step(after=crunch)
def load(ctx, crunch):
    return sum(crunch)


class Decider(pqflow.Decider):
    workflows = [tagged]


def keys(q, tag):
    return sorted(m.key for m in q.list(tag=tag))


def test_every_occurrence_carries_the_schedules_tags_until_they_change(sched, queue, clock):
    sched.add("nightly", "report", cron="0 * * * *", tags=["nightly", "customer:acme", "nightly"])
    assert next(sched.list()).tags == ("customer:acme", "nightly")
    clock.advance(3600)
    assert sched.tick() == 1
    first = keys(queue, "nightly")
    assert len(first) == 1 and keys(queue, "customer:acme") == first
    sched.modify("nightly", tags=["weekly"])
    clock.advance(3600)
    sched.tick()
    assert keys(queue, "nightly") == first and len(keys(queue, "weekly")) == 1
    sched.modify("nightly", tags=[])
    clock.advance(3600)
    sched.tick()
    assert next(sched.list()).tags == ()
    assert len(list(queue.list())) == 3 and len(keys(queue, "weekly")) == 1


@pytest.mark.parametrize("bad", ["one tag", ["x" * 101], ["\x00"], [1], [None], [f"t{i}" for i in range(33)]])
def test_hostile_schedule_tags_are_refused_and_nothing_is_written(sched, bad):
    with pytest.raises(ValidationError):
        sched.add("x", "t", cron="0 * * * *", tags=bad)
    assert list(sched.list()) == []


def test_a_tags_column_edited_by_hand_sets_the_schedule_aside_naming_the_column(sched, queue, clock):
    sched.add("h", "t", cron="0 * * * *", tags=["ok"])
    t = sched.store.t
    sched.db.run(lambda c: c.execute(sa.update(t).values(tags='["b", "a"]')))  # unsorted: never written so
    [meta] = list(sched.list())
    assert meta.problem is not None and "column tags" in meta.problem
    clock.advance(3600)
    sched.tick()
    [meta] = list(sched.list())
    assert meta.status == "set_aside" and list(queue.list()) == []


def test_a_workflows_tags_go_on_its_run_and_every_step_and_item(queue):
    tagged.start("r1", {}, queue=queue)
    drive(queue, Decider)
    assert pqflow.get_run("r1", queue=queue).status == "succeeded"
    assert keys(queue, "etl") == ["r1", "r1#crunch", "r1#crunch#0", "r1#crunch#1", "r1#extract", "r1#load"]
    assert keys(queue, "customer:acme") == keys(queue, "etl")
    assert keys(queue, "heavy") == ["r1#crunch", "r1#crunch#0", "r1#crunch#1"]


def test_hostile_workflow_tags_are_definition_errors():
    with pytest.raises(WorkflowDefinitionError):
        pqflow.Workflow("it_bad_tags", tags="one string")
    wf = pqflow.Workflow("it_bad_step_tags")
    with pytest.raises(WorkflowDefinitionError):
        wf.step(tags=["\n"])
