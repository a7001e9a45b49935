"""What an event row of a task (``<table>_events``) says about the attempt it belongs to (pure):
whether it ends a holder's attempt and carries that attempt's claim, when the attempt started,
and which rows a bounded history drops. Shared by the store (its history bound), the statistics
(what counts as started) and the history and event stream (the claims they show)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

#: the kinds that end a holder's attempt and carry its claim (``history.carried_claim``): a task's
#: ``claimed`` event is written only while it is tracked (its followers see the claim live); the
#: claim of an attempt that has no such row — owner, wait (due -> start), start (``at - ran``) —
#: is on the event that ends it (its ``waited`` set), so that an attempt costs one event row and
#: each claim is told once (``docs/operations.md``)
CARRY_CLAIM = frozenset({"finished", "retried", "released", "expired", "force_finished"})
#: the events that leave the attempt going on (any other ends it): an operator's change while it
#: runs, and an earlier holder giving back the attempt its lost lease spent
DURING_ATTEMPT = frozenset({"cancel_requested", "moved", "attempt_returned"})


def carries_claim(event: Mapping) -> bool:
    """Whether the event row ``event`` ends a holder's attempt and carries its claim (an attempt
    whose claim has no row of its own)."""
    return event["kind"] in CARRY_CLAIM and event["waited"] is not None


def starts_attempt(event: Mapping) -> bool:
    """Whether the event row ``event`` tells an attempt's start: a ``claimed`` row, or an end
    that carries its claim. Each attempt has exactly one."""
    return carries_claim(event) or (event["kind"] == "claimed" and event["waited"] is not None)


def started_at(event: Mapping) -> float:
    """When the attempt an event row carrying a claim ends started."""
    return event["at"] - (event["ran"] or 0.0)


def claim_open(rows: Sequence[Mapping]) -> bool:
    """Whether, of a task's event ``rows`` (oldest first), the last attempt's claim has a row
    and nothing ended that attempt yet (its running claim is then not read from the task row)."""
    open_claim = False
    for r in rows:
        open_claim = r["kind"] == "claimed" or (open_claim and r["kind"] in DURING_ATTEMPT)
    return open_claim


def open_claims(events: Iterable[tuple[int, str, float]]) -> dict[int, float]:
    """Of the events ``(task id, kind, at)`` of some tasks (in id order: ``claimed`` ones and the
    ends of attempts, :data:`CARRY_CLAIM`), the time of each task's claim that no end followed:
    the attempt it is in, if that claim has a row of its own."""
    found: dict[int, float] = {}
    for task_id, kind, at in events:
        if kind == "claimed":
            found[task_id] = at
        else:
            found.pop(task_id, None)
    return found


def trim_cut(rows: Sequence[Mapping], first: int, last: int, most: int) -> list[int]:
    """The ids of the event rows to delete from a task's ``rows`` (oldest first: id, kind,
    waited) so that its history shows its first ``first`` and last ``last`` entries, once it
    would show more than ``most`` (a row that carries a claim counts two entries:
    ``history.history``)."""
    weights = [2 if carries_claim(r) else 1 for r in rows]
    if sum(weights) <= most:
        return []
    head = tail = 0
    while head < len(rows) and sum(weights[: head + 1]) <= first:
        head += 1
    while tail < len(rows) - head and sum(weights[len(rows) - tail - 1 :]) <= last:
        tail += 1
    return [r["id"] for r in rows[head : len(rows) - tail]]
