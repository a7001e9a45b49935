"""A claim whose COMMIT's acknowledgement was lost runs again under the same lease token: the rows
its first run leased are found by that token and delivered instead of being left to expire
unknown (``SqlStore.task_claim``), their leases renewed first (``renew_claim``)."""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa

from ..rules.task_states import LIVE
from .transitions import task_where


def renewed_under(
    t: sa.Table,
    conn,
    token: int,
    expiries: list[float],
    stamp: Callable[[], float],
    alive_time: float,
    per_row: Callable[[list], list],
) -> list[dict]:
    """The rows an earlier run of a claim leased under ``token`` (until one of ``expiries``),
    their leases renewed from ``stamp()``: the retries that found its COMMIT may have taken
    longer than the lease, and a lease delivered expired would let another worker run the task
    too. The renewal is fenced by the token alone: a row still carrying it was claimed by nobody
    since, expired or not (``per_row``: the dialect's, for a fence of a write by id)."""
    mine = leased_under(t, conn, token, expiries)
    if not mine:
        return []
    until = stamp() + alive_time
    renew = sa.update(t).where(t.c.id.in_([r["id"] for r in mine]), *per_row(task_where(t, "renew_claim", token=token)))
    conn.execute(renew.values(timeout=until))
    return leased_under(t, conn, token, [until])


def leased_under(t: sa.Table, conn, token: int, expiries: list[float]) -> list[dict]:
    """The rows a claim with ``token`` leased until one of ``expiries``; found through the
    (state, timeout) index. Every one of them is delivered (that claim cut its batch already):
    its attempt-limited row, if any, first."""
    until = t.c.timeout.in_(sorted(set(expiries)))
    held = sa.select(t).where(t.c.state == LIVE, until, t.c.lease_token == token, t.c.leased == 1)
    rows = [dict(r._mapping) for r in conn.execute(held.order_by(t.c.priority.desc(), t.c.run_at, t.c.id))]
    return sorted(rows, key=lambda r: r["max_attempts"] is None)  # stable: the limited one first
