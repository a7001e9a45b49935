"""A key prefix (the dashboard's filter, a schedule's latest occurrences) reads one range of the
task key's index on every database (the tasks page at 1,000,000 rows): the key is ordered
byte for byte everywhere (PostgreSQL: the ``C`` collation since schema version 7, which ``init``
gives an older table), and the range holds exactly the keys with the prefix, whatever its
characters (LIKE wildcards, the highest code point, the last one before the surrogates)."""

from __future__ import annotations

import sqlalchemy as sa
from conftest import downgrade
from plans import analyze, mysql_rows_read, postgres_rows_read, sent_statements

from queue_core.store.browse import after_prefix

KEYS = [
    "ab",
    "ab%",
    "ab_x",
    "abc",
    "abd",
    "aB",
    "a",
    "ac",
    "b",
    "ab\U0010ffff",
    "ab\U0010ffffz",
    "a\ud7ffz",
    "a\ue000",
    "é",
    "éa",
    "ab ",
    "ab\\",
    "AB",
]


def test_after_prefix_is_the_least_string_above_every_string_with_the_prefix():
    assert after_prefix("ab") == "ac"
    assert after_prefix("a\U0010ffff") == "b"
    assert after_prefix("\U0010ffff\U0010ffff") is None
    assert after_prefix("a\ud7ff") == "a\ue000"  # the surrogates are no characters of UTF-8
    for p in ["ab", "a", "é", "ab\U0010ffff"]:
        above = after_prefix(p)
        assert all(k < above for k in KEYS if k.startswith(p)) if above else True


def test_a_key_prefix_finds_exactly_the_keys_that_start_with_it(queue):
    queue.submit_many({"key": k, "type": "t"} for k in KEYS)
    for prefix in ["ab", "ab%", "ab_", "a", "é", "ab\U0010ffff", "a\ud7ff", "A", "ab\\", "zz"]:
        found = {t.key for t in queue.browse(key_prefix=prefix, limit=100).tasks}
        assert found == {k for k in KEYS if k.startswith(prefix)}, prefix


def test_a_key_prefix_reads_only_the_keys_in_its_range(queue, backend):
    queue.submit_many({"key": f"f{i}", "type": "t"} for i in range(3000))
    analyze(queue)
    sent = sent_statements(queue, lambda: queue.browse(key_prefix="f1234", limit=50))
    [(statement, params)] = [s for s in sent if "LIKE" in s[0].upper()]
    if backend == "sqlite":
        plan = " ".join(
            r[3] for r in queue.db.run(lambda c: c.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params))
        )
        assert "(key>? AND key<?)" in plan.replace('"', ""), plan
    elif backend == "mysql":
        assert queue.db.run(lambda c: mysql_rows_read(c, statement, params)) <= 20
    else:
        assert queue.db.run(lambda c: postgres_rows_read(c, statement, params)) <= 20


def test_init_puts_an_older_tables_key_in_byte_order(queue, backend):
    store = queue.store
    downgrade(store, [], 6)
    queue.init()
    assert store.tables_version() == 10
    if backend == "postgresql" or backend == "postgres":
        collation = queue.db.run(
            lambda c: c.execute(
                sa.text(
                    "SELECT collation_name FROM information_schema.columns WHERE table_name = :t "
                    "AND column_name = 'key'"
                ),
                {"t": queue.table},
            ).scalar()
        )
        assert collation == "C"
    queue.submit("zz1", "t")
    assert [t.key for t in queue.browse(key_prefix="zz").tasks] == ["zz1"]
