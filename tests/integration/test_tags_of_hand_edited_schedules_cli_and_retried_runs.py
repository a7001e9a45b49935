"""Tags of schedules and workflow runs: a tags column edited by hand names the column, the
perfectsched CLI's add, modify, show and ``list --json`` carry the tags, and a retried run keeps
the tags of its rows and items."""

from __future__ import annotations

import json
import os

import pytest
import sqlalchemy as sa
from click.testing import CliRunner
from workflow_faults.fault_support import drive

import pqflow
from perfectsched.cli import cli as sched_cli


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


class Decider(pqflow.Decider):
    workflows = [wf]


def test_a_retried_run_keeps_the_tags_of_its_rows_and_items(queue):
    wf.start("r", {"fail": True}, queue=queue)
    drive(queue, Decider)
    run = pqflow.get_run("r", queue=queue)
    assert run.status == "failed", run.status
    before = sorted(m.key for m in queue.list(tag="mapped"))
    pqflow.retry_run(queue, "r")
    drive(queue, Decider)
    assert sorted(m.key for m in queue.list(tag="mapped")) == before
    assert sorted(m.key for m in queue.list(tag="wf")) == sorted(m.key for m in queue.list())
