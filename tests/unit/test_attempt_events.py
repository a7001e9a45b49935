"""The pure rules of which event row carries an attempt's claim, which claims a history shows, and
what a bounded history drops (queue_core/attempt_events.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from queue_core.attempt_events import CARRY_CLAIM, carries_claim, claims_to_show, started_at, trim_cut


def row(kind, id_=1, waited=None, ran=None, at=100.0):
    return {"id": id_, "kind": kind, "waited": waited, "ran": ran, "at": at}


def test_an_end_carries_a_claim_only_with_its_wait():
    assert all(carries_claim(row(k, waited=0.5)) for k in CARRY_CLAIM)
    assert not carries_claim(row("finished"))  # a workflow step that never ran (skipped)
    assert not carries_claim(row("claimed", waited=0.5))  # a claim of its own, not carried
    assert not carries_claim(row("gave_up", waited=0.5))
    assert started_at(row("finished", waited=1.0, ran=2.5, at=10.0)) == 7.5
    assert started_at(row("finished", waited=1.0, at=10.0)) == 10.0


def test_a_recorded_claim_is_not_shown_again_by_its_end():
    rows = [row("claimed", 1, 0.1), row("cancel_requested", 2), row("finished", 3, 0.1, 1.0),
            row("retried", 4, 0.2, 1.0), row("claimed", 5, 0.3), row("expired", 6, 0.3, 9.0), row("finished", 7, 0.4, 1)]
    shown, open_claim = claims_to_show(rows)
    assert shown == [False, False, False, True, False, False, True]
    assert not open_claim


def test_a_claim_recorded_and_not_yet_ended_is_open():
    assert claims_to_show([row("finished", 1, 0.1, 1.0), row("claimed", 2, 0.1), row("moved", 3)]) == (
        [True, False, False], True)


def test_nothing_is_trimmed_until_the_shown_entries_pass_the_most():
    rows = [row("retried", i, 0.1, 1.0) for i in range(30)]  # 60 entries shown
    assert trim_cut(rows, 10, 40, 60) == []
    rows.append(row("retried", 30, 0.1, 1.0))  # 62
    cut = trim_cut(rows, 10, 40, 60)
    kept = [r for r in rows if r["id"] not in cut]
    assert [r["id"] for r in kept] == [0, 1, 2, 3, 4, *range(11, 31)]  # 5 + 20 rows: 10 + 40 entries


@given(st.lists(st.sampled_from(["claimed", "finished", "retried", "released", "expired", "moved",
                                 "cancel_requested", "gave_up", "promoted"]), max_size=200))
def test_a_trimmed_history_shows_at_most_its_first_and_last_entries(kinds):
    rows = [row(k, i, 0.1 if k != "gave_up" else None, 1.0) for i, k in enumerate(kinds)]
    cut = set(trim_cut(rows, 10, 40, 60))
    kept = [r for r in rows if r["id"] not in cut]
    weights = [2 if s else 1 for s in claims_to_show(kept)[0]]
    assert sum(weights) <= 60 or not cut
    if cut:
        assert min(cut) > kept[0]["id"] and max(cut) < kept[-1]["id"]  # only the middle goes
        assert sum(weights) >= 40  # the last 40 entries (or nearly: a row shows two) stay


def test_a_cut_that_parts_a_recorded_claim_from_its_end_still_keeps_the_bound():
    rows = [row("retried", i, 0.1, 1.0) for i in range(20)]  # untracked: 40 entries
    for i in range(20, 52, 2):  # then tracked: claimed + its end, 32 entries
        rows += [row("claimed", i, 0.1), row("retried", i + 1, 0.1, 1.0)]
    for first, last in ((10, 31), (10, 29), (10, 40)):
        cut = set(trim_cut(rows, first, last, first + last))
        kept = [r for r in rows if r["id"] not in cut]
        assert sum(2 if s else 1 for s in claims_to_show(kept)[0]) <= first + last
