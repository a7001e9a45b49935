"""Statements on the rows of workflow runs (store layer).

A workflow run is a group of rows of the task table: the run row (key = run id) and one row per
step and per map item (``grp`` = run id), each carrying the workflow runtime's bookkeeping in the
``workflow`` column. The runtime (pqflow) decides; this module only writes, and every write is a
named transition whose precondition is in its WHERE clause (the expected state, and the lease
token wherever a lease exists). Each reports whether it applied.

All methods take the open connection of the caller's transaction: a decision about a run is
one transaction however many rows it touches.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ..rules import policy
from ..rules.task_states import FINISHED, LIVE, PENDING
from .schema import FOREVER
from .transitions import PER_ROW, TaskState, lease_held, task_where

#: the stored ``state`` a caller expects, as states of the transition table
_EXPECTED = {PENDING: (TaskState.PENDING,), LIVE: (TaskState.WAITING, TaskState.LEASED)}

#: column values a run's rows are read with (``data`` and ``result`` only where asked for)
_LIGHT = (
    "id",
    "key",
    "type",
    "state",
    "leased",
    "timeout",
    "outcome",
    "attempts",
    "error",
    "started_at",
    "finished_at",
    "created_at",
    "cancel_requested",
    "lease_token",
    "grp",
    "workflow",
    "resource",
    "queue",
    "run_at",
)


class RunRows:
    """The rows of workflow runs, in the table of a :class:`SqlStore` (one of the parts it is composed
    of: its ``run_*`` operations are these)."""

    def __init__(self, tasks: Any):  # the SqlStore composed of this part
        self.tasks = tasks
        self.t = tasks.t
        self.db = tasks.db
        #: names this process has recorded with :meth:`run_name_register` (committed): not written again
        self.registered_here: set[tuple[str, str]] = set()

    def _cols(self, data: bool, result: bool, definition: bool = False) -> list:
        names = [
            *_LIGHT,
            *(["data"] if data else []),
            *(["result"] if result else []),
            *(["definition"] if definition else []),
        ]
        return [self.t.c[n] for n in names]

    # -- reads --------------------------------------------------------------------------
    def run_read(
        self,
        conn,
        keys: Sequence[str],
        *,
        data: bool = False,
        result: bool = False,
        definition: bool = False,
        lock: bool = False,
    ) -> dict[str, dict]:
        """Rows by key; with ``lock``, row locks held to commit, taken in key order."""
        out: dict[str, dict] = {}
        ordered = sorted(set(keys))
        for i in range(0, len(ordered), 500):
            stmt = sa.select(*self._cols(data, result, definition)).where(self.t.c.key.in_(ordered[i : i + 500]))
            if lock:
                stmt = self.db.dialect.lock_rows(stmt.order_by(self.t.c.key))
            out.update({r.key: dict(r._mapping) for r in conn.execute(stmt)})
        return out

    def run_newest(
        self, conn, group: str, types: Sequence[str], before_id: int | None, limit: int, sep: str
    ) -> list[dict]:
        """Up to ``limit`` run rows of the workflows ``types`` with an id below ``before_id`` (None:
        from the newest), newest first: the rows of the runs ``group`` (its index walked by id)
        and the live rows of no group no decider has taken up yet (a run submitted as a plain
        task); keys holding ``sep`` (a step's) are not runs."""
        t = self.t
        where = [t.c.type.in_(list(types)), sa.not_(t.c.key.contains(sep, autoescape=True))]
        if before_id is not None:
            where.append(t.c.id < before_id)
        cols = self._cols(False, False)
        adopted = sa.select(*cols).where(t.c.grp == group, *where)
        unpicked = sa.select(*cols).where(t.c.state == LIVE, t.c.grp.is_(None), *where)
        # The unpicked ones are sorted by an expression of the id: a planner that may walk the
        # primary key newest first (matching nothing, past every row) reads the live rows instead.
        reads = (adopted.order_by(t.c.id.desc()), unpicked.order_by((t.c.id + 0).desc()))
        rows = [dict(r._mapping) for s in reads for r in conn.execute(s.limit(limit))]
        return sorted(rows, key=lambda r: -r["id"])[:limit]

    def run_group_read(self, conn, group: str, *, data: bool = False, result: bool = False) -> list[dict]:
        """The rows of a group (a run's steps, a map's items), by id."""
        t = self.t
        stmt = sa.select(*self._cols(data, result)).where(t.c.grp == group).order_by(t.c.id)
        return [dict(r._mapping) for r in conn.execute(stmt)]

    def run_group_results(self, conn, group: str):
        """(key, state, outcome, workflow, result) of each row of a group, as plain tuples: what a
        step after a map reads of its items (a full row would cost ~1 KB more per item)."""
        t = self.t
        stmt = sa.select(t.c.key, t.c.state, t.c.outcome, t.c.workflow, t.c.result).where(t.c.grp == group)
        return conn.execute(stmt).all()

    def run_group_count(self, conn, group: str, now: float) -> dict[str, int]:
        """How many rows of a group are pending, waiting, running, or finished by outcome."""
        t = self.t
        status = sa.case(
            (t.c.state == FINISHED, t.c.outcome),
            (t.c.state == PENDING, "pending"),
            (lease_held(t, now), "running"),
            else_="waiting",
        ).label("status")
        stmt = sa.select(status, sa.func.count()).where(t.c.grp == group).group_by(status)
        return {str(r[0]): int(r[1]) for r in conn.execute(stmt)}

    def run_next_waiting(self, conn, group: str, now: float) -> dict | None:
        """The waiting row of a group due first (its ``run_at`` and ``workflow``), None when none
        waits: what a map whose items all wait is waiting for."""
        t = self.t
        waiting = self.db.dialect.per_row([t.c.state == LIVE, sa.not_(lease_held(t, now))])
        stmt = sa.select(t.c.run_at, t.c.workflow).where(t.c.grp == group, *waiting).order_by(t.c.run_at).limit(1)
        row = conn.execute(stmt).mappings().first()
        return dict(row) if row is not None else None

    def run_name_register(self, conn, kind: str, name: str) -> None:
        """Remember a name (a workflow served or started here) in the meta table, once."""
        m = self.tasks.meta
        row = {"name": f"{kind}:{hashlib.sha1(name.encode()).hexdigest()[:40]}"[:64], "value": name}
        self.db.dialect.execute_insert(conn, self.db.dialect.insert_if_absent(m, "name"), [row], m.c.name)

    def run_names_registered(self, conn, kind: str) -> list[str]:
        m = self.tasks.meta
        stmt = sa.select(m.c.value).where(m.c.name.like(f"{kind}:%")).order_by(m.c.value)
        return [r[0] for r in conn.execute(stmt)]

    # -- transitions of the run row ---------------------------------------------------------
    def run_adopt(self, conn, id_: int, token: int, workflow: str, definition: str, group: str, now: float) -> bool:
        """A run row submitted as a plain task, held by the decider: live -> pending run."""
        t = self.t
        res = conn.execute(
            sa.update(t)
            .where(t.c.id == id_, *task_where(t, "adopt", token=token))
            .values(
                state=PENDING,
                leased=0,
                timeout=FOREVER,
                max_attempts=None,
                workflow=workflow,
                grp=group,
                definition=definition,
                started_at=now,
                owner=None,
            )
        )
        return self._changed(conn, "adopted", [id_], res.rowcount, now)

    def run_set_workflow(self, conn, id_: int, workflow: str, *, state: int = PENDING) -> bool:
        """New bookkeeping of a row that is still in ``state`` (tallies of a pending step, run state)."""
        t = self.t
        res = conn.execute(
            sa.update(t)
            .where(t.c.id == id_, *task_where(t, "set_workflow", only=_EXPECTED[state]))
            .values(workflow=workflow)
        )
        return res.rowcount == 1

    def run_set_workflow_many(self, conn, updates: Sequence[tuple[int, str]], *, state: int = PENDING) -> int:
        return self.db.dialect.update_each(
            conn,
            self.t,
            [{"id": i, "workflow": w} for i, w in updates],
            each=["workflow"],
            where=task_where(self.t, "set_workflow", only=_EXPECTED[state]),
        )

    def run_close(
        self,
        conn,
        id_: int,
        outcome: str,
        now: float,
        *,
        workflow: str | None = None,
        error: str | None = None,
        purge_at: float = FOREVER,
    ) -> bool:
        """A pending row ends without running (a skipped step, a map whose items are done, the
        run row when its run ends): pending -> finished."""
        t = self.t
        values: dict = dict(
            state=FINISHED, outcome=outcome, finished_at=now, timeout=purge_at, error=error, lease_token=None
        )
        if workflow is not None:
            values["workflow"] = workflow
        res = conn.execute(sa.update(t).where(t.c.id == id_, *task_where(t, "close")).values(**values))
        return self._changed(conn, "closed", [id_], res.rowcount, now)

    def run_close_many(self, conn, rows: Sequence[dict], now: float) -> int:
        """Pending rows that end without running (skipped steps, maps whose items are done, run
        rows whose run ended): each dict holds id, outcome, workflow, error and optionally
        purge_at (default: kept until their run ends)."""
        rows = [
            {
                "id": r["id"],
                "outcome": r["outcome"],
                "error": r["error"],
                "workflow": r["workflow"],
                "timeout": r.get("purge_at", FOREVER),
            }
            for r in rows
        ]
        n = self.db.dialect.update_each(
            conn,
            self.t,
            rows,
            each=["outcome", "error", "workflow", "timeout"],
            where=task_where(self.t, "close"),
            values=dict(state=FINISHED, finished_at=now, lease_token=None),
        )
        self._changed(conn, "closed", [r["id"] for r in rows], n, now, self.t.c.state == FINISHED)
        return n

    def run_group_keep(self, conn, groups: Sequence[str], purge_at: float = FOREVER) -> int:
        """The finished rows of these runs' groups are purged at ``purge_at`` (runs that ended),
        or never (the default: runs running again)."""
        t = self.t
        n = 0
        for i in range(0, len(groups), 500):
            n += conn.execute(
                sa.update(t)
                .where(t.c.grp.in_(list(groups[i : i + 500])), *self.db.dialect.per_row(task_where(t, "keep_group")))
                .values(timeout=purge_at)
            ).rowcount
        return n

    def run_group_clear(self, conn, group: str) -> int:
        """Delete the workflow rows of a group: those of an earlier run with this id (a run starts
        with an empty group), or a map's old items. Plain tasks that name the group stay. Only
        when there are some: an account without DELETE starts every run whose id is new."""
        where = (self.t.c.grp == group, *task_where(self.t, "clear_group"))
        ids = [r[0] for r in conn.execute(self.db.dialect.lock_rows(sa.select(self.t.c.id).where(*where)))]
        if not ids:
            return 0
        self.tasks.forget_rows(conn, ids)
        return conn.execute(sa.delete(self.t).where(*where)).rowcount

    # -- transitions of step rows ------------------------------------------------------------
    def run_promote(self, conn, updates: Sequence[tuple[int, str]], now: float) -> int:
        """Steps whose parents are done: pending -> waiting, due now."""
        n = self.db.dialect.update_each(
            conn,
            self.t,
            [{"id": i, "workflow": w} for i, w in updates],
            each=["workflow"],
            where=task_where(self.t, "promote"),
            values=dict(state=LIVE, timeout=now, run_at=now),
        )
        self._changed(conn, "promoted", [i for i, _ in updates], n, now, self.t.c.state == LIVE)
        return n

    def run_start_maps(self, conn, starts: Sequence[tuple[int, str, str]]) -> int:
        """Maps whose items were just submitted: each (id, bookkeeping as read, bookkeeping with
        the item count) is written only while the pending row's bookkeeping is still the one
        read, so a map starts once, however many decisions race for it. Returns how many did."""
        if not starts:
            return 0
        t = self.t
        stmt = (
            sa.update(t)
            .where(t.c.id == sa.bindparam("_id"), *task_where(t, "start_map", read=sa.bindparam("_read")))
            .values(workflow=sa.bindparam("_new"))
        )
        return conn.execute(stmt, [{"_id": i, "_read": read, "_new": new} for i, read, new in starts]).rowcount

    def run_open_rows(self, conn, groups: Sequence[str], limit: int | None = 20) -> list[dict]:
        """The workflow rows of these groups that have not finished (key, grp, workflow): up to
        ``limit`` per 500 groups (None: all)."""
        t = self.t
        out: list[dict] = []
        for i in range(0, len(groups), 500):
            where = (t.c.grp.in_(list(groups[i : i + 500])), t.c.state != FINISHED, t.c.workflow.is_not(None))
            stmt = sa.select(t.c.key, t.c.grp, t.c.workflow).where(*where).order_by(t.c.key).limit(limit)
            out += [dict(r._mapping) for r in conn.execute(stmt)]
        return out

    def run_finish_held(
        self,
        conn,
        id_: int,
        token: int,
        outcome: str,
        now: float,
        *,
        error: str | None,
        result: str | None,
        workflow: str | None = None,
        purge_at: float = FOREVER,
        traceback: str | None = None,
    ) -> bool:
        """The holder of a step's lease finishes it (fenced; PreemptedError when not ours).
        Kept until its run ends unless ``purge_at`` says otherwise. Returns False when this very
        finish was already written (an earlier attempt of the transaction committed)."""
        t = self.t
        values: dict = dict(
            state=FINISHED, leased=0, outcome=outcome, error=error, finished_at=now, timeout=purge_at, result=result
        )
        if workflow is not None:
            values["workflow"] = workflow
        finish = task_where(t, "finish", token=token)
        res = conn.execute(sa.update(t).where(t.c.id == id_, *finish).values(**values))
        if res.rowcount == 1:
            self.tasks.events.record_ids(conn, "finished", [id_], now, outcome=outcome, traceback=traceback)
            return True
        if self._written_before(conn, [id_], {id_: token}, now):
            return False
        self._refused(conn, id_, token, "finish")
        return False

    def _written_before(self, conn, ids: Sequence[int], tokens: dict[int, int], now: float) -> set[int]:
        """Of ``ids``, those this holder already finished at ``now``: an earlier attempt of the
        same transaction committed, and only its acknowledgement was lost."""
        t = self.t
        rows = conn.execute(
            sa.select(t.c.id, t.c.state, t.c.lease_token, t.c.finished_at).where(t.c.id.in_(list(ids)))
        ).all()
        return {r.id for r in rows if r.state == FINISHED and r.finished_at == now and r.lease_token == tokens[r.id]}

    def run_finish_held_many(
        self, conn, entries: Sequence[dict], now: float, *, retried: bool = False
    ) -> tuple[list[int], list[int]]:
        """Several holders' finishes at once (each dict: id, token, outcome, error, result),
        fenced like :meth:`run_finish_held`. Returns the ids whose lease was lost (not written), and
        — on a ``retried`` attempt of the transaction — those an earlier attempt already wrote
        and committed (only its acknowledgement was lost): their decision was committed with
        them and must not be taken again."""
        if not entries:
            return [], []
        tokens = {e["id"]: e["token"] for e in entries}
        already = self._written_before(conn, list(tokens), tokens, now) if retried else set()
        todo = [e for e in entries if e["id"] not in already]
        t = self.t
        rows = [
            {
                "id": e["id"],
                "lease_token": e["token"],
                "outcome": e["outcome"],
                "error": e["error"],
                "result": e["result"],
            }
            for e in todo
        ]
        if not todo or self.db.dialect.update_each(
            conn,
            t,
            rows,
            each=["outcome", "error", "result"],
            match=["lease_token"],
            where=task_where(t, "finish", token=PER_ROW),
            values=dict(state=FINISHED, leased=0, finished_at=now, timeout=FOREVER),
        ) == len(todo):
            outcomes = {e["outcome"] for e in todo}
            self.tasks.events.record_ids(conn, "finished", [e["id"] for e in todo], now, outcome=_the_one(outcomes))
            return [], sorted(already)
        written = self._written_before(conn, [e["id"] for e in todo], tokens, now)
        self.tasks.events.record_ids(conn, "finished", sorted(written), now)
        return [e["id"] for e in todo if e["id"] not in written], sorted(already)

    def run_retry_held(
        self,
        conn,
        id_: int,
        token: int,
        run_at: float,
        now: float,
        *,
        error: str | None,
        workflow: str,
        traceback: str | None = None,
    ) -> None:
        """The holder gives a failed step back at ``now`` for another try at ``run_at`` (fenced;
        ``traceback``: of its error, kept by the event that ends the attempt)."""
        t = self.t
        values = dict(leased=0, timeout=run_at, run_at=run_at, owner=None, error=error, workflow=workflow)
        retry = task_where(t, "retry", token=token)
        dues = self.tasks.events.attempt_dues(conn, [id_])
        res = conn.execute(sa.update(t).where(t.c.id == id_, *retry).values(**values))
        if res.rowcount == 1:
            self.tasks.changes.record_again(conn, "retried", [id_], now, dues, traceback)
        elif not self.tasks.changes.applied_before(conn, id_, token, "retry"):
            self._refused(conn, id_, token, "retry")  # unless its own earlier run committed it

    def _refused(self, conn, id_: int, token: int, op: str) -> None:
        self.tasks.changes.diagnose(conn, id_, token, op)  # raises with the reason

    def run_mark(self, conn, id_: int, group: str, workflow: str) -> bool:
        """Make a row not yet picked up by a decider known as a run (listed with the runs)."""
        t = self.t
        res = conn.execute(
            sa.update(t).where(t.c.id == id_, *task_where(t, "mark")).values(grp=group, workflow=workflow)
        )
        return res.rowcount == 1

    def run_cancel_waiting(self, conn, group: str, now: float) -> list[dict]:
        """Cancel the waiting (not running) rows of a run; flag the running ones. Returns the
        rows cancelled here (their run then decides what follows)."""
        t = self.t
        live = self.db.dialect.lock_rows(
            sa.select(*self._cols(False, False))
            .where(t.c.grp == group, *self.db.dialect.per_row([t.c.state == LIVE]))
            .order_by(t.c.key)
        )
        rows = [dict(r._mapping) for r in conn.execute(live)]
        waiting = [r for r in rows if not policy.lease_held(r["leased"], r["timeout"], now)]
        running = [r["id"] for r in rows if policy.lease_held(r["leased"], r["timeout"], now)]
        for i in range(0, len(running), 500):
            chunk_ids = running[i : i + 500]
            flagged = conn.execute(
                sa.update(t)
                .where(t.c.id.in_(chunk_ids), *self.db.dialect.per_row(task_where(t, "request_cancel")))
                .values(cancel_requested=1)
            ).rowcount
            self._changed(conn, "cancel_requested", chunk_ids, flagged, now, t.c.cancel_requested == 1)
        done, cancel = [], self.db.dialect.per_row(task_where(t, "cancel", now=now))
        for i in range(0, len(waiting), 500):
            chunk = waiting[i : i + 500]
            res = conn.execute(
                sa.update(t)
                .where(t.c.id.in_([r["id"] for r in chunk]), *cancel)
                .values(
                    state=FINISHED,
                    leased=0,
                    outcome="cancelled",
                    finished_at=now,
                    timeout=FOREVER,
                    lease_token=None,
                    cancel_requested=1,
                )
            )
            ids = [r["id"] for r in chunk]
            self._changed(conn, "cancelled", ids, res.rowcount, now, t.c.outcome == "cancelled")
            done += chunk
        return done

    def run_reopen_steps(self, conn, ids: Sequence[int], now: float, *, pending: bool = False) -> int:
        """Finished rows of a run that is retried: -> waiting (due now, fresh attempts) or pending."""
        t = self.t
        values = dict(
            state=PENDING if pending else LIVE,
            leased=0,
            outcome=None,
            finished_at=None,
            lease_token=None,
            timeout=FOREVER if pending else now,
            run_at=now,
            attempts=0,
            error=None,
            cancel_requested=0,
            owner=None,
            result=None,
        )
        n = 0
        for i in range(0, len(ids), 500):
            chunk = list(ids[i : i + 500])
            stmt = (
                sa.update(t)
                .where(t.c.id.in_(chunk), *self.db.dialect.per_row(task_where(t, "reopen")))
                .values(**values)
            )
            done = conn.execute(stmt).rowcount
            self._changed(conn, "reopened", chunk, done, now, t.c.finished_at.is_(None))
            n += done
        return n

    def run_reopen(self, conn, id_: int, workflow: str, now: float) -> bool:
        """A finished run row that is retried at ``now``: -> pending."""
        t = self.t
        res = conn.execute(
            sa.update(t)
            .where(t.c.id == id_, *task_where(t, "reopen"))
            .values(state=PENDING, outcome=None, finished_at=None, timeout=FOREVER, error=None, workflow=workflow)
        )
        return self._changed(conn, "reopened", [id_], res.rowcount, now)

    def _changed(self, conn, kind: str, ids: Sequence[int], changed: int, now: float, after: Any = None) -> bool:
        """Append the event ``kind`` of the rows of ``ids`` that the caller's statement changed
        (``changed`` of them: all, none, or those in the state ``after`` describes); whether it
        changed all of them."""
        if changed and changed < len(ids):
            t = self.t
            ids = [r[0] for r in conn.execute(sa.select(t.c.id).where(t.c.id.in_(list(ids)), after))]
        if changed:
            self.tasks.events.record_ids(conn, kind, ids, now)
        return changed == len(ids)


def _the_one(values: set) -> Any:
    """The one value of ``values``, or None when there are several (or none)."""
    return next(iter(values)) if len(values) == 1 else None
