"""A sampler of live leases, run in the scenario process while workers work.

Every ``interval`` it reads the leased live rows and records:

* **cut leases**: leases whose owner (``host:pid``, written by the claim) is a process of this
  host that no longer runs. Such a lease can only end by expiring, and its task then runs
  again; the checks allow one re-execution per cut lease of the same key, no more. The owner
  is found dead *after* the rows were read, so a lease is only a suspect at first (its owner may
  have finished it and exited in between); it is a cut lease when the next sample, read after
  the death was seen, still shows the same lease. A cut lease stays visible for at least
  ``alive_time - task_heartbeat_interval`` seconds, several sampling intervals, so none is
  missed.
* **per-user live leases** (``timeout > now``), to check ``max_running`` caps.

Database errors (the server may be down on purpose) are counted and sampling goes on.

:class:`ScheduleLeaseWatch` samples the live leases of a perfectsched schedule table: how long
each lease of an occurrence was held.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass

import sqlalchemy as sa

from .procs import alive, local_pid


@dataclass(frozen=True)
class CutLease:
    key: str
    token: int
    pid: int
    seen: float


class LeaseWatch(threading.Thread):
    def __init__(self, url: str, t: sa.Table, interval: float = 0.25):
        """``t``: the queue's table object (its column types decode keys on every database)."""
        super().__init__(name=f"lease-watch-{t.name}", daemon=True)
        self.interval = interval
        self.engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
        self.stmt = sa.select(t.c.key, t.c.lease_token, t.c.owner, t.c.resource, t.c.max_running, t.c.timeout).where(
            t.c.state == 0, t.c.leased == 1
        )
        self.cut: dict[tuple[str, int], CutLease] = {}
        self._suspects: dict[tuple[str, int], float] = {}  # lease -> when its owner was seen dead
        self.max_per_user: Counter = Counter()
        self.cap_violations: list[str] = []
        self.samples = 0
        self.errors = 0
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.interval)

    def stop(self) -> None:
        if self.is_alive():
            self._halt.set()
            self.join()
        self.sample()
        self.engine.dispose()

    def settle(self) -> None:
        """Two samples now: every lease whose owner is already dead gets confirmed."""
        self.sample()
        time.sleep(self.interval)
        self.sample()

    def sample(self) -> None:
        read_at = time.monotonic()
        try:
            with self.engine.connect() as conn:
                rows = conn.execute(self.stmt).all()
        except sa.exc.SQLAlchemyError:
            self.errors += 1
            return
        now = time.time()
        per_user: Counter = Counter()
        caps: dict[str, int] = {}
        with self._lock:
            self.samples += 1
            for key, token, owner, user, cap, timeout in rows:
                pid = local_pid(owner)
                lease = (key, token)
                if pid is not None and lease not in self.cut and not alive(pid):
                    if read_at > self._suspects.get(lease, read_at):  # still leased after the death was seen
                        self.cut[lease] = CutLease(key, token, pid, now)
                    else:
                        self._suspects.setdefault(lease, time.monotonic())
                if user is not None and timeout > now:
                    per_user[user] += 1
                    if cap is not None:
                        caps[user] = cap
            for user, n in per_user.items():
                self.max_per_user[user] = max(self.max_per_user[user], n)
                if user in caps and n > caps[user]:
                    self.cap_violations.append(f"user {user} held {n} live leases, max_running {caps[user]}")

    def cut_per_key(self) -> Counter:
        with self._lock:
            return Counter(c.key for c in self.cut.values())

    def cut_pairs(self) -> set[tuple[str, int]]:
        """``(key, pid)`` of every cut lease."""
        with self._lock:
            return {(c.key, c.pid) for c in self.cut.values()}

    def cut_by_pid(self) -> dict[int, list[CutLease]]:
        out: dict[int, list[CutLease]] = {}
        with self._lock:
            for c in self.cut.values():
                out.setdefault(c.pid, []).append(c)
        return out


class ScheduleLeaseWatch(threading.Thread):
    """A sampler of a perfectsched schedule table's live leases: how long each lease of an
    occurrence, ``(schedule key, occurrence)``, was seen held. A ``perfectsched run`` loop holds
    an occurrence while its handler runs; a lease nobody holds (a poll whose acknowledgement was
    lost, leasing again under a new token) stays until it expires: a whole ``alive_time``."""

    def __init__(self, sched, interval: float = 0.25):
        super().__init__(name=f"schedule-lease-watch-{sched.table}", daemon=True)
        self.sched, self.interval = sched, interval
        self.seen: dict[tuple[str, int], list[float]] = {}  # lease -> [first, last] seen
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            now = time.time()
            try:
                held = [(m.key, m.next_time) for m in self.sched.list() if m.leased and m.timeout > now]
            except Exception:  # noqa: BLE001 - a sample lost is no finding
                held = []
            for lease in held:
                self.seen.setdefault(lease, [now, now])[1] = now
            self._halt.wait(self.interval)

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def longest(self) -> tuple[float, tuple[str, int] | None]:
        """The longest time a lease was seen held, and which."""
        spans = [(last - first, lease) for lease, (first, last) in self.seen.items()]
        return max(spans, default=(0.0, None))
