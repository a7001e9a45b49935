"""Starting a run empties the groups its rows
will use (lifecycle.create_rows -> SqlStore.run_group_clear: DELETE ... WHERE grp = RUN), whatever the
rows are. Queue.submit(group=...) is public API: an unrelated, unfinished plain task whose group
happens to equal a run id (or RUN#mapstep) is deleted without a trace when that run starts.
"""

from __future__ import annotations

import pytest

import pqflow

wf = pqflow.Workflow("rv_grp", retry_wait=0)


@wf.step()
def xs(ctx):
    return [1]


@wf.step(map=xs)
def each(ctx, item):
    return item


@pytest.mark.parametrize("group", ["nightly", "nightly#each"])
def test_start_does_not_delete_unrelated_tasks_of_the_same_group(queue, group):
    queue.submit("invoice-17", "email", {"to": "a@example.com"}, group=group)
    wf.start("nightly", queue=queue)
    assert queue["invoice-17"].exists(), f"starting run 'nightly' deleted a waiting plain task of group {group!r}"
