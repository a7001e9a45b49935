"""The table check before use (store/base.py tables_exist, ownership.py, mysql.py
text_columns_problem). mysql.py's insert_if_absent says: "a table whose columns could not hold one
[value] ... is refused by the table check, so only the key can clash" with INSERT IGNORE.
Guarantee: an altered table is refused with ForeignTableError before anything is written, or
takes pq's values as given; a table made by pq itself (older releases included) is never refused."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa
from conftest import drop_tables

import queue_core
from queue_core.errors import ForeignTableError, IdempotentAlreadyExistsError

T0 = 1_700_000_000.0
ROOT = Path(__file__).resolve().parents[2]
#: the git repository to take older releases from (a copy of the tree without .git: set it)
GIT_ROOT = os.environ.get("PQ_REVIEW_GIT_ROOT", str(ROOT))
EMOJI = {"emoji": "\U0001f600", "greek": "αβγ"}


def _altered(db_url, table_name, ddl: list[str]):
    setup = queue_core.open(db_url, table_name)
    setup.init()
    setup.db.run(lambda c: [c.exec_driver_sql(s.format(t=table_name)) for s in ddl])
    setup.close()
    return queue_core.open(db_url, table_name)  # a new process: its first use checks the table


def _stored(db_url, table_name, column):
    eng = sa.create_engine(db_url)
    try:
        with eng.connect() as c:
            q = '"' if eng.dialect.name == "postgresql" else "`"
            return [tuple(r) for r in c.exec_driver_sql(f"SELECT {q}key{q}, {column} FROM {q}{table_name}{q}")]
    finally:
        eng.dispose()


@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_a_narrowed_priority_column_is_refused_or_holds_the_value(db_url, table_name):
    q = _altered(db_url, table_name, ["ALTER TABLE `{t}` MODIFY priority TINYINT NOT NULL DEFAULT 0"])
    try:
        try:
            q.submit("k", "t", {}, priority=1000, now=T0)
        except ForeignTableError:
            assert _stored(db_url, table_name, "priority") == []
            return
        assert _stored(db_url, table_name, "priority") == [(b"k", 1000)], "stored another priority than submitted"
    finally:
        q.close()
        drop_tables(db_url, table_name)


@pytest.mark.parametrize("backend", ["mysql", "postgres"], indirect=True)
def test_single_precision_time_columns_are_refused_or_hold_the_time(db_url, table_name, backend):
    real = "FLOAT" if backend == "mysql" else "real"
    ddl = (
        ["ALTER TABLE `{t}` MODIFY run_at FLOAT NOT NULL", "ALTER TABLE `{t}` MODIFY timeout FLOAT NOT NULL"]
        if backend == "mysql"
        else ['ALTER TABLE "{t}" ALTER COLUMN run_at TYPE real', 'ALTER TABLE "{t}" ALTER COLUMN timeout TYPE real']
    )
    q = _altered(db_url, table_name, ddl)
    run_at = T0 + 37.25
    try:
        try:
            q.submit("k", "t", {}, run_at=run_at, now=T0)
        except ForeignTableError:
            return
        stored = _stored(db_url, table_name, "run_at")
        assert stored[0][1] == run_at, f"{real} column: run_at {run_at} stored as {stored[0][1]}"
    finally:
        q.close()
        drop_tables(db_url, table_name)


def test_an_extra_unique_index_never_makes_a_free_key_taken(db_url, table_name, backend):
    """A DBA added a unique index on ``type``: the second task of a type clashes on it. pq must
    refuse the table, or raise an error; never report the free key as already existing."""
    quote = "`" if backend == "mysql" else '"'
    q = _altered(
        db_url, table_name, [f"CREATE UNIQUE INDEX uq_extra_{uuid.uuid4().hex[:6]} ON {quote}{{t}}{quote} (type)"]
    )
    try:
        try:
            q.submit("k1", "t", now=T0)
            q.submit("k2", "t", now=T0)
        except ForeignTableError:
            return
        except IdempotentAlreadyExistsError as exc:
            assert not q["k2"].exists()
            pytest.fail(f"free key reported taken: {exc}")
        except queue_core.DatabaseError:
            assert not q["k2"].exists()  # a clear error, nothing written
    finally:
        q.close()
        if backend != "sqlite":
            drop_tables(db_url, table_name)


# -- tables made by older releases ------------------------------------------------------------
def _release(tmp_path_factory, commit: str) -> Path:
    """The packages of ``commit`` (git archive: read-only), in a directory of their own."""
    out = tmp_path_factory.mktemp(f"release_{commit[:7].replace('~', '_')}")
    archive = subprocess.run(["git", "-C", GIT_ROOT, "archive", commit, "queue_core"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive.stdout, check=True)
    return out


def _old_init(release: Path, url: str, table: str) -> None:
    code = (
        "import sys, queue_core\n"
        "q = queue_core.open(sys.argv[1], sys.argv[2]); q.init()\n"
        "q.submit('old', 't', {'x': 'αβγ'}); q.close()\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, url, table],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(release), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
@pytest.mark.parametrize("commit", ["7978f83~1", "749d3d7~1"], ids=["release-before-13", "schema-v1"])
def test_a_table_of_an_older_release_is_upgraded_not_refused(db_url, table_name, tmp_path_factory, commit):
    _old_init(_release(tmp_path_factory, commit), db_url, table_name)
    q = queue_core.open(db_url, table_name)
    try:
        q.init()
        q.submit("new", "t", EMOJI, now=T0)
        assert q["new"].metadata().data == EMOJI
        assert q["old"].metadata().data == {"x": "αβγ"}
    finally:
        q.close()
        drop_tables(db_url, table_name)


@pytest.mark.parametrize("backend", ["mysql"], indirect=True)
def test_an_older_releases_latin1_table_is_refused_and_the_advised_fix_works(latin1_url, tmp_path_factory):
    """Documented (docs/security.md): a table an older release made in a latin1 database is refused
    with the ALTER TABLE that fixes it. Checked: the message is the advice, and following it
    (for every table it is given for) makes the table usable, its rows kept."""
    _old_init(_release(tmp_path_factory, "7978f83~1"), latin1_url, "oldq")
    eng = sa.create_engine(latin1_url)
    advised = []
    try:
        for _ in range(4):
            q = queue_core.open(latin1_url, "oldq")
            try:
                q.init()
                q.submit("new", "t", EMOJI, now=T0)
                assert q["new"].metadata().data == EMOJI and q["old"].exists()
                break
            except ForeignTableError as exc:
                text = str(exc)
                assert "\n" not in text and "CONVERT TO CHARACTER SET utf8mb4" in text, text
                alter = text[text.index("ALTER TABLE") :].split(";")[0].split(":")[0].strip()
                alter = alter[: alter.index("utf8mb4") + len("utf8mb4")]
                advised.append(alter)
                with eng.begin() as c:
                    c.exec_driver_sql(alter)
            finally:
                q.close()
        else:
            pytest.fail(f"still refused after {advised}")
    finally:
        eng.dispose()
