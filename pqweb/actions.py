"""Which actions a row offers in its state, and which ask for confirmation (pure): the templates
show only these buttons and the action handlers refuse any other, so a button never leads to a
refusal page and a hand-made POST meets the same rule."""

from __future__ import annotations

from queue_core.api.task import TaskMetadata

#: the actions that stop or discard work: each asks "are you sure?" first (a page of its own)
DESTRUCTIVE = frozenset({"pause", "cancel", "force-finish", "cancel-run", "delete-schedule"})

#: why an action is not offered, by action (the refusal's text)
WHY_NOT = {
    "retry": "only a failed task can be retried",
    "cancel": "only a task that has not finished can be cancelled",
    "force-finish": "only a waiting or running task can be force-finished",
    "move": "only a task nobody runs can be moved",
    "pause": "the queue is paused already",
    "resume": "the queue is not paused",
    "cancel-run": "only a running run can be cancelled",
    "retry-run": "only a failed or cancelled run can be retried",
}


def task_actions(task: TaskMetadata) -> tuple[str, ...]:
    """The actions valid for ``task`` in its state (retry, cancel, force-finish, move)."""
    if task.finished:  # a workflow's failed row is retried with its run (the run page)
        return ("retry",) if task.outcome == "failure" and not task.in_workflow else ()
    if task.status == "pending":  # a row of a run waiting for its parents
        return ("move",)
    if task.running:
        return () if task.cancel_requested else ("cancel", "force-finish")
    return ("cancel", "force-finish", "move")


def queue_actions(paused: bool) -> tuple[str, ...]:
    """The actions valid for a queue that is ``paused`` or not."""
    return ("resume",) if paused else ("pause",)


def run_actions(status: str, cancel_requested: bool = False) -> tuple[str, ...]:
    """The actions valid for a run of ``status``."""
    if status == "running":
        return () if cancel_requested else ("cancel-run",)
    return ("retry-run",) if status in ("failed", "cancelled") else ()
