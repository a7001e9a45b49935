"""queue_core.rules.policy: every rule, with examples and properties (hypothesis)."""

from __future__ import annotations

import ast
import math
import random
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from queue_core.rules import policy
from queue_core.rules.policy import (
    CRASH_ALLOWANCE,
    JITTER,
    Backoff,
    GiveUp,
    LeaseEnd,
    OnClaim,
    Retry,
)
from queue_core.rules.validate import MAX_DURATION


class Draw:
    """A random source that returns one value and counts how often it was asked."""

    def __init__(self, value: float):
        self.value, self.calls = value, 0

    def random(self) -> float:
        self.calls += 1
        return self.value


class NoDraw:
    def random(self) -> float:
        raise AssertionError("no random draw expected")


seconds = st.floats(min_value=0, max_value=1e6, allow_nan=False)
caps = st.none() | st.floats(min_value=0, max_value=1e7, allow_nan=False)
jitters = st.floats(min_value=0, max_value=0.9, allow_nan=False)
draws = st.floats(min_value=0, max_value=1, exclude_max=True)
attempts = st.integers(min_value=0, max_value=10_000) | st.sampled_from([2**31 - 2, 2**31 - 1])
limits = st.none() | st.integers(min_value=1, max_value=10_000)


# -- 1. backoff ---------------------------------------------------------------------------------
def test_backoff_doubles_from_base_up_to_the_cap():
    p = Backoff(10, cap=35, jitter=0)
    assert [policy.backoff(p, n, NoDraw()) for n in (1, 2, 3, 4, 10)] == [10, 20, 35, 35, 35]


def test_backoff_without_a_cap_keeps_doubling():
    assert [policy.unjittered_wait(Backoff(3), n) for n in (1, 2, 3, 11)] == [3, 6, 12, 3 * 1024]


def test_backoff_jitter_spans_plus_minus_twenty_percent():
    p = Backoff(100)
    assert JITTER == 0.2
    assert policy.backoff(p, 1, Draw(0.0)) == pytest.approx(80)
    assert policy.backoff(p, 1, Draw(0.5)) == pytest.approx(100)
    assert policy.backoff(p, 1, Draw(0.999999)) == pytest.approx(120, rel=1e-5)


def test_backoff_draws_once_and_only_with_jitter():
    rng = Draw(0.3)
    policy.backoff(Backoff(5), 3, rng)
    assert rng.calls == 1
    assert policy.backoff(Backoff(5, jitter=0), 3, NoDraw()) == 20


def test_fixed_backoff_is_the_same_every_time():
    p = Backoff.fixed(7.5)
    assert (p.growth, p.jitter, p.cap) == (1.0, 0.0, None)
    assert {policy.backoff(p, n, NoDraw()) for n in (0, 1, 2, 50, 10**9)} == {7.5}


def test_backoff_of_attempt_zero_or_below_is_the_base():
    assert policy.unjittered_wait(Backoff(4), 0) == policy.unjittered_wait(Backoff(4), -3) == 4


def test_backoff_after_very_many_failures_is_bounded_not_an_overflow():
    assert policy.unjittered_wait(Backoff(10), 10**9) == math.inf  # 2.0 ** 10**9 overflows
    assert policy.backoff(Backoff(10), 10**9, Draw(0.0)) == MAX_DURATION
    assert policy.unjittered_wait(Backoff(10, cap=3600), 10**9) == 3600
    assert policy.backoff(Backoff(1e300), 30, Draw(0.99)) == MAX_DURATION  # a float product past 1e308
    assert policy.backoff(Backoff(0), 10**9, Draw(0.5)) == 0  # not 0 * inf


@given(base=seconds, cap=caps, jitter=jitters, n=attempts, u=draws)
def test_backoff_is_never_negative_nor_above_the_jittered_cap(base, cap, jitter, n, u):
    wait = policy.backoff(Backoff(base, cap=cap, jitter=jitter), n, Draw(u))
    assert 0 <= wait <= MAX_DURATION
    if cap is not None:
        assert wait <= cap * (1 + jitter) * (1 + 1e-12)


@given(base=seconds, cap=caps, jitter=jitters, n=st.integers(min_value=0, max_value=2000), u=draws)
def test_backoff_is_monotone_in_the_attempt(base, cap, jitter, n, u):
    p = Backoff(base, cap=cap, jitter=jitter)
    assert policy.backoff(p, n, Draw(u)) <= policy.backoff(p, n + 1, Draw(u))
    assert policy.unjittered_wait(p, n) <= policy.unjittered_wait(p, n + 1)


@given(base=st.floats(min_value=0, max_value=1e3), cap=caps, n=st.integers(min_value=1, max_value=60))
def test_unjittered_wait_is_base_doubled_per_attempt_capped(base, cap, n):
    expected = base * 2 ** (n - 1)
    if cap is not None:
        expected = min(expected, cap)
    assert policy.unjittered_wait(Backoff(base, cap=cap), n) == pytest.approx(expected)


@given(base=seconds, cap=caps, jitter=jitters, n=attempts, u=draws)
def test_jitter_stays_within_its_band(base, cap, jitter, n, u):
    p = Backoff(base, cap=cap, jitter=jitter)
    raw = policy.unjittered_wait(p, n)
    wait = policy.backoff(p, n, Draw(u))
    assert min(raw * (1 - jitter), MAX_DURATION) * (1 - 1e-12) <= wait
    assert wait <= min(raw * (1 + jitter), MAX_DURATION) * (1 + 1e-12)


@given(retry_wait=st.floats(min_value=0, max_value=1e4), failures=st.integers(min_value=0, max_value=30), u=draws)
def test_a_step_waits_retry_wait_doubled_per_failure_with_jitter(retry_wait, failures, u):
    """pqflow's formula (docs/workflows.md): retry_wait * 2**failures * (0.8 + 0.4 * u), no cap."""
    verdict = policy.step_after_error(failures + 1, failures + 1, Backoff(retry_wait), Draw(u))
    assert isinstance(verdict, Retry)
    assert verdict.wait == pytest.approx(min(retry_wait * 2**failures * (0.8 + 0.4 * u), MAX_DURATION))


# -- 2. exhaustion ------------------------------------------------------------------------------
def test_exhausted_examples():
    assert not policy.exhausted(0, 1)
    assert policy.exhausted(1, 1)
    assert not policy.exhausted(2, 3)
    assert policy.exhausted(4, 3)
    assert not policy.exhausted(10**9, None)
    assert policy.exhausted(2**31 - 1, None)  # the column's limit: a claim past it would overflow


@given(n=attempts, limit=limits)
def test_exhausted_iff_attempts_reach_max_attempts(n, limit):
    assert policy.exhausted(n, limit) == (n >= (policy.MAX_ATTEMPTS if limit is None else limit))


@given(n=attempts, limit=limits, base=seconds, cap=caps, u=draws)
def test_after_error_gives_up_iff_exhausted_else_retries_with_the_backoff(n, limit, base, cap, u):
    p = Backoff(base, cap=cap)
    verdict = policy.after_error(n, limit, p, Draw(u))
    if policy.exhausted(n, limit):
        assert verdict == GiveUp()
    else:
        assert verdict == Retry(policy.backoff(p, n, Draw(u)))


def test_after_error_at_the_last_attempt_gives_up_without_drawing():
    assert policy.after_error(3, 3, Backoff(10), NoDraw()) == GiveUp()


@given(failures=st.integers(min_value=1, max_value=200), retries=st.integers(min_value=0, max_value=200))
def test_a_step_is_retried_while_failures_are_within_its_retries(failures, retries):
    verdict = policy.step_after_error(failures, retries, Backoff(0), Draw(0.5))
    assert isinstance(verdict, Retry) == (failures <= retries)


def test_crash_allowance_examples():
    assert CRASH_ALLOWANCE == 5
    assert policy.crashes(attempts=1, failures=0) == 0
    assert policy.crashes(attempts=4, failures=2) == 1
    assert not policy.crashed_too_often(attempts=6, failures=0)  # 5 crashes: one more try
    assert policy.crashed_too_often(attempts=7, failures=0)
    assert not policy.crashed_too_often(attempts=7, failures=1)


@given(st.lists(st.sampled_from(list(LeaseEnd)), max_size=40))
def test_only_expired_leases_count_as_crashes(ends):
    """Claim after claim (each counts an attempt, its end may give it back), the crashes a step's
    current claim sees are its expired leases: never its releases, nor its leases lost before
    the start, nor its failed runs."""
    n = 0
    for end in ends:
        n = policy.attempts_after(end, n + 1)
    failures = ends.count(LeaseEnd.RAN)  # a run that came back: an error the decider counted
    assert policy.crashes(n + 1, failures) == ends.count(LeaseEnd.EXPIRED)
    assert policy.crashed_too_often(n + 1, failures) == (ends.count(LeaseEnd.EXPIRED) > CRASH_ALLOWANCE)


# -- 3. what spends an attempt ------------------------------------------------------------------
def test_a_run_and_an_expired_lease_spend_an_attempt_the_others_do_not():
    assert {e for e in LeaseEnd if policy.spends_attempt(e)} == {LeaseEnd.RAN, LeaseEnd.EXPIRED}
    for end in (LeaseEnd.RELEASED, LeaseEnd.LOST_BEFORE_START):
        assert not policy.spends_attempt(end)


@given(end=st.sampled_from(list(LeaseEnd)), n=attempts)
def test_attempts_after_gives_back_exactly_the_claims_attempt_when_not_spent(end, n):
    after = policy.attempts_after(end, n)
    assert after >= 0
    assert after == (n if policy.spends_attempt(end) else max(0, n - 1))


@given(n=st.integers(min_value=0, max_value=1000), k=st.integers(min_value=0, max_value=50))
def test_releases_and_lost_leases_never_exhaust_a_task(n, k):
    """However often a task is claimed and given back unrun, its count is where it was."""
    start = n
    for i in range(k):
        n = policy.attempts_after((LeaseEnd.RELEASED, LeaseEnd.LOST_BEFORE_START)[i % 2], n + 1)
    assert n == start


# -- 4. lease expiry ----------------------------------------------------------------------------
def test_a_lease_is_held_until_its_timeout_exclusive():
    assert policy.lease_held(True, 100.0, 99.9)
    assert not policy.lease_held(True, 100.0, 100.0)  # due at its timeout: taken for dead
    assert not policy.lease_held(False, 100.0, 50.0)
    assert policy.lease_held(1, 100.0, 0.0)


@given(leased=st.booleans(), timeout=st.floats(0, 1e12), now=st.floats(0, 1e12))
def test_lease_held_iff_leased_and_not_expired(leased, timeout, now):
    assert policy.lease_held(leased, timeout, now) == (leased and now < timeout)


def test_a_lease_longer_than_any_claim_writes_takes_no_slot():
    assert policy.counts_towards_cap(True, 100.0 + policy.MAX_LEASE, 100.0)
    assert not policy.counts_towards_cap(True, 100.0 + policy.MAX_LEASE + 1, 100.0)  # edited by hand
    assert policy.lease_held(True, 100.0 + policy.MAX_LEASE + 1, 100.0)  # still shown as running
    assert not policy.counts_towards_cap(True, 100.0, 100.0)


@given(leased=st.booleans(), timeout=st.floats(0, 1e16), now=st.floats(0, 1e12))
def test_a_counted_lease_is_a_held_lease_within_max_lease(leased, timeout, now):
    counted = policy.counts_towards_cap(leased, timeout, now)
    assert counted == (policy.lease_held(leased, timeout, now) and timeout <= now + policy.MAX_LEASE)
    assert not counted or policy.lease_held(leased, timeout, now)


@pytest.mark.parametrize(
    "row, verdict",
    [
        (dict(attempts=0, max_attempts=None, cancel_requested=False, owned=False), OnClaim.DELIVER),
        (dict(attempts=5, max_attempts=None, cancel_requested=False, owned=False), OnClaim.DELIVER),
        (dict(attempts=2, max_attempts=3, cancel_requested=False, owned=False), OnClaim.DELIVER),
        (dict(attempts=3, max_attempts=3, cancel_requested=False, owned=False), OnClaim.GIVE_UP),
        (dict(attempts=3, max_attempts=3, cancel_requested=True, owned=False), OnClaim.CANCEL),
        (dict(attempts=0, max_attempts=None, cancel_requested=True, owned=True), OnClaim.DELIVER),
        (dict(attempts=3, max_attempts=3, cancel_requested=True, owned=True), OnClaim.GIVE_UP),
    ],
)
def test_on_claim_examples(row, verdict):
    assert policy.on_claim(**row) is verdict


@given(n=attempts, limit=limits, cancel=st.booleans(), owned=st.booleans())
def test_on_claim_cancels_then_gives_up_then_delivers(n, limit, cancel, owned):
    verdict = policy.on_claim(attempts=n, max_attempts=limit, cancel_requested=cancel, owned=owned)
    if cancel and not owned:
        assert verdict is OnClaim.CANCEL
    elif policy.exhausted(n, limit):
        assert verdict is OnClaim.GIVE_UP
    else:
        assert verdict is OnClaim.DELIVER


@given(cancel=st.booleans(), owned=st.booleans())
def test_an_unrun_task_is_cancelled_iff_requested_and_not_owned(cancel, owned):
    assert policy.cancels_unrun(cancel, owned) is (cancel and not owned)
    assert (
        policy.on_claim(attempts=0, max_attempts=None, cancel_requested=cancel, owned=owned) is OnClaim.CANCEL
    ) is policy.cancels_unrun(cancel, owned)


def test_a_run_ends_cancelled_iff_its_cancel_was_requested():
    assert policy.ends_cancelled(True) is True
    assert policy.ends_cancelled(False) is False


@given(wait=st.none() | seconds, retry_wait=seconds)
def test_a_requested_retry_waits_what_it_named_else_retry_wait_unjittered(wait, retry_wait):
    assert policy.requested_wait(wait, retry_wait) == (retry_wait if wait is None else wait)


def test_give_up_error_keeps_the_last_error_or_names_the_lease_expiry():
    assert policy.give_up_error("ValueError: x", 3) == "ValueError: x (gave up after 3 attempts)"
    assert policy.give_up_error(None, 2) == "lease expired (gave up after 2 attempts)"
    assert policy.give_up_error("", 2) == "lease expired (gave up after 2 attempts)"


# -- 5. fair share ------------------------------------------------------------------------------
def _row(id_, priority=0, user=None, max_running=None, timeout=0.0, max_attempts=None) -> dict:
    return {
        "id": id_,
        "priority": priority,
        "resource": user,
        "max_running": max_running,
        "timeout": timeout,
        "max_attempts": max_attempts,
    }


def test_fair_weight_is_max_running_over_running_plus_one():
    assert policy.fair_weight(_row(1, user="u", max_running=4), {"u": 1}) == 2
    assert policy.fair_weight(_row(1, user="u"), {"u": 3}) == 0.25  # no cap counts as 1
    assert policy.fair_weight(_row(1, user="u", max_running=3), {}) == 3
    assert policy.fair_weight(_row(1), {"u": 9}) == 1  # no user: weight 1
    assert policy.fair_weight(_row(1, max_running=2), {}) == 1  # no user: max_running means nothing


def test_may_claim_only_below_the_users_cap():
    assert policy.may_claim(_row(1, user="u", max_running=2), {"u": 1})
    assert not policy.may_claim(_row(1, user="u", max_running=2), {"u": 2})
    assert policy.may_claim(_row(1, user="u"), {"u": 100})
    assert policy.may_claim(_row(1, max_running=1), {None: 5})  # no user: never capped


def test_choose_fair_serves_the_user_with_free_capacity_first():
    rows = [_row(1, user="busy", max_running=2, timeout=0), _row(2, user="idle", max_running=2, timeout=5)]
    assert [r["id"] for r in policy.choose_fair(rows, {"busy": 1}, 1)] == [2]


def test_choose_fair_priority_beats_weight_and_due_time_breaks_ties():
    rows = [
        _row(1, priority=0, user="a", max_running=10),
        _row(2, priority=1, user="b", timeout=9),
        _row(3, priority=1, user="c", timeout=3),
    ]
    assert [r["id"] for r in policy.choose_fair(rows, {}, 3)] == [3, 2, 1]


def test_choose_fair_never_takes_a_capped_users_last_slot_twice():
    rows = [_row(i, user="u", max_running=2) for i in range(5)]
    assert [r["id"] for r in policy.choose_fair(rows, {"u": 1}, 5)] == [0]
    assert policy.choose_fair(rows, {"u": 2}, 5) == []


def test_choose_fair_alternates_between_uncapped_users():
    rows = [_row(i, user="a", timeout=i) for i in range(3)] + [_row(10 + i, user="b", timeout=i) for i in range(3)]
    assert [r["resource"] for r in policy.choose_fair(rows, {}, 4)] == ["a", "b", "a", "b"]


_users = st.sampled_from([None, "u1", "u2", "u3"])
_rows = st.lists(
    st.tuples(st.integers(0, 2), _users, st.none() | st.integers(1, 3), st.integers(0, 5)),
    max_size=12,
).map(
    lambda specs: [_row(i, priority=p, user=u, max_running=m, timeout=float(t)) for i, (p, u, m, t) in enumerate(specs)]
)
_running = st.dictionaries(st.sampled_from(["u1", "u2", "u3"]), st.integers(0, 3))


def _key(row, running):
    return (-row["priority"], -policy.fair_weight(row, running), row["timeout"], row["id"])


@given(rows=_rows, running=_running, n=st.integers(1, 15))
def test_choose_fair_properties(rows, running, n):
    before = dict(running)
    chosen = policy.choose_fair(rows, running, n)
    assert running == before  # its input is left alone
    assert len(chosen) <= n and len({r["id"] for r in chosen}) == len(chosen)
    assert all(r in rows for r in chosen)
    now_running = dict(running)
    for i, r in enumerate(chosen):
        assert policy.may_claim(r, now_running)  # never past a cap
        left = [x for x in rows if x not in chosen[:i] and policy.may_claim(x, now_running)]
        assert _key(r, now_running) == min(_key(x, now_running) for x in left)  # the best eligible one
        if r["resource"] is not None:
            now_running[r["resource"]] = now_running.get(r["resource"], 0) + 1
    assert [r["priority"] for r in chosen] == sorted((r["priority"] for r in chosen), reverse=True)
    if len(chosen) < n:  # it stopped early only because every other row is capped
        assert not [x for x in rows if x not in chosen and policy.may_claim(x, now_running)]


@given(rows=_rows, running=_running, n=st.integers(1, 15), seed=st.integers(0, 2**32))
def test_choose_fair_ignores_the_order_of_its_candidates(rows, running, n, seed):
    shuffled = list(rows)
    random.Random(seed).shuffle(shuffled)
    assert policy.choose_fair(shuffled, running, n) == policy.choose_fair(rows, running, n)


@given(rows=_rows, running=_running)
def test_rows_without_a_user_are_never_capped(rows, running):
    chosen = policy.choose_fair(rows, running, len(rows) + 1)
    assert all(r in chosen for r in rows if r["resource"] is None)


def test_limited_first_cuts_before_a_limited_task_that_is_not_first():
    rows = [_row(1), _row(2), _row(3, max_attempts=2), _row(4)]
    assert [r["id"] for r in policy.limited_first(rows)] == [1, 2]
    assert [r["id"] for r in policy.limited_first(rows[2:])] == [3, 4]
    assert policy.limited_first([]) == []


@given(st.lists(st.none() | st.integers(1, 5), max_size=10))
def test_limited_first_is_the_longest_prefix_with_no_limited_task_behind_another(limits_):
    rows = [_row(i, max_attempts=m) for i, m in enumerate(limits_)]
    batch = policy.limited_first(rows)
    assert batch == rows[: len(batch)]
    assert all(r["max_attempts"] is None for r in batch[1:])
    assert (not rows) == (not batch)  # a non-empty claim always delivers its first row
    if len(batch) < len(rows):
        assert rows[len(batch)]["max_attempts"] is not None


def test_a_limited_tasks_success_is_written_at_once():
    assert policy.write_success_at_once(1)
    assert not policy.write_success_at_once(None)


# -- the module itself --------------------------------------------------------------------------
PURE = {"__future__", "collections.abc", "dataclasses", "enum", "typing", "json", "math", "re"}


def _imports(path: Path) -> set[str]:
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add("." * node.level + (node.module or ""))
    return imported


def test_the_policy_module_does_no_io_and_imports_no_store():
    path = Path(policy.__file__)
    assert _imports(path) - PURE == {".validate", "..errors"}  # MAX_DURATION; PermanentError (a leaf: below)
    assert _imports(path.parent / "validate.py") - PURE == {"..errors"}
    assert _imports(path.parent.parent / "errors.py") <= PURE
