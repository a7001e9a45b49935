"""Tracking survives the task's life (guarantee 5), a hand-edited tracked
value is a CorruptRowError, tags are exact and limited (guarantee 4), list(tag=...) combines
with the other filters and pages correctly (guarantee 3)."""

from __future__ import annotations

import unicodedata

import pytest
import sqlalchemy as sa

from queue_core.errors import CorruptRowError, NotFoundError, ValidationError

T0 = 1_700_000_000.0


def keys(tasks) -> list[str]:
    return [m.key for m in tasks]


def test_tracking_survives_claim_retry_release_finish_and_all_states(queue):
    """Guarantee 5: track a waiting task; claim, retry, claim, release, claim, finish; it stays
    tracked throughout; untrack of a finished task works; track is idempotent."""
    queue.submit("k", "t", now=T0)
    queue.submit("other", "t", now=T0 + 1000)
    queue["k"].track()
    task = queue.poll(now=T0, types=["t"])
    assert task.key == "k"
    assert keys(queue.list(tracked=True, status="running", now=T0)) == ["k"]
    task.retry(retry_wait=0, now=T0)
    assert queue["k"].metadata(now=T0).tracked
    task = queue.poll(now=T0 + 1)
    task.release(now=T0 + 1)
    assert queue["k"].metadata(now=T0 + 1).tracked
    queue.poll(now=T0 + 2).finish(now=T0 + 2)
    assert queue["k"].metadata(now=T0 + 2).tracked
    assert keys(queue.list(tracked=True, now=T0 + 2)) == ["k"]
    queue["k"].track()
    queue["k"].untrack()
    queue["k"].untrack()
    assert keys(queue.list(tracked=True, now=T0 + 2)) == []


@pytest.mark.parametrize("value", [2, -1])
def test_a_hand_edited_tracked_value_is_a_corrupt_row(queue, value):
    """Guarantee 5: tracked set to a value pq never writes (by hand): metadata and list report
    CorruptRowError (not a crash, not a silent True); track() repairs it."""
    queue.submit("k", "t", now=T0)
    t = queue.store.t
    queue.db.run(lambda c: c.execute(sa.update(t).where(t.c.key == "k").values(tracked=value)))
    with pytest.raises(CorruptRowError):
        queue["k"].metadata()
    with pytest.raises(CorruptRowError):
        list(queue.list())
    queue["k"].track()
    assert queue["k"].metadata().tracked


def test_tags_of_100_four_byte_characters_and_unicode_forms_are_exact(queue):
    """Guarantee 4: a 100-character tag of 4-byte characters is stored and found (MariaDB:
    VARBINARY must hold 400 bytes); composed and decomposed 'é' are two tags; 'ß' vs 'ss',
    'ǅ' vs 'Ǆ', fullwidth 'Ａ' vs 'A' are distinct."""
    big = "\U0001f600" * 100
    e1, e2 = "caf\u00e9", unicodedata.normalize("NFD", "caf\u00e9")
    tags = [big, e1, e2, "stra\u00dfe", "strasse", "\u01c5", "\u01c4", "\uff21", "A"]
    queue.submit("k", "t", tags=tags, now=T0)
    queue.submit("j", "t", tags=[e2, "strasse", "\u01c4", "A"], now=T0)
    assert set(queue["k"].metadata().tags) == set(tags)
    assert keys(queue.list(tag=big)) == ["k"]
    assert keys(queue.list(tag=e1)) == ["k"]
    assert keys(queue.list(tag="stra\u00dfe")) == ["k"]
    assert keys(queue.list(tag="\u01c5")) == ["k"]
    assert keys(queue.list(tag="\uff21")) == ["k"]
    assert queue["j"].untag(e1, "stra\u00dfe", "\u01c5", "\uff21") == sorted([e2, "strasse", "\u01c4", "A"])
    assert queue["k"].untag(e2) == sorted(set(tags) - {e2})


@pytest.mark.parametrize("bad", ["a\u00a0", "\u2003a", "x\u0085", "\x9f", "a\x7f", "\ud83d", "a\udcff"])
def test_tags_with_unicode_spaces_controls_or_surrogates_are_refused_everywhere(queue, bad):
    """Guarantee 4: trailing/leading Unicode spaces, C1 controls, lone surrogates: ValidationError
    from submit, tag, untag and list; nothing written."""
    queue.submit("k", "t", now=T0)
    with pytest.raises(ValidationError):
        queue.submit("x", "t", tags=["ok", bad], now=T0)
    with pytest.raises(ValidationError):
        queue["k"].tag("ok", bad)
    with pytest.raises(ValidationError):
        queue["k"].untag(bad)
    with pytest.raises(ValidationError):
        list(queue.list(tag=bad))
    assert keys(queue.list()) == ["k"] and queue["k"].metadata().tags == ()


def test_a_task_at_32_tags_keeps_them_when_one_more_is_refused_and_retagging_is_fine(queue):
    """Guarantee 4: at 32 tags, re-adding present ones is fine (still 32), one new tag is refused
    and nothing changes, untag one then tag one works."""
    tags = [f"t{i:02d}" for i in range(32)]
    queue.submit("k", "t", tags=tags, now=T0)
    assert queue["k"].tag(*tags[:5]) == tags
    with pytest.raises(ValidationError):
        queue["k"].tag("t00", "new")
    assert list(queue["k"].metadata().tags) == tags
    assert len(queue["k"].untag("t00")) == 31
    assert len(queue["k"].tag("new")) == 32


def test_list_by_tag_combines_with_filters_and_pages_past_1000_in_id_order(queue):
    """Guarantee 3: 2500 tagged tasks over 2 types / 2 users / 2 queues, some finished, some
    tracked; list(tag=...) with each filter (and limit 1500) equals the filtered plain list,
    each task once, in id order."""
    items = []
    for i in range(2500):
        items.append(
            {
                "key": f"k{i:05d}",
                "type": f"ty{i % 2}",
                "user": f"u{i % 3}",
                "queue": "default" if i % 5 else "q2",
                "tags": ["x"] if i % 4 else ["x", "y"],
            }
        )
    items.append({"key": "untagged", "type": "ty0"})
    queue.submit_many(items, now=T0)
    for task in queue.poll_multi(300, now=T0, queues="default,q2"):
        task.finish(now=T0)
    for i in range(0, 2500, 7):
        queue[f"k{i:05d}"].track()
    for filters in (
        {},
        {"type": "ty1"},
        {"user": "u2"},
        {"queue": "q2"},
        {"status": "finished"},
        {"status": "waiting", "type": "ty0"},
        {"tracked": True},
        {"limit": 1500},
        {"status": "waiting", "limit": 1001},
    ):
        expected = [
            k for k in keys(queue.list(now=T0, **{k: v for k, v in filters.items() if k != "limit"})) if k != "untagged"
        ][: filters.get("limit")]
        got = keys(queue.list(tag="x", now=T0, **filters))
        assert got == expected, filters
        assert len(set(got)) == len(got)


def test_tag_and_track_of_an_unknown_key_raise_not_found(queue):
    """Guarantee 4: unknown keys for tag/untag/track/untrack, also with no tags to add."""
    for call in (
        lambda: queue["nope"].tag("a"),
        lambda: queue["nope"].untag("a"),
        lambda: queue["nope"].track(),
        lambda: queue["nope"].untrack(),
        lambda: queue["nope"].tag(),
    ):
        with pytest.raises(NotFoundError):
            call()
