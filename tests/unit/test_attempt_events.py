"""The pure rules of which event row carries an attempt's claim, which claims a history shows, and
what a bounded history drops (queue_core/rules/attempt_events.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from queue_core.rules.attempt_events import CARRY_CLAIM, carries_claim, claim_open, started_at, starts_attempt, trim_cut


def row(kind, id_=1, waited=None, ran=None, at=100.0):
    return {"id": id_, "kind": kind, "waited": waited, "ran": ran, "at": at}


def test_an_end_carries_a_claim_only_with_its_wait():
    assert all(carries_claim(row(k, waited=0.5)) for k in CARRY_CLAIM)
    assert not carries_claim(row("finished"))  # a workflow step that never ran (skipped)
    assert not carries_claim(row("claimed", waited=0.5))  # a claim of its own, not carried
    assert not carries_claim(row("gave_up", waited=0.5))
    assert started_at(row("finished", waited=1.0, ran=2.5, at=10.0)) == 7.5
    assert started_at(row("finished", waited=1.0, at=10.0)) == 10.0


def test_each_attempt_has_one_event_that_tells_its_start():
    assert starts_attempt(row("claimed", waited=0.1))  # a tracked task's claim
    assert not starts_attempt(row("finished"))  # its end, carrying no claim (the claim has a row)
    assert starts_attempt(row("finished", waited=0.1, ran=1.0))  # an untracked task's end
    assert not starts_attempt(row("cancelled", waited=0.1))


def test_a_recorded_claim_stays_open_until_something_ends_its_attempt():
    assert claim_open([row("finished", 1, 0.1, 1.0), row("claimed", 2, 0.1), row("moved", 3)])
    assert claim_open([row("claimed", 1, 0.1), row("cancel_requested", 2)])
    assert not claim_open([row("claimed", 1, 0.1), row("finished", 2)])
    assert not claim_open([row("claimed", 1, 0.1), row("expired", 2, ran=3.0)])
    assert not claim_open([])


def test_nothing_is_trimmed_until_the_shown_entries_pass_the_most():
    rows = [row("retried", i, 0.1, 1.0) for i in range(30)]  # 60 entries shown
    assert trim_cut(rows, 10, 40, 60) == []
    rows.append(row("retried", 30, 0.1, 1.0))  # 62
    cut = trim_cut(rows, 10, 40, 60)
    kept = [r for r in rows if r["id"] not in cut]
    assert [r["id"] for r in kept] == [0, 1, 2, 3, 4, *range(11, 31)]  # 5 + 20 rows: 10 + 40 entries


@given(
    st.lists(
        st.sampled_from(
            [
                "claimed",
                "finished",
                "retried",
                "released",
                "expired",
                "moved",
                "cancel_requested",
                "gave_up",
                "promoted",
            ]
        ),
        max_size=200,
    )
)
def test_a_trimmed_history_shows_at_most_its_first_and_last_entries(kinds):
    rows = [row(k, i, 0.1 if k != "gave_up" else None, 1.0) for i, k in enumerate(kinds)]
    cut = set(trim_cut(rows, 10, 40, 60))
    kept = [r for r in rows if r["id"] not in cut]
    shown = sum(2 if carries_claim(r) else 1 for r in kept)
    assert shown <= 60 or not cut
    if cut:
        assert min(cut) > kept[0]["id"] and max(cut) < kept[-1]["id"]  # only the middle goes
        assert shown >= 48  # the first 10 and last 40 entries, less one where a row shows two
