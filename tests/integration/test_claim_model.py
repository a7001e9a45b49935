"""The claim's one-statement "is a user due / best level" read (``ClaimView.user_and_top``) and
the level walk that stops once the batch is full choose what a model of the documented order
chooses: userless rows by (priority desc, due time, id); with due users, PerfectQueue's fair share
(policy.choose_fair over per-user heads and the userless heads), never past a user's cap."""

from __future__ import annotations

import random

import pytest
import sqlalchemy as sa

from queue_core.rules import policy

T0 = 1_700_000_000.0
NOW = T0 + 1000


def _model(rows: list[dict], n: int, now: float) -> list[int]:
    live = [r for r in rows if r["state"] == 0]
    due = [r for r in live if r["timeout"] <= now]
    order = lambda r: (-r["priority"], r["timeout"], r["id"])  # noqa: E731
    userless = sorted((r for r in due if r["resource"] is None), key=order)[:n]
    users = {r["resource"] for r in due if r["resource"] is not None}
    if not users:
        return [r["id"] for r in userless]
    heads = []
    for u in users:
        heads += sorted((r for r in due if r["resource"] == u), key=order)[:n]
    running: dict[str, int] = {}
    for r in live:
        if r["resource"] is not None and r["leased"] == 1 and now < r["timeout"] <= now + policy.MAX_LEASE:
            running[r["resource"]] = running.get(r["resource"], 0) + 1
    return [r["id"] for r in policy.choose_fair(heads + userless, {u: running.get(u, 0) for u in users}, n)]


def _fill(q, rng: random.Random) -> None:
    t = q.store.t
    users = [None, None, "u1", "u2", "u3"]
    caps = {"u1": None, "u2": 1, "u3": 2}
    rows = []
    for i in range(rng.randint(0, 14)):
        user = rng.choice(users)
        priority = rng.choice([-1, 0, 0, 1, 5])
        due_in = rng.choice([-50, -10, -1, 0, 30])  # some not due yet
        rows.append(
            dict(
                key=f"k{i}",
                type="t",
                data="{}",
                resource=user,
                max_running=caps.get(user) if user else None,
                priority=priority,
                state=0,
                leased=0,
                timeout=NOW + due_in,
                run_at=NOW + due_in,
                created_at=T0,
                attempts=0,
                max_attempts=None,
                cancel_requested=0,
            )
        )
    # some rows of users running (leased, unexpired): they count towards their caps
    for j in range(rng.randint(0, 3)):
        user = rng.choice(["u1", "u2", "u3"])
        rows.append(
            dict(
                key=f"run{j}",
                type="t",
                data="{}",
                resource=user,
                max_running=caps[user],
                priority=rng.choice([0, 5]),
                state=0,
                leased=1,
                timeout=NOW + 100,
                run_at=T0,
                created_at=T0,
                attempts=1,
                max_attempts=None,
                cancel_requested=0,
                lease_token=7,
                started_at=NOW - 1,
                owner="x",
            )
        )
    # finished rows of high priority: not live, never counted
    if rng.random() < 0.5:
        rows.append(
            dict(
                key="done",
                type="t",
                data="{}",
                resource=None,
                max_running=None,
                priority=99,
                state=1,
                leased=0,
                timeout=NOW + 300,
                run_at=T0,
                created_at=T0,
                attempts=1,
                max_attempts=None,
                cancel_requested=0,
                outcome="success",
                finished_at=NOW - 5,
            )
        )
    rng.shuffle(rows)
    if rows:
        q.db.run(lambda c: [c.execute(sa.insert(t).values(r)) for r in rows])


def _all(q) -> list[dict]:
    t = q.store.t
    return q.db.run(lambda c: [dict(r._mapping) for r in c.execute(sa.select(t))], write=False)


@pytest.mark.parametrize("seed", range(40))
def test_claim_matches_the_model(queue, seed):
    rng = random.Random(seed)
    _fill(queue, rng)
    n = rng.randint(1, 6)
    rows = _all(queue)
    want = _model(rows, n, NOW)
    got = [x._id for x in queue.poll_multi(n, now=NOW, alive_time=60)]
    assert sorted(got) == sorted(want), (n, rows)


def test_a_user_whose_only_due_rows_are_below_userless_ones(queue):
    """A user due at priority 0, userless rows at priority 5 and a non-due user row at priority 9
    (the best live level): the userless rows come first, then the user's."""
    queue.submit("u-low", "t", user="u", priority=0, now=T0)
    queue.submit("u-future", "t", user="u", priority=9, run_at=NOW + 100, now=T0)
    for i in range(3):
        queue.submit(f"free{i}", "t", priority=5, now=T0 + i)
    got = [x.key for x in queue.poll_multi(4, now=NOW)]
    assert got[:3] == ["free0", "free1", "free2"] and set(got) == {"free0", "free1", "free2", "u-low"}


def test_a_capped_user_at_its_cap_gets_nothing(queue):
    queue.submit("a1", "t", user="a", max_running=1, priority=9, now=T0)
    queue.submit("a2", "t", user="a", max_running=1, priority=9, now=T0)
    queue.submit("free", "t", priority=0, now=T0)
    first = queue.poll(now=NOW, alive_time=600)
    assert first.key == "a1"
    got = [x.key for x in queue.poll_multi(5, now=NOW + 1)]
    assert got == ["free"]
