"""The worker registry as the queue API shows it (queue layer): each claiming process registers
itself (host, pid, queues, types, pq version, when it started), renews its row while it runs and
removes it when it stops; ``Queue.workers()`` lists those seen within ``registry_timeout``, each
with the tasks it holds now (``store/workers.py``)."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from .errors import TaskError
from .store.workers import WorkerIdentity

log = logging.getLogger("queue_core.worker")


@dataclass(frozen=True)
class WorkerInfo:
    """A registered worker process."""

    #: what it writes as the owner of the tasks it leases (host:pid)
    owner: str
    host: str
    pid: int
    #: the queues it serves, best first
    queues: tuple[str, ...]
    #: the task types it serves (None: any)
    types: tuple[str, ...] | None
    version: str
    started_at: float
    last_seen: float
    #: how many tasks it holds a lease on now
    held: int

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


def worker_info(row: dict) -> WorkerInfo:
    types = json.loads(row["types"]) if row["types"] else None
    return WorkerInfo(
        owner=row["owner"],
        host=row["host"],
        pid=row["pid"],
        queues=tuple(json.loads(row["queues"])),
        types=tuple(types) if types is not None else None,
        version=row["version"],
        started_at=row["started_at"],
        last_seen=row["last_seen"],
        held=row["held"],
    )


def pq_version() -> str:
    try:
        return metadata.version("pq")[:32]
    except metadata.PackageNotFoundError:
        return "unknown"


class Registration:
    """The registry row of one queue's claiming process, shared by its processors (thread mode:
    several): written when the first joins, renewed at most every ``registry_interval`` seconds
    by any of them, removed when the last leaves. A database error is logged once, never raised:
    the registry must not stop a worker."""

    def __init__(self, queue: Any, queues: list[str], types: list[str] | None):
        self.queue = queue
        self.interval = queue.config["registry_interval"]
        self.worker = WorkerIdentity(
            owner=queue.owner[:255],
            host=socket.gethostname()[:255],
            pid=os.getpid(),
            queues=json.dumps(queues),
            types=json.dumps(sorted(types)) if types is not None else None,
            version=pq_version(),
        )
        self.started_at = 0.0
        self._members = 0
        self._next = 0.0
        self._lock = threading.Lock()
        self._failed: str | None = None

    def join(self) -> None:
        with self._lock:
            self._members += 1
            if self._members == 1:
                self._write("register", self._register)

    def renew(self) -> None:
        """Renew the row if its interval has passed (called often: by every processor's monitor)."""
        try:
            now = self.queue.now()
        except TaskError:  # a server clock never read yet: the next call tries again
            return
        with self._lock:
            if not self._members or now < self._next:
                return
            self._next = now + self.interval
        self._write("renew", lambda: self.queue.store.renew_worker(self.worker, self.started_at, now))

    def leave(self) -> None:
        with self._lock:
            self._members -= 1
            if self._members == 0:
                self._write("unregister", lambda: self.queue.store.remove_worker(self.worker.owner))

    def _register(self) -> None:
        now = self.queue.now()
        self.queue.store.register_worker(self.worker, now)
        self.started_at, self._next = now, now + self.interval

    def _write(self, what: str, write) -> None:
        try:
            write()
        except TaskError as exc:
            if str(exc) != self._failed:
                log.warning("worker registry: %s failed (logged once): %s", what, exc)
            self._failed = str(exc)
            return
        if self._failed is not None:
            log.info("worker registry works again")
            self._failed = None


def registration_of(queue: Any, queues: list[str], types: list[str] | None) -> Registration:
    """The registration of the process behind ``queue``: one per queue object."""
    found = queue.__dict__.get("_registration")
    if found is None:
        found = queue.__dict__["_registration"] = Registration(queue, queues, types)
    return found
