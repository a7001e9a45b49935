"""Tags of schedules and workflows, on SQLite, MariaDB and PostgreSQL: every task a schedule
submits carries its tags; a workflow's tags go on its run row and every step and map item, a
step's own on its tasks; a retried run keeps them; a run started again with the same id deletes
its old rows' tags in the same transaction; a tags column edited by hand names the column; the
perfectsched CLI carries the tags."""

from __future__ import annotations

import json
import os

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from workflow_faults.fault_support import drive

import pqflow
from perfectsched.cli import cli as sched_cli
from pqflow import WorkflowDefinitionError
from queue_core import ValidationError

# Tags on schedules and workflow steps, on SQLite, MariaDB and PostgreSQL: every task a schedule
# submits carries its tags (changed by modify, for the occurrences after it); a workflow's tags go
# on its run row and every step and map item, a step's own on its tasks; found by ``list(tag=...)``.
# Hostile tags are typed errors, and a tags column edited by hand sets the schedule aside with the
# column named.


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


class TaggedDecider(pqflow.Decider):
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
    drive(queue, TaggedDecider)
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


# Tags of schedules and workflow runs: a tags column edited by hand names the column, the
# perfectsched CLI's add, modify, show and ``list --json`` carry the tags, and a retried run keeps
# the tags of its rows and items.


def _edit_tags(sched, value):
    t = sched.store.t
    sched.db.run(lambda c: c.execute(sa.update(t).values(tags=value)))


@pytest.mark.parametrize("value", ["[1]", '[""]', '["' + "x" * 101 + '"]', '["a\\u0000"]', "[null]"])
def test_a_hand_edited_tags_column_names_the_column(sched, queue, clock, value):
    """The docs and the tags test promise: a tags column edited by hand sets the schedule aside
    "with the column named". A list whose items are not valid tags raises check_tag's own
    ValidationError ("tag must be a string, not 1"), which rows._column lets through unchanged:
    neither the problem nor the set-aside reason names the column."""
    sched.add("h", "t", cron="0 * * * *", tags=["ok"])
    _edit_tags(sched, value)
    [meta] = list(sched.list())
    assert meta.problem is not None and "tags" in meta.problem, meta.problem
    clock.advance(3600)
    sched.tick()
    [meta] = list(sched.list())
    assert meta.status == "set_aside" and list(queue.list()) == []
    assert "tags" in (meta.error or ""), meta.error


def test_cli_add_modify_show_and_list_json_carry_the_tags(sched, db_url, table_name):
    env = {k: None for k in os.environ if k.startswith("PQ_")}
    where = ["-D", db_url, "--schedule-table", table_name + "_s", "--table", table_name]
    r = CliRunner().invoke(sched_cli, ["add", "c", "t", "0 * * * *", "--tag", "b", "--tag", "a", *where], env=env)
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(sched_cli, ["show", "c", "--format", "json", *where], env=env)
    assert json.loads(r.output)["tags"] == ["a", "b"], r.output
    r = CliRunner().invoke(sched_cli, ["modify", "c", "--no-tags", *where], env=env)
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(sched_cli, ["list", "--format", "json", *where], env=env)
    assert json.loads(r.output)[0]["tags"] == [], r.output


wf = pqflow.Workflow("r15d_tagged", retry_wait=0, tags=["wf"])


@wf.step()
def first(ctx):
    return [1, 2]


@wf.step(map=first, tags=["mapped"])
def each(ctx, item):
    if item == 2 and ctx.data.get("fail", True):
        raise RuntimeError("boom")
    return item


class RetriedDecider(pqflow.Decider):
    workflows = [wf]


def test_a_retried_run_keeps_the_tags_of_its_rows_and_items(queue):
    wf.start("r", {"fail": True}, queue=queue)
    drive(queue, RetriedDecider)
    run = pqflow.get_run("r", queue=queue)
    assert run.status == "failed", run.status
    before = sorted(m.key for m in queue.list(tag="mapped"))
    pqflow.retry_run(queue, "r")
    drive(queue, RetriedDecider)
    assert sorted(m.key for m in queue.list(tag="mapped")) == before
    assert sorted(m.key for m in queue.list(tag="wf")) == sorted(m.key for m in queue.list())


# A workflow run started again with the same id (SqlStore.run_group_clear) deletes its old rows' tags in
# the same transaction.


RUN = {"workflow": '{"w": 1}'}


def tag_rows(q):
    tg = q.store.tags_t
    return q.db.run(lambda c: sorted(tuple(r) for r in c.execute(sa.select(tg.c.tag, tg.c.task_id))))


def test_clear_group_takes_the_tags_of_the_rows_it_deletes_and_a_restart_has_only_new_tags(queue):
    """Run rows s1, s2 of group g tagged 'old' (s1 also tagged later by tag());
    a plain task naming g tagged 'plain'. In one transaction, the run restarts: clear_group(g)
    then submit_rows of s1 (tag 'new'). s1 shows only 'new', no row is listed under 'old', the
    plain task keeps 'plain', and no tag row names a deleted row."""
    queue.transaction(
        lambda tx: tx.submit_rows(
            [{"key": k, "type": "t", "group": "g", "tags": ["old"], **RUN} for k in ("s1", "s2")]
        ),
        now=T0,
    )
    queue["s1"].tag("later")
    queue.submit("plain", "t", group="g", tags=["plain"], now=T0)

    def restart(tx):
        tx.store.run_group_clear(tx.conn, "g")
        return tx.submit_rows([{"key": "s1", "type": "t", "group": "g", "tags": ["new"], **RUN}])

    assert queue.transaction(restart, now=T0) == 1
    assert queue["s1"].metadata().tags == ("new",)
    assert [m.key for m in queue.list(tag="old")] == []
    assert [m.key for m in queue.list(tag="later")] == []
    assert queue["plain"].metadata().tags == ("plain",)
    ids = {queue.store.task_get(k)["id"] for k in ("s1", "plain")}
    assert {task_id for _, task_id in tag_rows(queue)} == ids
