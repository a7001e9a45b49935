"""Shared helpers of the workflow fault tests (in-process drivers, fault injection)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import contextmanager

import sqlalchemy as sa

import pqflow

calls: Counter = Counter()


def squares_map(name: str, result=lambda squares: squares, **options) -> pqflow.Workflow:
    """The map workflow most of these tests run: ``xs`` lists [1, 2, 3], the map ``sq`` squares
    each item, ``total`` returns ``result(squares)`` (the list itself by default). Each run of
    ``sq`` and ``total`` is counted in :data:`calls` as ``(run id, step)``."""
    flow = pqflow.Workflow(name, retry_wait=0, **options)

    @flow.step()
    def xs(ctx):
        return [1, 2, 3]

    @flow.step(map=xs)
    def sq(ctx, item):
        calls[(ctx.run_id, "sq")] += 1
        return item * item

    @flow.step(after=sq)
    def total(ctx, sq):
        calls[(ctx.run_id, "total")] += 1
        return result(sq)

    return flow


def random_workflow(
    name: str, seed: int, triggers: Sequence[str], make_fn: Callable[[str], Callable], *, steps=(3, 8)
) -> pqflow.Workflow:
    """A workflow of ``seed``'s random shape: ``steps`` (fewest, most) steps ``s0``, ``s1``...,
    each after up to three earlier ones with one of ``triggers``; about a third of the joined
    ones map over their first parent (half of them allowing failed items, some at most 2 at a
    time). ``make_fn(step name)`` gives each step's function; no retries."""
    rnd = random.Random(seed)
    wf = pqflow.Workflow(name, retries=0, retry_wait=0)
    names: list[str] = []
    for i in range(rnd.randint(*steps)):
        after = rnd.sample(names, k=min(len(names), rnd.randint(0, 3)))
        options: dict = {}
        if after and rnd.random() < 0.35:
            options.update(map=after[0], allow_failed_items=rnd.random() < 0.5)
            options.update({"max_parallel": 2} if rnd.random() < 0.3 else {})
        options.update({"trigger": rnd.choice(list(triggers))} if after else {})
        wf.step(after=after or None, name=f"s{i}", **options)(make_fn(f"s{i}"))
        names.append(f"s{i}")
    return wf


def drive(q, decider, limit=10_000, now=None):
    """Serve every due task in this process, as a worker would, until none is due."""
    for _ in range(limit):
        task = q.poll(alive_time=30, now=now)
        if task is None:
            return
        try:
            decider(task).run()
        except SystemExit:
            continue
        if task.deferred is not None:
            q.finish_many([task], now=now)


def run_one(q, decider, key, now=None):
    """Claim and run due tasks until ``key`` is claimed; return that task (its deferred finish
    not yet written)."""
    task = q.poll(alive_time=30, now=now)
    assert task is not None and task.key == key, (task, key)
    decider(task).run()
    return task


def row(q, key):
    return q.db.run(lambda c: q.store.run_read(c, [key], result=True).get(key), write=False)


@contextmanager
def ack_lost_once(q, what=None):
    """The next transaction (of ``what``, when given) commits, then its client sees the
    connection drop before the COMMIT acknowledgement (a transient error): Database.run runs
    the whole transaction again, as it does after a real lost connection."""
    db = q.db
    original = db._connection
    state = {"armed": True, "fired": 0}
    real_run = db.run

    def run(fn, *, write=True, what_="query", **kw):
        label = kw.pop("what", what_)
        if state["armed"] and (what is None or label == what):
            state["armed"] = False

            @contextmanager
            def conn_then_drop(write_, *args):
                with original(write_, *args) as conn:
                    yield conn
                if not state["fired"]:
                    state["fired"] += 1
                    raise sa.exc.OperationalError(
                        "COMMIT", {}, ConnectionError("lost connection"), connection_invalidated=True
                    )

            db._connection = conn_then_drop
            try:
                return real_run(fn, write=write, what=label, **kw)
            finally:
                db._connection = original
        return real_run(fn, write=write, what=label, **kw)

    db.run = run
    try:
        yield state
    finally:
        db.run = real_run


@contextmanager
def rolled_back_once(q, what):
    """The next transaction labelled ``what`` does all its work, then hits a transient error
    (a deadlock victim, a dropped connection) before COMMIT: it rolls back and Database.run
    runs the whole function again, with whatever Python state the first attempt left."""
    db = q.db
    real_run = db.run
    state = {"fired": 0}

    def run(fn, *, write=True, what="query", **kw):
        if what == wanted and not state["fired"]:

            def once(conn):
                out = fn(conn)
                if not state["fired"]:
                    state["fired"] += 1
                    raise sa.exc.OperationalError(
                        "UPDATE", {}, ConnectionError("deadlock"), connection_invalidated=True
                    )
                return out

            return real_run(once, write=write, what=what, **kw)
        return real_run(fn, write=write, what=what, **kw)

    wanted = what
    db.run = run
    try:
        yield state
    finally:
        db.run = real_run


@contextmanager
def connection_drops_once(q, what, meanwhile):
    """The next transaction labelled ``what`` cannot open its connection (a transient error: the
    server restarting, a dropped connection); ``meanwhile()`` is what the rest of the system does
    while Database.run backs off and retries. The retry then runs the same function again."""
    db = q.db
    real_run = db.run
    original = db._connection
    state = {"fired": 0}

    @contextmanager
    def dropping(write, *args):
        if not state["fired"]:
            state["fired"] += 1
            meanwhile()
            raise sa.exc.OperationalError(
                "connect", {}, ConnectionError("server restarting"), connection_invalidated=True
            )
        with original(write, *args) as conn:
            yield conn

    def run(fn, *, write=True, what="query", **kw):
        if what == wanted and not state["fired"]:
            db._connection = dropping
            try:
                return real_run(fn, write=write, what=what, **kw)
            finally:
                db._connection = original
        return real_run(fn, write=write, what=what, **kw)

    wanted = what
    db.run = run
    try:
        yield state
    finally:
        db.run = real_run
