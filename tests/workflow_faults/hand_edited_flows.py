"""The workflows of the tests of hand-edited and copied step rows (two roots, a step after one of
them, a step that runs whatever its parent did (``all_done``), a map and its join), and how those
tests run a claimed task in process."""

from __future__ import annotations

import pqflow

w = pqflow.Workflow("hand_edited", retry_wait=0)


@w.step()
def load(ctx):
    return 1


@w.step(after=[load])
def report(ctx, load):
    return load + 1


@w.step(after=[load], trigger="all_done")
def cleanup(ctx, load):
    return "cleaned"


@w.step()
def items(ctx):
    return [1, 2, 3]


@w.step(map=items)
def double(ctx, item):
    return 2 * item


@w.step(after=[double], trigger="all_done")
def total(ctx, double):
    return {"double": double, "failed": {step: sorted(failed) for step, failed in ctx.failed_items.items()}}


one = pqflow.Workflow("hand_edited_one", retry_wait=0)


@one.step()
def only(ctx):
    return 1


class Decider(pqflow.Decider):
    workflows = [w, one]


def run_task(q, task) -> None:
    """Run a claimed task as a worker does: its handler, then its deferred finish."""
    Decider(task).run()
    if task.deferred is not None:
        q.finish_many([task])
