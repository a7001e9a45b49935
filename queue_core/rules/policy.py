"""How the queue decides: retries, attempts, leases and the fair share, as pure functions.

Start reading here to learn the queue's rules. Nothing in this module reads a database, a clock
or a random source of its own: time comes in as ``now``, counts and settings as values, and
randomness as ``rng``, any object with ``random() -> float in [0, 1)`` (a ``random.Random``) that
the caller owns. The queue (``AcquiredTask.retry_or_fail``, ``release``), the store's claim (its
give-up pass and fair-share choice), the worker, pqflow's decider and perfectsched's occurrences
all call these functions; none of them decides on its own. ``docs/policy.md`` lists the rules.

1. **Backoff.** The wait after failure ``n`` is ``base * growth**(n - 1)``, at most ``cap``, then
   spread by ``±jitter``; never negative, never above ``MAX_DURATION``.
2. **Exhaustion.** A task that has had ``max_attempts`` attempts gets no more; without
   ``max_attempts``, one that has had ``MAX_ATTEMPTS`` (the attempts column's limit) gets no more.
3. **What spends an attempt.** A claim counts one. A run of the handler keeps it, and so does an
   expired lease (its holder may have run the handler before it died); a release (``release()``,
   and the unrun rest of a batch a stopping worker gives back) and a lease taken over before the
   handler started give it back. **A crash is charged only to the task whose handler was running
   when its process died** (:func:`crash_end`): the others its process held (leased behind it in
   its batch, or run before it with their successes not yet written) are given back uncharged by
   the process that replaces it; a workflow step and a plain task count crashes alike, in their
   attempts (:func:`crashes`, :func:`crash_refusal`).
4. **Lease expiry.** A lease is held while ``leased`` and ``now < timeout``; after that the row is
   waiting and due again (a lease ending later than ``now + MAX_LEASE``, which no claim or heartbeat
   writes, counts towards no user's cap), and the claim that takes it decides on it as on any due
   row: cancel it (cancel requested, holder gone), give up (attempts spent), or deliver it.
5. **Fair share.** What to claim next: higher priority first, then the user with the highest
   weight ``max_running / (running + 1)``, then the longest due, then submission order; a capped
   user holding ``max_running`` live leases gets nothing (:func:`free_slots`, as a queue's
   concurrency limit); a task with ``max_attempts`` is leased only first in its batch.
6. **Queues.** A claim reads the queues a worker serves in :func:`queue_order`: as listed, or
   weighted at random; the fair share applies inside each queue, a user's cap across all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from ..errors import PermanentError
from .validate import INT32_MAX, MAX_DURATION

#: the spread of a retry wait: ±20 % around the computed wait
JITTER = 0.2
#: acquisitions a workflow step gets on top of its retries when its worker dies (lease expiry):
#: a crash must not use up the retry budget, but a step that kills every worker must end
CRASH_ALLOWANCE = 5


class RandomSource(Protocol):
    def random(self) -> float: ...


# -- 1. backoff -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Backoff:
    """How long to wait before retry ``n``: ``base * growth**(n - 1)`` seconds, at most ``cap``
    (None: no cap), then multiplied by a factor drawn from ``[1 - jitter, 1 + jitter)``."""

    base: float
    cap: float | None = None
    jitter: float = JITTER
    growth: float = 2.0

    @classmethod
    def fixed(cls, wait: float) -> Backoff:
        """The same wait every time, no jitter (perfectsched's ``retry_wait``)."""
        return cls(wait, growth=1.0, jitter=0.0)


#: how a service waits while its database fails (a worker's poll or finish, the scheduler's tick,
#: the wake-up listener): 0.1 s after the first failure in a row, doubling, at most 10 s, no jitter
OUTAGE_BACKOFF = Backoff(0.1, cap=10.0, jitter=0.0)


def transaction_backoff(max_wait: float) -> Backoff:
    """How a transaction is run again after a transient database error (a deadlock, a lost
    connection): 0.05 s after the first, doubling, at most ``max_wait`` (``retry_max_wait``), each
    wait spread by ±50 % so that the clients that collided do not collide again."""
    return Backoff(0.05, cap=max_wait, jitter=0.5)


def unjittered_wait(policy: Backoff, n: int) -> float:
    """The wait after failure ``n`` (1: the first) before jitter: grown and capped (``math.inf``
    past what a float holds, e.g. after thousands of failures without a cap)."""
    if policy.base == 0:
        return 0.0
    try:
        wait = policy.base * policy.growth ** max(0, n - 1)
    except OverflowError:
        wait = math.inf
    return wait if policy.cap is None else min(wait, policy.cap)


def backoff(policy: Backoff, n: int, rng: RandomSource) -> float:
    """The wait after failure ``n`` (1: the first), jittered with one draw of ``rng`` (none when
    ``policy.jitter`` is 0). Never negative, never above ``MAX_DURATION`` (a due time stays storable)."""
    wait = unjittered_wait(policy, n)
    if policy.jitter:
        wait *= 1.0 - policy.jitter + 2 * policy.jitter * rng.random()
    return min(wait, MAX_DURATION)


#: a lease ending later than ``now + MAX_LEASE`` was written by no claim or heartbeat: ``alive_time``
#: is at most ``MAX_DURATION``, and the factor 2 leaves room for clocks that read a little apart
MAX_LEASE = 2 * MAX_DURATION


# -- 2. exhaustion ----------------------------------------------------------------------------
#: the most attempts a row can count (an INT column): a claim past it would overflow the column
MAX_ATTEMPTS = INT32_MAX


def exhausted(attempts: int, max_attempts: int | None) -> bool:
    """Whether a task that has had ``attempts`` attempts may have no more."""
    return attempts >= (MAX_ATTEMPTS if max_attempts is None else max_attempts)


@dataclass(frozen=True)
class Retry:
    """Run it again, due ``wait`` seconds from now."""

    wait: float


@dataclass(frozen=True)
class GiveUp:
    """Finish it as a failure: its attempts are spent."""


def is_permanent(error: BaseException | None) -> bool:
    """Whether ``error``, raised by a handler or a workflow step, says that its task can never
    succeed as it was submitted: a :class:`~queue_core.errors.PermanentError` (bad input: an
    invalid key or data, which no retry changes). Every other error may be transient."""
    return isinstance(error, PermanentError)


def after_error(
    attempt: int, max_attempts: int | None, policy: Backoff, rng: RandomSource, error: BaseException | None = None
) -> Retry | GiveUp:
    """What follows when attempt number ``attempt`` (1: the first) ended in ``error``: a retry
    while attempts are left, unless the error is permanent (:func:`is_permanent`)."""
    if is_permanent(error) or exhausted(attempt, max_attempts):
        return GiveUp()
    return Retry(backoff(policy, attempt, rng))


def requested_wait(wait: float | None, retry_wait: float) -> float:
    """The wait of a retry its handler asked for (``task.retry()``): the wait it named, else the
    configured ``retry_wait`` as it is (no growth, no jitter: the handler chose to retry, it did not fail)."""
    return retry_wait if wait is None else wait


def step_after_error(
    failures: int, retries: int, policy: Backoff, rng: RandomSource, error: BaseException | None = None
) -> Retry | GiveUp:
    """A workflow step whose function raised ``error`` for the ``failures``-th time (this one
    included): it runs at most ``retries + 1`` times, waits doubling from ``retry_wait``."""
    return after_error(failures, retries + 1, policy, rng, error)


def crashes(attempts: int, failures: int) -> int:
    """How often a workflow step's worker died running it: its acquisitions but this one, less
    the runs that ended in an error (releases, leases lost before the start and the leases a
    dead process held without running them are not counted in ``attempts``: see
    :func:`spends_attempt`, :func:`crash_end`)."""
    return attempts - 1 - failures


def crashed_too_often(attempts: int, failures: int) -> bool:
    """Whether a workflow step is failed instead of run: its worker died more than CRASH_ALLOWANCE times."""
    return crashes(attempts, failures) > CRASH_ALLOWANCE


def crash_refusal(attempts: int, failures: int) -> str | None:
    """The error a workflow step fails with instead of running once its worker died more than
    CRASH_ALLOWANCE times while running it; None: it may run."""
    if not crashed_too_often(attempts, failures):
        return None
    return f"its worker died {crashes(attempts, failures)} times while running it (lease expired)"


# -- 3. what spends an attempt ------------------------------------------------------------------
class LeaseEnd(StrEnum):
    """How a lease ended, as far as the attempt its claim counted is concerned."""

    #: the handler ran (whatever it then did: finish, fail, retry, cancelled while running)
    RAN = "ran"
    #: the holder stopped heartbeating (it died, or was stopped at once): it may have run
    EXPIRED = "expired"
    #: given back unrun: ``task.release()``, and the rest of a batch a stopping worker releases
    RELEASED = "released"
    #: taken over by another worker while it waited its turn in its batch: never ran here
    LOST_BEFORE_START = "lost before start"
    #: its process died while another task's handler ran, or between two handlers: it waited its
    #: turn in its batch, or its handler had succeeded and the success was lost before it was
    #: written; it did not bring the process down (given back by the process that replaces it)
    ORPHANED = "orphaned"


#: the ends that keep the attempt the claim counted; the others give it back
SPENDS_ATTEMPT = frozenset({LeaseEnd.RAN, LeaseEnd.EXPIRED})


def spends_attempt(end: LeaseEnd) -> bool:
    """Whether a lease that ended so keeps the attempt its claim counted."""
    return end in SPENDS_ATTEMPT


def crash_end(running: bool) -> LeaseEnd:
    """How the lease of a task ends when the process holding it died: charged as a crash
    (EXPIRED: its lease is left to expire, its attempt kept) when its handler was ``running``
    then, else given back uncharged (ORPHANED). Code run for a whole batch (a handler class's
    ``prefetch``) counts as running every task of the batch."""
    return LeaseEnd.EXPIRED if running else LeaseEnd.ORPHANED


def attempts_after(end: LeaseEnd, attempts: int) -> int:
    """The attempt count after a lease ended so (``attempts`` counts its claim)."""
    return attempts if spends_attempt(end) else max(0, attempts - 1)


# -- 4. lease expiry --------------------------------------------------------------------------
def lease_held(leased: bool, timeout: float, now: float) -> bool:
    """Whether a live row is running at ``now``: leased and its lease not yet expired. A row
    whose lease expired is waiting, and due: its holder is taken for dead."""
    return bool(leased) and timeout > now


def counts_towards_cap(leased: bool, timeout: float, now: float) -> bool:
    """Whether a row's lease takes one of its user's ``max_running`` slots: a held lease that
    ends no later than any claim or heartbeat writes (``now + MAX_LEASE``); a longer one was
    edited by hand and must not hold the user's other tasks back for ever."""
    return lease_held(leased, timeout, now) and timeout <= now + MAX_LEASE


class OnClaim(StrEnum):
    """What the claim does with a due row it picked."""

    #: lease it to the claiming worker (its attempts + 1)
    DELIVER = "deliver"
    #: cancel requested while no handler held it (its holder died): finished as cancelled, not run
    CANCEL = "cancel"
    #: its attempts are spent (leases that expired, or a retry at the last attempt): finished as failure
    GIVE_UP = "give up"


def cancels_unrun(cancel_requested: bool, owned: bool) -> bool:
    """Whether a task that has not started is finished as cancelled instead of run: its cancel was
    requested and no workflow decider owns it (``owned``: a workflow run's row, which its decider
    settles, a cancelled one too). Asked by the claim and by a worker before each handler starts."""
    return cancel_requested and not owned


def ends_cancelled(cancel_requested: bool) -> bool:
    """Whether a run the handler left unfinished ends as cancelled, whatever it raised: its cancel
    was requested while it ran (a cancel is never retried)."""
    return cancel_requested


def on_claim(*, attempts: int, max_attempts: int | None, cancel_requested: bool, owned: bool) -> OnClaim:
    """The claim's decision on a due row (``owned``: see :func:`cancels_unrun`)."""
    if cancels_unrun(cancel_requested, owned):
        return OnClaim.CANCEL
    if exhausted(attempts, max_attempts):
        return OnClaim.GIVE_UP
    return OnClaim.DELIVER


def give_up_error(error: str | None, attempts: int) -> str:
    """The error a row the claim gave up on finishes with: its last error, else the lease expiry."""
    return (error or "lease expired") + f" (gave up after {attempts} attempts)"


# -- 5. fair share ----------------------------------------------------------------------------
# Rows are mappings with the task's ``id``, ``priority``, ``timeout`` (due time), ``resource``
# (the user, or None), ``max_running`` and ``max_attempts``; ``running`` maps each user to the
# live leases it holds.
def fair_weight(row: Mapping, running: Mapping[str, int]) -> float:
    """A row's share weight: ``max_running / (running + 1)`` of its user (no cap counts as 1);
    a row without a user weighs 1 (its ``max_running``, meaningless without a user, is ignored, as
    the claim's walk of userless rows ignores it) and is never capped."""
    if row["resource"] is None:
        return 1.0
    return (row["max_running"] or 1) / (running.get(row["resource"], 0) + 1)


def free_slots(cap: int, running: int) -> int:
    """How many more leases a group capped at ``cap`` may take while it holds ``running``: a
    user's ``max_running``, a queue's concurrency limit."""
    return max(0, cap - running)


#: the most seconds within which a worker's processor starts the handler of a rate-limited task
#: it leased: the start is counted at the end of them, and a task not started by then is given back
RATE_START_GRACE = 0.25
#: the start grace is at most this share of the limit's window (but :data:`RATE_GRACE_FLOOR`): in
#: saturation a queue gets its N starts per window + grace, so the grace costs at most this share
RATE_GRACE_SHARE = 0.05
#: the start grace is never shorter than this (seconds), whatever the window: the time from a
#: claim's stamp to its processor's decision (the claim's COMMIT, the batch's set-up) must fit in
#: its first :data:`START_DECISION_SHARE`. A window shorter than 20 of these pays more than
#: :data:`RATE_GRACE_SHARE` of its rate in saturation (``10/0.1s``: N starts per 0.15 s)
RATE_GRACE_FLOOR = 0.05
#: a grace promised longer than :data:`RATE_START_GRACE` (its holder measured that its batch's
#: pre-handler work, the prefetch, takes longer) is at most this share of the window instead
PREFETCH_GRACE_SHARE = 0.25
#: a processor's promised grace covers this many times the last prefetch it measured, after its
#: decision share (the prefetch of its batch runs between the claim and the decision)
PREFETCH_GRACE_FACTOR = 2.0


def start_grace(prefetch_time: float) -> float:
    """The seconds a processor promises to start a rate-limited task's handler within, having
    measured its last batch's prefetch at ``prefetch_time`` seconds: :data:`RATE_START_GRACE`, or
    more if needed for its decision share to hold :data:`PREFETCH_GRACE_FACTOR` such prefetches."""
    return max(RATE_START_GRACE, PREFETCH_GRACE_FACTOR * prefetch_time / START_DECISION_SHARE)


def start_by(started_at: float, within: float, window: float) -> float:
    """When the handler of a rate-limited task (of a limit's ``window``) leased at ``started_at``
    starts at the latest, its holder having promised to start it within ``within`` seconds (at most
    :data:`RATE_GRACE_SHARE` of the window, :data:`PREFETCH_GRACE_SHARE` for a promise longer than
    :data:`RATE_START_GRACE`, at least :data:`RATE_GRACE_FLOOR` if it promised as much): the time
    its start is counted at. A claim admits a start while fewer than the limit's N counted starts
    are later than its time minus the window, so any window holds at most N handler starts (each
    starts after its own claim, and no later than its counted time)."""
    share = RATE_GRACE_SHARE if within <= RATE_START_GRACE else PREFETCH_GRACE_SHARE
    return started_at + min(within, max(window * share, RATE_GRACE_FLOOR))


#: a processor decides to start a rate-limited task only in this first share of the time between
#: its claim and the time its start was counted at; the rest is the margin for what runs between
#: that decision and the handler's first line (a loaded machine's scheduling delays included)
START_DECISION_SHARE = 0.5


def too_late_to_start(claimed: float | None, deadline: float | None, now: float) -> bool:
    """Whether a task leased at ``claimed`` whose start was counted at ``deadline`` (None: no rate
    limit) may no longer start at ``now``: it is given back unrun instead (its counted start deleted).
    The decision comes :data:`START_DECISION_SHARE` of the grace early, so that the handler itself
    still starts by the deadline."""
    if deadline is None:
        return False
    decide_by = deadline if claimed is None else claimed + (deadline - claimed) * START_DECISION_SHARE
    return now > decide_by


def rate_limited_room(want: int, ahead: int) -> int:
    """How many of a rate-limited queue's tasks a claim may lease, wanting ``want`` with ``ahead``
    tasks leased before them in its batch: one, and only as the batch's first. A processor runs
    a batch's tasks one after the other; a limited task leased behind another would start when
    that one is done, long after the start it was counted as (its claim's time), next to the
    start of the next one: prefetch would bunch the starts the limit spaces out."""
    return min(want, 1) if ahead == 0 else 0


def may_claim(row: Mapping, running: Mapping[str, int]) -> bool:
    """Whether a row's user has a free slot (rows without a user or a cap always do)."""
    if row["resource"] is None or row["max_running"] is None:
        return True
    return free_slots(row["max_running"], running.get(row["resource"], 0)) > 0


def choose_fair(candidates: Sequence[Mapping], running: Mapping[str, int], n: int) -> list:
    """Up to ``n`` of ``candidates``, one at a time by (priority, fair weight, due time, id),
    each counted as running for its user before the next is chosen; never past a user's cap."""
    running = dict(running)
    pool = list(candidates)
    chosen: list = []
    while pool and len(chosen) < n:
        eligible = [r for r in pool if may_claim(r, running)]
        if not eligible:
            break
        best = min(eligible, key=lambda r: (-r["priority"], -fair_weight(r, running), r["timeout"], r["id"]))
        chosen.append(best)
        pool.remove(best)
        if best["resource"] is not None:
            running[best["resource"]] = running.get(best["resource"], 0) + 1
    return chosen


def limited_first(rows: Sequence[Mapping], behind: bool = False) -> list:
    """A batch cut before its first row with ``max_attempts`` that is not the first (``behind``:
    ``rows`` follow others in the batch, so none of them is the first).

    Each lease counts an attempt. A task leased behind others could lose an attempt without
    running if an earlier handler of its batch brought the process down; a task whose attempts
    are limited is therefore only ever leased alone or first in its batch.
    """
    for i, r in enumerate(rows):
        if (i or behind) and r["max_attempts"] is not None:
            return list(rows[:i])
    return list(rows)


def write_success_at_once(max_attempts: int | None) -> bool:
    """Whether a task's success must be written before the next handler of its batch starts
    (which could bring the process down first and turn it into "gave up after N attempts")."""
    return max_attempts is not None


# -- 6. which queue first ---------------------------------------------------------------------
def queue_order(names: Sequence[str], weights: Sequence[int] | None, rng: RandomSource) -> list[str]:
    """The order in which a claim reads the queues a worker serves: as given (strict priority:
    a queue's tasks before the next queue's), or, with ``weights``, a weighted random order drawn
    anew for each claim (a queue comes first in a share of the claims proportional to its weight;
    the others follow in weighted order, so a queue with nothing due never blocks the next)."""
    if weights is None:
        return list(names)
    pool = list(zip(names, weights, strict=True))
    order: list[str] = []
    while pool:
        point = rng.random() * sum(w for _, w in pool)
        i = 0
        while i < len(pool) - 1 and point >= pool[i][1]:
            point -= pool[i][1]
            i += 1
        order.append(pool.pop(i)[0])
    return order


def retention(outcome: str, retention_time: float, failure_retention: float | None) -> float:
    """How long a task that finished with ``outcome`` is kept (and its key taken): a failure for
    ``failure_retention`` when it is set (failures still there in the morning), anything else,
    and a failure without it, for ``retention_time``."""
    return failure_retention if outcome == "failure" and failure_retention is not None else retention_time
