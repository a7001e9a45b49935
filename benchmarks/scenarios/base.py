"""What every scenario and peer shares: the context of a database, one run's sample."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import queue_core

from ..env import log
from ..sizes import Sizes
from ..tables import TableNames


@dataclass
class Context:
    """One database during one invocation.

    ``url(name)``: the database URL for a scenario (SQLite: one file per name, so scenarios
    never share a write lock; servers: the one test database). ``table(what)``: a fresh
    ``bench_<pid>_<what>`` name, dropped at the end. ``shared``: figures of the current run
    that a later scenario of the same run uses (the drain rate, for the workflow overhead).
    """

    db: str
    server_url: str | None
    sizes: Sizes
    workdir: Path
    run: int = 0
    shared: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # settings of the run (e.g. Redis URL)

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.names = TableNames(self.server_url) if self.server_url else None

    def url(self, name: str) -> str:
        if self.server_url:
            return self.server_url
        return f"sqlite:///{self.workdir / name}.db"

    def table(self, what: str) -> str:
        if self.names is not None:
            return self.names(what)
        return f"bench_{what}"

    def queue(self, name: str, table: str, *, fresh: bool = True, **config: Any) -> queue_core.Queue:
        """A pq queue on ``url(name)``/``table``, emptied (re-created) when ``fresh``."""
        q = queue_core.open(self.url(name), table, **config)
        q.init(force=fresh)
        return q

    def file(self, name: str) -> Path:
        """A path in this database's work directory."""
        return self.workdir / name

    def log(self, msg: str) -> None:
        log(f"{self.db}: {msg}")

    def cleanup(self) -> None:
        if self.names is not None:
            self.names.drop_all()


class Sample:
    """What one run of a scenario measured.

    ``metric``: a figure, positive unless ``zero_ok`` (a share that pq may legitimately give
    as 0); ``check``: a count that must be 0 (duplicates, lost tasks ...); ``detail``:
    anything else worth keeping (the last run's value is stored).
    """

    def __init__(self) -> None:
        self.metrics: dict[str, dict[str, tuple[float, str, str, bool]]] = {}
        self.checks: dict[str, dict[str, int]] = {}
        self.details: dict[str, dict[str, Any]] = {}

    def metric(self, section: str, key: str, value: float, label: str, unit: str, *, zero_ok: bool = False) -> None:
        self.metrics.setdefault(section, {})[key] = (float(value), label, unit, zero_ok)

    def check(self, section: str, key: str, count: int) -> None:
        self.checks.setdefault(section, {})[key] = int(count)

    def detail(self, section: str, key: str, value: Any) -> None:
        self.details.setdefault(section, {})[key] = value


class Scenario:
    """A pq scenario. One instance per database; ``setup`` once, ``run`` once per run."""

    #: the name used by --scenarios and the results section it fills
    name = ""
    title = ""
    #: further result sections this scenario fills, with their titles (drain also measures memory)
    also: dict[str, str] = {}

    def setup(self, ctx: Context) -> None:
        """Preparation shared by all runs (e.g. bulk loading)."""

    def run(self, ctx: Context, out: Sample) -> None:
        raise NotImplementedError

    def teardown(self, ctx: Context) -> None:
        """Undo ``setup`` beyond the tables (which the context drops)."""


def fill(q, n: int, type: str = "noop", *, prefix: str = "t", batch: int = 1000, **opts) -> None:
    """Queue ``n`` tasks keyed ``<prefix><i>`` (not timed) with submit_many."""
    for start in range(0, n, batch):
        q.submit_many({"key": f"{prefix}{i}", "type": type, **opts} for i in range(start, min(n, start + batch)))
