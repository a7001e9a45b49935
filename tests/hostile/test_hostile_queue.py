"""Hostile input to the queue_core library, on SQLite, MariaDB and PostgreSQL.

Every call either succeeds with an exact round trip (what was stored is what is read back) or
raises a queue_core error and leaves the table exactly as it was. Hostile strings never appear
in SQL text (they are always bound parameters), and hostile table names never reach the
database at all.
"""

from __future__ import annotations

import json
import math

import pytest
from hostile_support import (  # noqa: F401 - fixtures
    Snapshot,
    hostile,
    hostile_text,
    invalid_names,
    is_json_object,
    json_objects,
    names,
    not_json_objects,
    same,
    shared_queue_fixture,
    shared_tables_fixture,
    statements,
    valid_name,
    valid_names,
)
from hypothesis import assume, event, given, note
from hypothesis import strategies as st

import queue_core
from queue_core import PreemptedError, TaskError, ValidationError

T0 = 1_700_000_000.0


@pytest.fixture
def snap(queue, db_url):
    s = Snapshot(db_url, queue.table, queue.table + "_meta")
    yield s
    s.close()


@pytest.fixture
def sq(shared_queue):
    return shared_queue


@pytest.fixture
def ssnap(shared_queue, db_url):
    s = Snapshot(db_url, shared_queue.table, shared_queue.table + "_meta")
    yield s
    s.close()


def fresh_key(q, prefix: str) -> str:
    n = getattr(q, "_hostile_counter", 0) + 1
    q._hostile_counter = n
    return f"{prefix}{n}"


def _injected(value, seen: list[str]) -> bool:
    """Whether a quote-bearing value showed up in the text of an executed statement."""
    return isinstance(value, str) and "'" in value and any(value in stmt for stmt in seen)


# -- keys, types, users ------------------------------------------------------------------------
@hostile(40)
@given(data=st.data())
def test_names_round_trip_exactly_or_are_refused(queue, snap, data):
    """Keys, types and users: unicode, NUL, quotes, SQL, empty, 255/256 characters, 4-byte
    characters. Exact keys (no case folding, no trailing-space padding), exact filters (no
    LIKE wildcards), bound parameters only. At most one field per example is invalid, and
    keys already stored come back as duplicates now and then."""
    model: dict = getattr(queue, "_hostile_model", {})
    queue._hostile_model = model
    bad = data.draw(st.sampled_from([None, None, None, "key", "type", "user"]), "bad field")
    # the draws never depend on the model (Hypothesis replays them): pick a duplicate by index
    dup = data.draw(st.integers(0, 9), "duplicate?") == 0
    index = data.draw(st.integers(0, 10**6), "duplicate index")
    key = data.draw(invalid_names(queue.table) if bad == "key" else valid_names(queue.table), "key")
    if model and bad is None and dup:
        key = sorted(model)[index % len(model)]
    type_ = data.draw(invalid_names(queue.table) if bad == "type" else valid_names(queue.table), "type")
    user = data.draw(invalid_names(queue.table) if bad == "user" else st.none() | valid_names(queue.table), "user")
    payload = {"key": key, "n": len(model)} if valid_name(key) else {}
    before = snap()
    with statements() as seen:
        try:
            queue.submit(key, type_, payload, user=user, now=T0)
        except TaskError as exc:
            note(f"refused: {exc!r}")
            event(f"refused: {type(exc).__name__}")
            if bad is None:
                assert key in model and isinstance(exc, queue_core.IdempotentAlreadyExistsError), exc
            else:
                assert isinstance(exc, ValidationError), exc
            assert snap() == before
        else:
            event("stored")
            assert bad is None and key not in model
            model[key] = (type_, user, payload)
        assert not any(_injected(v, seen) for v in (key, type_, user))
    stored = {m.key: m for m in queue.list()}
    assert sorted(stored) == sorted(model)
    for k, (t, u, d) in model.items():
        assert (stored[k].type, stored[k].user) == (t, u) and same(stored[k].data, d)
    if valid_name(key) and key in model:
        m = queue[key].metadata()
        assert (m.key, m.type, m.user) == (key, *model[key][:2])
    if valid_name(type_):
        assert sorted(m.key for m in queue.list(type=type_)) == sorted(k for k, v in model.items() if v[0] == type_)
    if valid_name(user):
        assert sorted(m.key for m in queue.list(user=user)) == sorted(k for k, v in model.items() if v[1] == user)


@hostile(15)
@given(key=names(), op=st.sampled_from(["metadata", "cancel", "force_finish", "exists"]))
def test_lookups_of_absent_hostile_keys(sq, ssnap, key, op):
    queue, snap = sq, ssnap
    assume(key != "present")
    if not queue["present"].exists():
        queue.submit("present", "t", now=T0)
    before = snap()
    with statements() as seen:
        try:
            task = queue[key]
            result = getattr(task, op)()
        except queue_core.NotFoundError:
            assert valid_name(key) and key != "present"
        except ValidationError:
            assert not valid_name(key)
        else:
            assert op == "exists" and result is False
    assert not _injected(key, seen)
    assert snap() == before


# -- task data -----------------------------------------------------------------------------------
@hostile(30)
@given(bad=st.sampled_from([False, False, True]), valid=st.none() | json_objects, invalid=not_json_objects)
def test_data_round_trips_exactly_or_is_refused(sq, ssnap, bad, valid, invalid):
    queue, snap = sq, ssnap
    data = invalid if bad else valid
    key = fresh_key(queue, "data-")
    before = snap()
    with statements() as seen:
        try:
            queue.submit(key, "t", data, now=T0)
        except ValidationError as exc:
            note(f"refused: {exc}")
            event("refused")
            assert not (data is None or is_json_object(data)), exc
            assert snap() == before
            return
    event("stored")
    assert data is None or is_json_object(data)
    expected = {} if data is None else data
    assert same(queue[key].metadata().data, expected)
    for stmt in seen:  # the data went in as a parameter
        assert json.dumps(expected, ensure_ascii=False, separators=(",", ":")) not in stmt or expected == {}


@pytest.mark.parametrize("unit", ["x", "é", "🎉"])
def test_data_size_limit_is_exact_in_bytes(sq, ssnap, unit):
    queue, snap = sq, ssnap
    limit = queue.config["max_data_size"]
    width = len(unit.encode())
    overhead = len('{"b":""}')
    fits = (limit - overhead) // width
    big = {"b": unit * fits}
    queue.submit("fits-" + unit, "t", big, now=T0)
    assert same(queue["fits-" + unit].metadata().data, big)
    before = snap()
    with pytest.raises(ValidationError, match="limit is"):
        queue.submit("over-" + unit, "t", {"b": unit * (fits + 1)}, now=T0)
    assert snap() == before


def test_update_data_from_a_handler_is_checked_like_submit(sq, ssnap):
    queue, snap = sq, ssnap
    queue.submit("k", "t", {"a": 1}, now=T0, priority=2**31 - 1)
    task = queue.poll(now=T0)
    assert task.key == "k"
    before = snap()
    for bad in ([1], {"x": float("nan")}, {"x": object()}, {"big": "x" * 2_000_000}, "text"):
        with pytest.raises(ValidationError):
            task.update_data(bad, now=T0)
    assert snap() == before
    task.update_data({"b": "\udcff'; --"}, now=T0)
    assert same(queue["k"].metadata().data, {"a": 1, "b": "\udcff'; --"})


# -- numbers: priorities, caps, attempts, times, durations ----------------------------------------
bad_numbers = st.one_of(
    st.sampled_from(
        [
            2**31,
            -(2**31) - 1,
            10**13,
            1.5,
            -0.0,
            "1",
            "",
            b"1",
            [1],
            True,
            False,
            float("nan"),
            float("inf"),
            -1e300,
            1e300,
            1e13 + 1,
        ]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(2**31, 2**40),
    st.integers(-(2**40), -(2**31) - 1),
)


def _int_in(v, lo, hi) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _time_ok(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= 1e13


@hostile(25)
@given(data=st.data())
def test_numeric_options_are_stored_exactly_or_refused(sq, ssnap, data):
    queue, snap = sq, ssnap
    bad = data.draw(st.sampled_from([None, None, "priority", "max_running", "max_attempts", "run_at"]), "bad")
    ints = st.integers(-(2**31), 2**31 - 1)
    positive = st.none() | st.integers(1, 2**31 - 1)
    priority = data.draw(bad_numbers | st.none() if bad == "priority" else ints, "priority")
    max_running = data.draw(bad_numbers | st.integers(-5, 0) if bad == "max_running" else positive, "max_running")
    max_attempts = data.draw(bad_numbers | st.integers(-5, 0) if bad == "max_attempts" else positive, "max_attempts")
    run_at = data.draw(
        bad_numbers.filter(lambda v: not _time_ok(v)) | st.integers(-(10**6), -1)
        if bad == "run_at"
        else st.none() | st.integers(0, 10**13) | st.floats(0, 1e13),
        "run_at",
    )
    key = fresh_key(queue, "num-")
    ok = (
        _int_in(priority, -(2**31), 2**31 - 1)
        and (max_running is None or _int_in(max_running, 1, 2**31 - 1))
        and (max_attempts is None or _int_in(max_attempts, 1, 2**31 - 1))
        and (run_at is None or _time_ok(run_at))
    )
    assert ok == (bad is None) or bad == "priority" and ok  # a "bad" float may still be an int-valued one
    before = snap()
    try:
        queue.submit(
            key,
            "t",
            user="u",
            priority=priority,
            max_running=max_running,
            max_attempts=max_attempts,
            run_at=run_at,
            now=T0,
        )
    except ValidationError as exc:
        note(f"refused: {exc}")
        event("refused")
        assert not ok
        assert snap() == before
        return
    event("stored")
    assert ok
    m = queue[key].metadata()
    assert (m.priority, m.max_running, m.max_attempts) == (priority, max_running, max_attempts)
    assert m.run_at == (T0 if run_at is None else float(run_at))


durations = st.one_of(
    st.none(),
    st.floats(0, 1e11),
    st.integers(0, 10**11),
    st.sampled_from([0, 0.0, -0.0, 1e11, 1, 0.001]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**12), 10**12),
    st.booleans(),
    st.sampled_from([1e11 + 1, "5", -1, float("nan")]),
)


def _duration_ok(v, positive=False) -> bool:
    return (
        isinstance(v, (int, float))
        and not isinstance(v, bool)
        and math.isfinite(v)
        and 0 <= v <= 1e11
        and not (positive and v == 0)
    )


@hostile(20)
@given(alive=durations, retry_wait=durations, retention=durations)
def test_durations_of_holder_operations(sq, ssnap, alive, retry_wait, retention):
    """alive_time (poll, heartbeat), retry_wait (retry) and retention_time (finish): a refused
    value leaves the task exactly as it was, still held by the caller."""
    queue, snap = sq, ssnap
    queue.submit(fresh_key(queue, "dur-"), "t", now=T0, priority=2**31 - 1)
    before = snap()
    try:
        task = queue.poll(alive_time=alive, now=T0) if alive is not None else queue.poll(now=T0)
    except ValidationError:
        assert not _duration_ok(alive, positive=True)
        assert snap() == before
        return
    assert alive is None or _duration_ok(alive, positive=True)
    assert task.timeout == T0 + (queue.config["alive_time"] if alive is None else float(alive))
    held = snap()
    for op, value, positive in (
        (lambda v: task.heartbeat(alive_time=v, now=T0), alive, True),
        (lambda v: task.retry(retry_wait=v, now=T0), retry_wait, False),
        (lambda v: task.finish(retention_time=v, now=T0), retention, False),
    ):
        if value is None:
            continue
        try:
            op(value)
        except ValidationError:
            assert not _duration_ok(value, positive)
            assert snap() == held
        except PreemptedError:  # a lease so short it ended as it began (T0 + alive == T0): never revived
            assert task.timeout <= T0 and positive
            assert snap() == held
        else:
            assert _duration_ok(value, positive)
            held = snap()
            if task.done:
                break  # retry/finish gave the task up
    else:
        task.release(now=T0)
    assert queue[task.key].metadata().status in ("waiting", "finished")


# -- table names ---------------------------------------------------------------------------------
TABLE_RE_OK = __import__("re").compile(r"^[A-Za-z_][A-Za-z0-9_]{0,39}$")


@hostile(60)
@given(
    name=st.one_of(
        hostile_text(max_size=50),
        st.text(max_size=45),
        st.sampled_from(
            [
                "pq_tasks; DROP TABLE x",
                "a" * 40,
                "a" * 41,
                "_",
                "9a",
                "a-b",
                "a.b",
                "pq_tasks --",
                '"pq"',
                "`pq`",
                "ｐｑ",
                "pq\x00",
                "ä",
            ]
        ),
    )
)
def test_hostile_table_names_never_reach_the_database(db_url, name):
    import perfectsched

    with statements() as seen:
        for opener in (
            lambda: queue_core.open(db_url, name),
            lambda: perfectsched.open(db_url, name, "pq_tasks"),
            lambda: perfectsched.open(db_url, "pq_schedules", name),
        ):
            try:
                handle = opener()
            except queue_core.ConfigError as exc:
                assert not TABLE_RE_OK.match(name), exc
            else:
                assert TABLE_RE_OK.match(name)
                handle.close()
    assert seen == []  # validation happens before any connection or statement


# -- SQL injection through every string the store writes -------------------------------------------
def test_quote_bearing_values_are_only_ever_bound_parameters(queue):
    evil = f"x'); DELETE FROM {queue.table}; DROP TABLE {queue.table}; --\\' \" `"
    with statements() as seen:
        queue.submit(evil, evil, {evil: evil}, user=evil, now=T0)
        queue.submit("g1", "t", now=T0, group=evil)
        task = queue.poll(now=T0)
        task.fail(error=evil, now=T0)
        assert [m.key for m in queue.list(type=evil)] == [evil]
        assert [m.key for m in queue.list(user=evil)] == [evil]
        assert [m.key for m in queue.list(group=evil)] == ["g1"]
        queue.transaction(lambda tx: tx.submit(evil + "2", evil, {}, group=evil))
        queue.transaction(lambda tx: (tx.lock(evil), tx.get_many([evil, evil + "2"]), tx.group(evil)))
        queue[evil + "2"].cancel_request(now=T0)
        queue.stats()
    assert not any(evil in stmt or "DELETE FROM" in stmt.upper() and "WHERE" not in stmt.upper() for stmt in seen)
    m = queue[evil].metadata()
    assert (m.key, m.type, m.user, m.data, m.error) == (evil, evil, evil, {evil: evil}, evil)
    assert queue.stats()["total"] == 3
