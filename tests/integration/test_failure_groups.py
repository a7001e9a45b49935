"""Failure groups counted in the database against the pure rule over the same rows, on
SQLite, MariaDB and PostgreSQL: hostile error texts (no class, a class after spaces, multi-byte
characters before the colon, heads around the length limit, case and trailing-space variants that
MariaDB's collation would fold together) and bytes written by hand."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from queue_core.rules.failure_groups import CLASS_LENGTH, error_class
from queue_core.store.failures import HEAD_LENGTH

T0 = 1_700_000_000.0


def test_the_database_counts_heads_as_long_as_the_rule_reads_classes():
    assert HEAD_LENGTH == CLASS_LENGTH


ERRORS = [
    "ValueError: plain",
    None,
    "",
    ":leading colon",
    "  SpacedError: after spaces",
    "no colon at all",
    "message with words: and a colon",
    "é" * 5 + "Error: multibyte before the colon",
    "ÉtéError: accented class",
    "A" * 199 + ": head of 199",
    "B" * 200 + ": head of 200",
    "C" * 201 + ": head of 201",
    "D" * 250 + ": head of 250",
    "x" * 150 + "é" * 30 + "Z: mb chars push bytes past 200",
    "pkg.mod.HTTPError: dotted",
    "Foo\nBar: newline before colon",
    "KeyError\u2028: line separator",
    "\U0001f600Err: emoji",
    "ValueError : space before colon",
    "VALUEERROR: upper",
    "valueerror: lower",
]


def pure_groups(rows):
    out = {}
    for r in rows:
        k = (r["queue"], r["type"], error_class(r["error"]))
        g = out.setdefault(k, {"count": 0, "first": r["finished_at"], "last": r["finished_at"], "keys": []})
        g["count"] += 1
        g["first"] = min(g["first"], r["finished_at"])
        g["last"] = max(g["last"], r["finished_at"])
    return {k: (v["count"], v["first"], v["last"]) for k, v in out.items()}


def test_the_groups_match_the_pure_rule_for_any_error_text(queue, backend):
    """Counted in the database, grouped byte for byte (MariaDB's collation folds case and pads
    spaces), heads up to CLASS_LENGTH characters: the same groups as ``error_class``."""
    for i, _err in enumerate(ERRORS):
        queue.submit(f"k{i}", "t", now=T0)
    for i, _err in enumerate(ERRORS):
        t = queue.poll(now=T0 + 1)
        t.fail("placeholder", now=T0 + 2 + i)
    t_ = queue.store.t
    for i, err in enumerate(ERRORS):
        queue.db.run(lambda c, i=i, err=err: c.execute(sa.update(t_).where(t_.c.key == f"k{i}").values(error=err)))
    rows = queue.store.failure_page(limit=1000)
    expected = pure_groups(rows)
    got = {(g.queue, g.type, g.error_class): (g.count, g.first_seen, g.last_seen) for g in queue.failures()}
    diff = {k: (expected.get(k), got.get(k)) for k in set(expected) | set(got) if expected.get(k) != got.get(k)}

    def short(k):
        return f"{k[2][:12]}..{len(k[2])}" if len(k[2]) > 14 else k[2]

    assert not diff, {short(k): v for k, v in diff.items()}


@pytest.mark.parametrize(
    "value, classes",
    [
        ("x'56616c75654572726f723aff20626164'", ["ValueError"]),  # a BLOB: a class, then a byte not UTF-8
        ("CAST(x'ffff56616c75654572726f723a20626164' AS TEXT)", ["(no class)"]),  # TEXT that is not UTF-8
    ],
)
def test_bytes_written_by_hand_into_an_error_are_grouped_not_a_crash(queue, backend, value, classes):
    if backend != "sqlite":
        pytest.skip("bytes by hand: SQLite")
    queue.submit("k", "t", now=T0)
    queue.poll(now=T0 + 1).fail("x", now=T0 + 2)
    queue.db.run(lambda c: c.exec_driver_sql(f"UPDATE {queue.store.t.name} SET error = {value}"))
    groups = queue.failures()
    assert [(g.error_class, g.count, g.sample_key) for g in groups] == [(c, 1, "k") for c in classes]
