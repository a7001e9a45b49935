"""Shared pieces of the hostile-input tests: the Hypothesis profile, strategies of hostile
values, oracles, table snapshots, a statement spy and the one-line CLI error check."""

from __future__ import annotations

import json
import math
import os
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# procs (real worker processes) and cli_support live with the acceptance tests. No conftest.py
# here on purpose: a second conftest module would shadow tests/conftest.py for the
# "from conftest import drop_tables" of other test files.
if str(HERE.parent / "acceptance") not in sys.path:
    sys.path.insert(0, str(HERE.parent / "acceptance"))

# -- the Hypothesis profile -------------------------------------------------------------------
# Deterministic (derandomize: the same examples on every run and machine, no example database),
# no deadlines (the databases are shared and the machine has 2 cores) and few examples: every
# example is a round trip to a real server. Registered, not loaded, so that the rest of the test
# suite keeps its own Hypothesis settings.
settings.register_profile(
    "pq-hostile",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=30,
    print_blob=False,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
    ],
)
HOSTILE = settings.get_profile("pq-hostile")


def hostile(max_examples: int):
    """The profile with another example count (``@hostile(20)``)."""
    return settings(HOSTILE, max_examples=max_examples)


# -- strategies ---------------------------------------------------------------------------------
#: characters that break naive quoting, collations, terminals and encoders
NASTY_CHARS = list("'\"\\`;%_*?-#/$:{}()[]\x00\n\r\t \x7f") + [
    "\u0301",
    "ß",
    "İ",
    "ı",
    "Σ",
    "日",
    "🎉",
    "\ufeff",
    "\u202e",
    "\u2028",
    "\u00a0",
    "\ud800",
    "\udcff",
    "\U0010ffff",
    "ｆ",
    "Å",
    "Å",
]
#: fragments of injection attempts; {table} is replaced by the table under test
SQL_FRAGMENTS = [
    "'; DROP TABLE {table}; --",
    '" OR 1=1 --',
    "') ; DELETE FROM {table}; --",
    "%s",
    "%(key)s",
    ":key",
    "?",
    "$1",
    "\\'",
    "''",
    "/*",
    "*/",
    "NULL",
    "0x00",
    "' UNION SELECT * FROM {table} --",
    "`",
    "\\",
    "%",
    "_",
    "\\0",
    "LIKE '%'",
]


# two distinct lone surrogates (ruff takes them for duplicates)
_INVALID_IN_NAMES = {"\x00", "\ud800", "\udcff"}  # noqa: B033
_VALID_CHARS = st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",))


def hostile_text(
    table: str = "pq_tasks", *, min_size: int = 0, max_size: int = 24, valid: bool = False
) -> st.SearchStrategy[str]:
    """Short strings mixing ordinary text, nasty characters and SQL fragments; ``valid``: no NUL
    and no lone surrogate (so a valid key, type or user when not empty)."""
    part = st.one_of(
        st.text(_VALID_CHARS, max_size=4) if valid else st.text(max_size=4),
        st.sampled_from([c for c in NASTY_CHARS if not (valid and c in _INVALID_IN_NAMES)]),
        st.sampled_from(SQL_FRAGMENTS).map(lambda s: s.format(table=table)),
    )
    return st.lists(part, max_size=8).map(lambda parts: "".join(parts)[:max_size]).filter(lambda s: len(s) >= min_size)


def names(table: str = "pq_tasks") -> st.SearchStrategy[str]:
    """Keys, types and users: hostile text plus the length and byte-size boundaries."""
    return st.one_of(
        hostile_text(table, max_size=40),
        st.sampled_from(
            [
                "",
                " ",
                "a",
                "A",
                "a ",
                " a",
                "ä",
                "a\u0301",
                "a" * 255,
                "a" * 256,
                "é" * 255,
                "🎉" * 255,
                "🎉" * 256,
                "x\x00",
                "\x00",
                "\ud800",
                "NULL",
                "null",
                "0",
            ]
        ),
        st.text(min_size=250, max_size=260),
    )


def valid_names(table: str = "pq_tasks", *, max_len: int = 255, exclude: str = "") -> st.SearchStrategy[str]:
    """Names the library must accept (at most ``max_len`` characters, none of ``exclude``), as
    hostile as possible."""
    fixed = [
        " ",
        "a",
        "A",
        "a ",
        " a",
        "ä",
        "a\u0301",
        "a" * 255,
        "é" * 255,
        "🎉" * 255,
        "NULL",
        "0",
        "-",
        "--",
        "-D",
        "@file",
        "%",
        "_",
        "*",
        "'",
        "\\",
        "\n",
        "\x7f",
        "\u202e",
        "#",
        "a#b",
    ]
    return (
        st.one_of(
            hostile_text(table, min_size=1, max_size=min(40, max_len), valid=True),
            st.sampled_from([f[:max_len] for f in fixed]),
            st.text(_VALID_CHARS, min_size=max_len - 5, max_size=max_len),
        )
        .map(lambda v: "".join(c for c in v if c not in exclude) or "x")
        .filter(valid_name)
    )


def invalid_names(table: str = "pq_tasks") -> st.SearchStrategy:
    """Names the library must refuse: empty, NUL, lone surrogates, too long, not a string."""
    return st.one_of(
        st.sampled_from(["", "\x00", "a\x00b", "\ud800", "x\udcff", "a" * 256, "🎉" * 256]),
        hostile_text(table, max_size=20).map(lambda s: s + "\x00"),
        st.text(min_size=256, max_size=300),
    )


def valid_name(value) -> bool:
    """The documented rule: 1-255 characters of valid Unicode without NUL."""
    if not isinstance(value, str) or not 1 <= len(value) <= 255 or "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    hostile_text(max_size=30),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(hostile_text(max_size=12), inner, max_size=4)),
    max_leaves=16,
)
#: task data that is a JSON object: must round-trip exactly
json_objects = st.dictionaries(hostile_text(max_size=12), json_values, max_size=5)


class Opaque:
    def __repr__(self) -> str:
        return "<Opaque>"


def _deep(n: int, leaf=None):
    out = leaf if leaf is not None else {}
    for _ in range(n):
        out = {"a": out}
    return out


#: data that is not a JSON object, or not JSON at all: must be refused with ValidationError
not_json_objects = st.one_of(
    st.lists(json_scalars, max_size=3),
    hostile_text(max_size=10),
    st.integers(),
    st.floats(),
    st.booleans(),
    json_objects.map(lambda d: {**d, "bad": float("nan")}),
    json_objects.map(lambda d: {**d, "bad": float("-inf")}),
    json_objects.map(lambda d: {**d, "bad": {1, 2}}),
    json_objects.map(lambda d: {**d, "bad": b"bytes"}),
    json_objects.map(lambda d: {**d, "bad": Opaque()}),
    json_objects.map(lambda d: {**d, "bad": [1, [2, {"x": object()}]]}),
    st.just({"big": 10**5000}),  # past Python's int-to-str digit limit
    st.builds(lambda n: _deep(n), st.integers(20_000, 30_000)),
)


# -- oracles ---------------------------------------------------------------------------------------
def same(a, b) -> bool:
    """Exact equality: types, dict key order, float bits (no True == 1, no 0.0 == -0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a.hex() == b.hex() if math.isfinite(a) else repr(a) == repr(b)
    return a == b


def is_json_object(value) -> bool:
    """Whether ``value`` is a dict that JSON represents exactly (str keys, finite floats, ...)."""

    def ok(v, depth) -> bool:
        if depth > 150:
            return False
        if v is None or isinstance(v, (bool, str)):
            return True
        if isinstance(v, int):
            return abs(v) < 10**4000
        if isinstance(v, float):
            return math.isfinite(v)
        if isinstance(v, list):
            return all(ok(x, depth + 1) for x in v)
        if isinstance(v, dict):
            return all(isinstance(k, str) and ok(x, depth + 1) for k, x in v.items())
        return False

    return isinstance(value, dict) and ok(value, 0)


# -- the database side ---------------------------------------------------------------------------
class Snapshot:
    """Every row of some tables, read with a separate connection (the "before/after" check)."""

    def __init__(self, url: str, *tables: str):
        self.engine = sa.create_engine(url, pool_size=1)
        self.tables = tables

    def __call__(self) -> dict:
        out = {}
        with self.engine.connect() as conn:
            for t in self.tables:
                rows = conn.execute(sa.text(f"SELECT * FROM {t}")).all()  # names validated by the fixtures
                out[t] = sorted((tuple(r) for r in rows), key=repr)
        return out

    def close(self) -> None:
        self.engine.dispose()


@contextmanager
def statements():
    """Collect the SQL text (not the parameters) of every statement any engine executes."""
    seen: list[str] = []

    def spy(conn, cursor, statement, parameters, context, executemany):
        seen.append(statement)

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", spy)
    try:
        yield seen
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", spy)


# -- the CLI side ----------------------------------------------------------------------------------
def one_line_error(prog: str, result, *codes: int) -> str:
    """A refused command: an expected exit code, nothing on stdout (except what a command printed
    before failing is not allowed either), exactly one ``<prog>: error:`` line, no traceback."""
    assert result.exit_code in codes, (result.exit_code, result.stdout, result.stderr)
    err = result.stderr
    assert err.startswith(f"{prog}: error: "), err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err and "Traceback" not in result.stdout
    assert result.stdout == "", result.stdout
    return err


def clean_environ() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("PQ_")}


def dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False)


# -- fixtures (import them into a test module to use them) ------------------------------------
# Registered under their fixture names; import the *_fixture functions into a test module
# (``from hostile_support import shared_queue_fixture``, with a noqa for F401) to use them.
@pytest.fixture(name="clean_env")
def clean_env_fixture(monkeypatch, tmp_path):
    """No PQ_* variables from outside; run in a temp dir (the default URL is ./pq.db)."""
    for name in list(os.environ):
        if name.startswith("PQ_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module", name="_shared_tables")
def shared_tables_fixture():
    """The shared tables of one module, per server, dropped at its teardown. Kept in the fixture,
    not in the module: xdist may tear a module's fixtures down and set them up again when it
    hands the module's remaining tests to a worker that ran some of them (worksteal)."""
    made: dict = {}
    yield made
    from conftest import drop_tables

    for (backend, url), q in made.items():
        q.close()
        if backend != "sqlite":
            drop_tables(url, q.table)


@pytest.fixture(name="shared_queue")
def shared_queue_fixture(backend, db_url, _shared_tables):
    """An initialised queue table shared by the tests of one module on one server (DDL on a
    shared server costs more than the examples); tests keep to their own key prefixes."""
    import uuid

    import queue_core
    from queue_core.clock import FakeClock

    if (backend, db_url) not in _shared_tables:
        q = queue_core.open(db_url, f"h{os.getpid() % 10000}_{uuid.uuid4().hex[:10]}", clock=FakeClock(1_700_000_000.0))
        q.init()
        _shared_tables[(backend, db_url)] = q
    return _shared_tables[(backend, db_url)]
