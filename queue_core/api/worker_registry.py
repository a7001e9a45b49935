"""The worker registry as the queue API shows it (queue layer): each claiming process registers
itself (host, pid, queues, types, pq version, when it started), renews its row while it runs and
removes it when it stops; ``Queue.workers()`` lists those seen within ``registry_timeout``, each
with the tasks it holds now (``store/workers.py``)."""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import threading
import weakref
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from ..errors import TaskError
from ..store.protocol import WorkerIdentity

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
    #: the keys of those tasks, in key order (at most ``store.workers.MAX_HELD_KEYS``)
    held_keys: tuple[str, ...] = ()

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
        held_keys=tuple(row.get("held_keys", ())),
    )


@functools.cache  # a lookup among the installed distributions: tens of ms, once per process
def pq_version() -> str:
    """The version of pq this process runs (as installed)."""
    try:
        return metadata.version("pq")[:32]
    except metadata.PackageNotFoundError:
        return "unknown"


class Registration:
    """The registry row of one queue's claiming process, shared by its processors (thread mode:
    several): written when the first joins, renewed every ``registry_interval`` seconds by a
    thread of its own while any is running, removed when the last leaves. Never on a thread that
    heartbeats leases: a registry write that waits (its row locked by someone else, a slow
    database) must not let a running task's lease expire. A database error is logged once, never
    raised: the registry must not stop a worker."""

    def __init__(self, queue: Any, queues: list[str], types: list[str] | None):
        # weak: the queue keeps its registration (queue.__dict__), and a cycle would leave a queue
        # nobody closed to the cyclic collector, whose order of finalizing leaves pooled
        # connections unclosed
        self._queue = weakref.ref(queue)
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
        self._lock = threading.Lock()
        self._failed: str | None = None
        self._halt = threading.Event()
        self._renewer: threading.Thread | None = None

    def join(self) -> None:
        with self._lock:
            self._members += 1
            if self._members > 1:
                return
            self._halt = threading.Event()
            self._renewer = threading.Thread(target=self._run, args=(self._halt,), name="pq-registry", daemon=True)
            self._renewer.start()

    def leave(self) -> None:
        with self._lock:
            self._members -= 1
            if self._members > 0:
                return
            self._halt.set()
            renewer = self._renewer
        if renewer is not None:
            renewer.join(self.interval + 5)
        self._write("unregister", lambda: self.queue.store.worker_remove(self.worker.owner))

    def _run(self, halt: threading.Event) -> None:
        self._write("register", self._register)
        while not halt.wait(self.interval):
            self._write("renew", self._renew)

    @property
    def queue(self) -> Any:
        queue = self._queue()
        if queue is None:
            raise TaskError("the queue of this worker was closed")
        return queue

    def _register(self) -> None:
        now = self.queue.now()
        self.queue.store.worker_register(self.worker, now)
        self.started_at = now

    def _renew(self) -> None:
        self.queue.store.worker_renew(self.worker, self.started_at or self.queue.now(), self.queue.now())

    def _write(self, what: str, write) -> None:
        try:
            write()
        except TaskError as exc:
            if str(exc) != self._failed:
                log.warning("worker registry: %s failed (logged once): %s", what, exc)
            self._failed = str(exc)
            return
        except Exception:  # noqa: BLE001 - the registry must never stop a worker
            log.exception("worker registry: %s crashed", what)
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
