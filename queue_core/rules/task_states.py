"""A task row's states, in one vocabulary: the states stored in its columns, which the store's
transitions change (``store/transitions.py``), and the status a reader sees at a time ``now``.

Stored: a row is **pending** (``state`` = :data:`PENDING`), **waiting** (``state`` = :data:`LIVE`,
``leased`` = 0), **leased** (``state`` = :data:`LIVE`, ``leased`` = 1) or **finished** (``state`` =
:data:`FINISHED`). A reader sees a leased row as **running** while its lease lasts (``timeout`` >
now) and as **waiting** once it expired (it is claimable again): :func:`status_of`.

The ``timeout`` column is the one time the claim, the purge and the readers look at, named by the
state: a waiting row's **due time**, a leased row's **lease expiry**, a finished row's **purge
time** (``TaskMetadata.due_at``, ``lease_expires_at``, ``purge_at``); a pending row's is never
(``FOREVER``). What each column means in each state is drawn in docs/state-machines.md.
"""

from __future__ import annotations

from enum import StrEnum

from . import policy

#: ``state``: waiting (due at ``timeout``) or leased (until ``timeout``)
LIVE = 0
#: ``state``: done, with an ``outcome``; purged after ``timeout``
FINISHED = 1
#: ``state``: waits for an event, not a time (a workflow step whose parents are not done): never claimed
PENDING = 2


class TaskState(StrEnum):
    """A task row's state: one of :data:`STORED` (what transitions require and write) or of
    :data:`STATUSES` (what a reader sees)."""

    #: no row: before its insert, after its purge or delete
    ABSENT = "absent"
    #: exists but is never claimed; waits for an event, not a time (a workflow step whose parents
    #: are not done, a workflow run row)
    PENDING = "pending"
    #: claimable from its due time (stored: not leased; seen: also a leased row whose lease expired)
    WAITING = "waiting"
    #: stored only: a worker holds the lease until it expires; then the row is claimable again
    #: and its old holder is fenced out by the next claim
    LEASED = "leased"
    #: seen only: a leased row whose lease lasts
    RUNNING = "running"
    #: ended with an outcome; purged when its retention ends
    FINISHED = "finished"


#: the states a transition names (``store/transitions.py``); ABSENT is no row
STORED = (TaskState.ABSENT, TaskState.PENDING, TaskState.WAITING, TaskState.LEASED, TaskState.FINISHED)
#: the statuses a reader sees (``Task.status``, ``perfectqueue list --status``), as their values
STATUSES = tuple(s.value for s in (TaskState.PENDING, TaskState.WAITING, TaskState.RUNNING, TaskState.FINISHED))


def status_of(state: int, leased: int, timeout: float, now: float) -> str:
    """What a reader sees at ``now`` of a row stored with these columns (a :data:`STATUSES` value)."""
    if state == FINISHED:
        return TaskState.FINISHED.value
    if state == PENDING:
        return TaskState.PENDING.value
    seen = TaskState.RUNNING if policy.lease_held(bool(leased), timeout, now) else TaskState.WAITING
    return seen.value
