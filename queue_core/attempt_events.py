"""What an event row of a task (``<table>_events``) says about the attempt it belongs to (pure):
whether it ends a holder's attempt and carries that attempt's claim, when the attempt started,
and which rows a bounded history drops. Shared by the store (its history bound), the statistics
(what counts as started) and the history and event stream (the claims they show)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: the kinds that end a holder's attempt and carry its claim (``history.carried_claim``): a task's
#: ``claimed`` event is written only while it is tracked (its followers see the claim live);
#: every attempt's claim — owner, wait (due -> start), start (``at - ran``) — is on the event
#: that ends it, so that an attempt costs one event row (``docs/operations.md``)
CARRY_CLAIM = frozenset({"finished", "retried", "released", "expired", "force_finished"})
#: the events that leave the attempt going on going on (any other ends it)
DURING_ATTEMPT = frozenset({"cancel_requested", "moved"})


def carries_claim(event: Mapping) -> bool:
    """Whether the event row ``event`` ends a holder's attempt and carries its claim."""
    return event["kind"] in CARRY_CLAIM and event["waited"] is not None


def started_at(event: Mapping) -> float:
    """When the attempt an event row carrying a claim ends started."""
    return event["at"] - (event["ran"] or 0.0)


def claims_to_show(rows: Sequence[Mapping]) -> tuple[list[bool], bool]:
    """For each of a task's event ``rows`` (oldest first), whether a history shows the claim it
    carries (it ends an attempt whose claim was not recorded: the task was untracked then); and
    whether the last attempt's claim was recorded and no row ended it yet."""
    shown, open_claim = [], False
    for r in rows:
        shown.append(carries_claim(r) and not open_claim)
        open_claim = r["kind"] == "claimed" or (open_claim and r["kind"] in DURING_ATTEMPT)
    return shown, open_claim


def trim_cut(rows: Sequence[Mapping], first: int, last: int, most: int) -> list[int]:
    """The ids of the event rows to delete from a task's ``rows`` (oldest first: id, kind,
    waited) so that its history shows its first ``first`` and last ``last`` entries, once it
    would show more than ``most`` (a row that carries a claim no recorded ``claimed`` shows
    counts two entries: ``history.history``)."""
    weights = _weights(rows)
    if sum(weights) <= most:
        return []
    head = tail = 0
    while head < len(rows) and sum(weights[: head + 1]) <= first:
        head += 1
    while tail < len(rows) - head and sum(weights[len(rows) - tail - 1 :]) <= last:
        tail += 1
    while tail and sum(_weights([*rows[:head], *rows[len(rows) - tail :]])) > first + last:
        tail -= 1  # the cut parted a recorded claim from the end that carries it: one more entry
    return [r["id"] for r in rows[head : len(rows) - tail]]


def _weights(rows: Sequence[Mapping]) -> list[int]:
    """The entries a history shows for each of ``rows``: two for a row whose claim it shows."""
    return [2 if shown else 1 for shown in claims_to_show(rows)[0]]
