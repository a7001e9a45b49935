"""The allowed state changes of a task row and of a schedule's lease: one table each (store layer).

Every write of the store is a named transition of these tables. Its method builds the
precondition of its statement here (:func:`task_where`, :func:`schedule_where`): the states
the row may be in, and the fences the transition needs (the holder's lease token, the due
time, the expected occurrence); the statement then reports whether it applied. A caller whose
precondition no longer holds changes nothing. ``docs/state-machines.md`` shows the same tables
(``tests/unit/test_state_machine_docs.py`` compares them) with each column's meaning per state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Generic, TypeVar

import sqlalchemy as sa

from ..rules import policy
from ..rules.task_states import FINISHED, LIVE, PENDING, TaskState


class ScheduleState(StrEnum):
    """The stored states of a schedule row (columns ``leased`` and ``error``)."""

    #: no row: before ``add``, after ``delete``
    ABSENT = "absent"
    #: error NULL, leased 0: due at its next run time
    IDLE = "idle"
    #: error NULL, leased 1: a poller holds occurrence ``next_time`` until the lease expires (then
    #: due again)
    LEASED = "leased"
    #: error set (leased 0, timeout FOREVER): it cannot be computed (a row edited by hand, a
    #: timezone this host lacks); never due until an operator modifies or resumes it
    SET_ASIDE = "set_aside"


class Fence(StrEnum):
    """A condition a transition's statement carries besides the row's state."""

    #: ``lease_token = :token``: only the holder of this very lease
    TOKEN = "lease token"
    #: ``lease_token <> :token``: a later lease than the caller's (not one an operator ended)
    LATER_LEASE = "later lease"
    #: ``timeout <= :now``: the row is due (a waiting row's due time, an expired lease, an ended retention)
    DUE = "due"
    #: ``timeout > :now``: the lease has not expired (an expired one is never revived)
    UNEXPIRED = "unexpired"
    #: ``leased = 0 OR timeout <= :now``: nobody runs it now
    NOT_RUNNING = "not running"
    #: ``next_time = :expected``: the schedule is still at the occurrence the caller read
    OCCURRENCE = "occurrence"
    #: ``key = :key AND created_at = :created``: still the caller's task, not a new one that took
    #: its id (SQLite gives a purged row's id to the next row) or its key
    SAME_TASK = "same task"
    #: ``workflow IS NULL``: a plain task, not a row of a workflow run
    PLAIN = "plain task"
    #: ``workflow IS NOT NULL``: a row of a workflow run
    WORKFLOW = "workflow row"
    #: ``outcome = 'failure'``: the task ended as failure
    FAILED = "failed"
    #: ``workflow = :read``: the row's bookkeeping is still what its decider read
    BOOKKEEPING = "bookkeeping as read"


#: the states of one table's transitions: TaskState or ScheduleState
S = TypeVar("S", bound=StrEnum)


@dataclass(frozen=True)
class Transition(Generic[S]):
    name: str
    sources: tuple[S, ...]
    targets: tuple[S, ...]
    fences: tuple[Fence, ...]
    #: the methods that write it
    methods: str
    what: str


_A, _P, _W, _L, _F = TaskState.ABSENT, TaskState.PENDING, TaskState.WAITING, TaskState.LEASED, TaskState.FINISHED
_ROWS = (_P, _W, _L, _F)


def _task(
    name: str, sources: Iterable[S], targets: Iterable[S], fences: Iterable[Fence], methods: str, what: str
) -> Transition[S]:
    return Transition(name, tuple(sources), tuple(targets), tuple(fences), methods, what)


#: The transitions of a task row. Targets equal to the sources: the state does not change.
TASK_TRANSITIONS: dict[str, Transition[TaskState]] = {
    x.name: x
    for x in (
        _task("submit", [_A], [_W, _P], [], "SqlStore.task_insert", "insert if the key is free"),
        _task(
            "claim",
            [_W, _L],
            [_L],
            [Fence.DUE],
            "SqlStore.task_claim",
            "lease a due row: new token, attempts + 1, expiry now + alive_time",
        ),
        _task(
            "give_up",
            [_W, _L],
            [_F],
            [Fence.DUE],
            "SqlStore.task_claim",
            "a due row that must not run again (cancel requested, attempts used up) ends at claim",
        ),
        _task(
            "set_aside",
            [_W, _L],
            [_F],
            [Fence.DUE],
            "SqlStore.task_claim",
            "a due row holding a value pq never writes (edited by hand) ends at claim as failure, the reason "
            "as its error",
        ),
        _task(
            "heartbeat",
            [_L],
            [_L],
            [Fence.TOKEN, Fence.UNEXPIRED],
            "SqlStore.task_heartbeat",
            "the holder extends its unexpired lease (and may replace the data)",
        ),
        _task(
            "renew_claim",
            [_L],
            [_L],
            [Fence.TOKEN],
            "SqlStore.task_claim",
            "a claim run again after its COMMIT's acknowledgement was lost renews the leases its first run "
            "wrote, expired or not (its token still on them: nobody claimed them since), before delivering them",
        ),
        _task(
            "finish",
            [_L],
            [_F],
            [Fence.TOKEN],
            "SqlStore.task_finish, SqlStore.task_settle, SqlStore.run_finish_held(_many)",
            "the holder ends the task",
        ),
        _task(
            "retry",
            [_L],
            [_W],
            [Fence.TOKEN],
            "SqlStore.task_retry, SqlStore.run_retry_held",
            "the holder gives the task back, due later",
        ),
        _task(
            "release",
            [_L],
            [_W],
            [Fence.TOKEN],
            "SqlStore.task_release, SqlStore.task_release_batch, SqlStore.task_lost_before_start",
            "the holder gives the task back unrun, due now, its attempt given back",
        ),
        _task(
            "return_attempt",
            [_W, _L, _F],
            [_W, _L, _F],
            [Fence.LATER_LEASE, Fence.SAME_TASK],
            "SqlStore.task_lost_before_start",
            "give back the attempt of a lease taken over before its handler started",
        ),
        _task(
            "force_finish",
            [_W, _L],
            [_F],
            [Fence.PLAIN],
            "SqlStore.task_force_finish",
            "an operator ends a plain task, held or not",
        ),
        _task(
            "requeue",
            [_F],
            [_W],
            [Fence.PLAIN, Fence.FAILED],
            "SqlStore.failure_requeue",
            "an operator runs a failed task again: waiting, due now, fresh attempts",
        ),
        _task(
            "cancel",
            [_W, _L],
            [_F],
            [Fence.NOT_RUNNING],
            "SqlStore.task_cancel, SqlStore.run_cancel_waiting",
            "a task nobody runs ends as cancelled",
        ),
        _task(
            "request_cancel",
            [_W, _L],
            [_W, _L],
            [],
            "SqlStore.task_cancel, SqlStore.run_cancel_waiting",
            "flag a running task (its holder is told) or a waiting row of a run (made due)",
        ),
        _task(
            "move",
            [_P, _W, _L],
            [_P, _W, _L],
            [Fence.NOT_RUNNING],
            "SqlStore.task_move",
            "an operator moves a task nobody runs to another queue",
        ),
        _task(
            "set_data",
            _ROWS,
            _ROWS,
            [],
            "SqlStore.task_set_data",
            "replace the data of a row the caller's transaction has locked",
        ),
        _task(
            "track", _ROWS, _ROWS, [], "SqlStore.task_set_tracked", "an operator tracks a task, or stops tracking it"
        ),
        _task(
            "purge",
            [_F],
            [_A],
            [Fence.DUE],
            "SqlStore.task_purge, SqlStore.task_insert",
            "delete a finished row whose retention ended",
        ),
        _task("adopt", [_L], [_P], [Fence.TOKEN], "SqlStore.run_adopt", "the decider makes a submitted row a run"),
        _task(
            "mark",
            [_W, _L, _F],
            [_W, _L, _F],
            [Fence.PLAIN],
            "SqlStore.run_mark",
            "list a row no decider took up as a run",
        ),
        _task(
            "set_workflow",
            [_P, _W, _L],
            [_P, _W, _L],
            [],
            "SqlStore.run_set_workflow(_many)",
            "new bookkeeping of a row still in the state its run read",
        ),
        _task("promote", [_P], [_W], [], "SqlStore.run_promote", "a step whose parents are done, due now"),
        _task(
            "start_map",
            [_P],
            [_P],
            [Fence.BOOKKEEPING],
            "SqlStore.run_start_maps",
            "a map whose items are submitted takes their count, once: a map starts once",
        ),
        _task("close", [_P], [_F], [], "SqlStore.run_close(_many)", "a pending row ends without running"),
        _task("keep_group", [_F], [_F], [], "SqlStore.run_group_keep", "set the retention of a run's finished rows"),
        _task(
            "reopen",
            [_F],
            [_W, _P],
            [],
            "SqlStore.run_reopen_steps, SqlStore.run_reopen",
            "a finished row of a retried run, fresh attempts",
        ),
        _task(
            "clear_group",
            _ROWS,
            [_A],
            [Fence.WORKFLOW],
            "SqlStore.run_group_clear",
            "delete the workflow rows of a group (an earlier run with this id, a map's old items)",
        ),
    )
}

#: The event (``<table>_events``, ``store/events.py``) each task transition appends for the rows
#: it changed; the others append none (a heartbeat, bookkeeping, a purge, which deletes the
#: events with the row). A submission's event is its row (``submitted``).
TASK_EVENTS: dict[str, str] = {
    "claim": "claimed",
    "give_up": "gave_up",
    "set_aside": "set_aside",
    "finish": "finished",
    "retry": "retried",
    "release": "released",
    "return_attempt": "attempt_returned",
    "force_finish": "force_finished",
    "requeue": "requeued",
    "cancel": "cancelled",
    "request_cancel": "cancel_requested",
    "move": "moved",
    "adopt": "adopted",
    "promote": "promoted",
    "close": "closed",
    "reopen": "reopened",
}

_SA, _SI, _SL, _SX = ScheduleState.ABSENT, ScheduleState.IDLE, ScheduleState.LEASED, ScheduleState.SET_ASIDE

#: The transitions of a schedule's lease (all in :class:`~queue_core.store.schedules.SqlScheduleStore`).
SCHEDULE_TRANSITIONS: dict[str, Transition[ScheduleState]] = {
    x.name: x
    for x in (
        _task("add", [_SA], [_SI], [], "SqlScheduleStore.schedule_add", "insert if the key is free"),
        _task(
            "lease",
            [_SI, _SL],
            [_SL],
            [Fence.DUE, Fence.OCCURRENCE],
            "SqlScheduleStore.schedule_lease",
            "a poller leases the due occurrence: new token, expiry now + alive_time",
        ),
        _task(
            "advance",
            [_SI, _SL],
            [_SI],
            [Fence.DUE, Fence.OCCURRENCE],
            "SqlScheduleStore.schedule_advance_many",
            "tick submitted the due occurrences, or poll skipped missed ones: next occurrence, lease dropped",
        ),
        _task(
            "set_aside",
            [_SI, _SL],
            [_SX],
            [Fence.DUE, Fence.OCCURRENCE],
            "SqlScheduleStore.schedule_set_aside",
            "tick or poll cannot compute the due schedule: its error recorded, never due, lease dropped",
        ),
        _task(
            "heartbeat",
            [_SL],
            [_SL],
            [Fence.TOKEN, Fence.UNEXPIRED],
            "SqlScheduleStore.schedule_heartbeat",
            "the holder extends its unexpired lease",
        ),
        _task(
            "finish",
            [_SL],
            [_SI],
            [Fence.TOKEN],
            "SqlScheduleStore.schedule_finish",
            "the holder moves on to the next occurrence",
        ),
        _task(
            "retry",
            [_SL],
            [_SI],
            [Fence.TOKEN],
            "SqlScheduleStore.schedule_retry",
            "the holder gives the occurrence back, due later",
        ),
        _task(
            "release",
            [_SL],
            [_SI],
            [Fence.TOKEN],
            "SqlScheduleStore.schedule_release",
            "the holder gives the occurrence back, due now",
        ),
        _task(
            "resume",
            [_SX],
            [_SI],
            [Fence.OCCURRENCE],
            "SqlScheduleStore.schedule_resume",
            "an operator brings it back as it is: error cleared, due at its next run time",
        ),
        _task(
            "configure",
            [_SI, _SL],
            [_SI, _SL],
            [],
            "SqlScheduleStore.schedule_configure",
            "new type, data or catch-up policy; times and lease unchanged",
        ),
        _task(
            "reschedule",
            [_SI, _SL, _SX],
            [_SI],
            [],
            "SqlScheduleStore.schedule_reschedule",
            "new cron, timezone, delay or dst policy, or any change of one set aside or that cannot be "
            "computed: next occurrence from now, lease and error dropped",
        ),
        _task("delete", [_SI, _SL, _SX], [_SA], [], "SqlScheduleStore.schedule_delete", "remove the schedule"),
    )
}


def _task_states(t: sa.Table, states: Iterable[TaskState]) -> list:
    states = set(states) - {_A}
    if states >= set(_ROWS):
        return []
    live = {_W, _L} & states
    clauses = (
        [t.c.state == LIVE]
        if len(live) == 2
        else [sa.and_(t.c.state == LIVE, t.c.leased == (1 if _L in live else 0))]
        if live
        else []
    )
    clauses += [t.c.state == code for s, code in ((_P, PENDING), (_F, FINISHED)) if s in states]
    return [clauses[0] if len(clauses) == 1 else sa.or_(*clauses)]


def _schedule_states(t: sa.Table, states: Iterable[ScheduleState]) -> list:
    states = set(states) - {_SA}
    if states >= {_SI, _SL, _SX}:
        return []
    if states == {_SI, _SL}:
        return [t.c.error.is_(None)]
    stored = {
        _SI: sa.and_(t.c.error.is_(None), t.c.leased == 0),
        _SL: sa.and_(t.c.error.is_(None), t.c.leased == 1),
        _SX: t.c.error.is_not(None),
    }
    clauses = [stored[s] for s in sorted(states)]
    return [clauses[0] if len(clauses) == 1 else sa.or_(*clauses)]


#: a fence value compared row by row by ``Dialect.update_each(match=[column])``
PER_ROW: Any = object()


def _fence(t: sa.Table, fence: Fence, params: dict) -> Any:
    def need(name):
        if name not in params:
            raise TypeError(f"the fence {fence.value!r} needs {name}=")
        return params[name]

    if fence is Fence.TOKEN:
        token = need("token")
        return None if token is PER_ROW else t.c.lease_token == token
    if fence is Fence.LATER_LEASE:
        return t.c.lease_token != need("token")
    if fence is Fence.DUE:
        return t.c.timeout <= need("now")
    if fence is Fence.UNEXPIRED:
        return t.c.timeout > need("now")  # the expiry half of lease_held
    if fence is Fence.NOT_RUNNING:
        return sa.or_(t.c.leased == 0, t.c.timeout <= need("now"))
    if fence is Fence.OCCURRENCE:
        return t.c.next_time == need("expected")
    if fence is Fence.SAME_TASK:
        return sa.and_(t.c.key == need("key"), t.c.created_at == need("created"))
    if fence is Fence.FAILED:
        return t.c.outcome == "failure"
    if fence is Fence.BOOKKEEPING:
        return t.c.workflow == need("read")
    return t.c.workflow.is_(None) if fence is Fence.PLAIN else t.c.workflow.is_not(None)


def lease_held(t: sa.Table, now: Any) -> Any:
    """:func:`queue_core.rules.policy.lease_held` in SQL: the row is leased and its lease unexpired."""
    return sa.and_(t.c.leased == 1, t.c.timeout > now)


def status_where(t: sa.Table, status: str, now: Any) -> Any:
    """:func:`queue_core.rules.task_states.status_of` in SQL: the rows a reader sees with ``status``
    (a ``STATUSES`` value) at ``now``."""
    running = sa.and_(t.c.state == LIVE, lease_held(t, now))
    if status == "finished":
        return t.c.state == FINISHED
    if status == "running":
        return running
    if status == "waiting":
        return sa.and_(t.c.state == LIVE, sa.not_(running))
    if status == "pending":
        return t.c.state == PENDING
    raise ValueError(status)


def lease_counted(t: sa.Table, now: Any) -> Any:
    """:func:`queue_core.rules.policy.counts_towards_cap` in SQL: a held lease no longer than any claim
    or heartbeat writes."""
    return sa.and_(lease_held(t, now), t.c.timeout <= now + policy.MAX_LEASE)


def task_where(t: sa.Table, name: str, *, only: Iterable[TaskState] | None = None, **params: Any) -> list:
    """The precondition of the task transition ``name``: its source states (``only``: those of
    them the caller expects) and its fences, with ``token``, ``now`` as they need (``token=PER_ROW``:
    the caller's ``update_each`` matches each row's ``lease_token``)."""
    tr = TASK_TRANSITIONS[name]
    sources = tr.sources if only is None else tuple(only)
    if not set(sources) <= set(tr.sources):
        raise ValueError(f"{name} does not start from {sorted(set(sources) - set(tr.sources))}")
    fences = (_fence(t, f, params) for f in tr.fences)
    return [*_task_states(t, sources), *(c for c in fences if c is not None)]


def schedule_where(t: sa.Table, name: str, **params: Any) -> list:
    """The precondition of the schedule transition ``name`` (``token``, ``now``, ``expected``
    as its fences need)."""
    tr = SCHEDULE_TRANSITIONS[name]
    return [*_schedule_states(t, tr.sources), *(_fence(t, f, params) for f in tr.fences)]
