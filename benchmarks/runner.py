"""The plan of one invocation and the results document it produces.

For each run: for each database, every selected pq scenario (the raw limit first), then the
peers of that database; then the reference peers. So every ratio compares measurements taken
minutes apart, never hours. Anything that fails is recorded as ``failed: <reason>`` and the
benchmark goes on.
"""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from . import env, procs
from . import scenarios as scen_mod
from .peers import registry as peers_mod
from .peers.base import Peer
from .scenarios.base import Context, Sample, Scenario
from .sizes import Sizes
from .stats import summary
from .tables import dispose_engines


@dataclass
class Options:
    dbs: list[str]
    sizes: Sizes
    quick: bool
    scenarios: list[str] | None = None
    peers: list[str] | None = None  # None: all; []: none
    keep_workdir: bool = False


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"failed: {type(exc).__name__}: {text[0] if text else ''}"[:400]


class Results:
    """Samples per database, section and metric (one slot per run), checks, details, errors;
    and per peer."""

    def __init__(self, runs: int):
        self.runs = runs
        self.pq: dict[str, dict[str, dict]] = {}
        self.peers: dict[str, dict] = {}

    def section(self, db: str, section: str) -> dict:
        return self.pq.setdefault(db, {}).setdefault(
            section,
            {"title": scen_mod.TITLES.get(section, section), "metrics": {}, "checks": {}, "details": {}, "errors": []},
        )

    def add(self, db: str, run: int, sample: Sample) -> None:
        for section, metrics in sample.metrics.items():
            sec = self.section(db, section)
            for key, (value, label, unit, zero_ok) in metrics.items():
                m = sec["metrics"].setdefault(
                    key, {"label": label, "unit": unit, "zero_ok": zero_ok, "samples": [None] * self.runs}
                )
                m["samples"][run] = value
        for section, checks in sample.checks.items():
            sec = self.section(db, section)
            for key, count in checks.items():
                sec["checks"][key] = sec["checks"].get(key, 0) + count
        for section, details in sample.details.items():
            self.section(db, section)["details"].update(details)

    def error(self, db: str, sections: list[str], run: int | None, message: str) -> None:
        where = "setup" if run is None else f"run {run + 1}"
        for s in sections:
            self.section(db, s)["errors"].append(f"{where}: {message}")

    def peer(self, p: Peer, status: str, settings: dict) -> dict:
        self.peers[p.name] = entry = {
            "label": p.label,
            "db": p.db,
            "section": p.section,
            "pq_metric": p.pq_metric,
            "pq_label": p.pq_label,
            "versus": p.versus,
            "status": status,
            "settings": settings,
            "errors": [],
            "result": None if status != "ok" else {"unit": p.unit, "metric": p.metric, "samples": [None] * self.runs},
        }
        return entry

    def finish(self) -> None:
        """Add median/min/max to every figure; settle each peer's status."""
        empty = {"median": None, "min": None, "max": None, "n": 0}
        for sections in self.pq.values():
            for sec in sections.values():
                for m in sec["metrics"].values():
                    m.update(summary(m["samples"]) or empty)
        for p in self.peers.values():
            if p["result"] is None:
                continue
            p["result"].update(summary(p["result"]["samples"]) or empty)
            if p["errors"]:
                first = p["errors"][0].split(": ", 1)[1]
                p["status"] = (
                    first if p["result"]["n"] == 0 else f"ok in {p['result']['n']} of {self.runs} runs; {first}"
                )


class Invocation:
    """One ``python -m benchmarks``: prepare, measure run by run, clean up, describe."""

    def __init__(self, opts: Options):
        self.opts = opts
        self.results = Results(opts.sizes.runs)
        self.classes = scen_mod.select(opts.scenarios)
        self.workdir = Path(tempfile.mkdtemp(prefix="pq-bench-"))
        self.redis = env.RedisServer(self.workdir)
        self.urls: dict[str, str] = {}
        self.contexts: dict[str, Context] = {}
        self.reference: Context | None = None
        self.scenarios: dict[str, list[Scenario]] = {}
        self.ready: dict[tuple[str, str], bool] = {}
        self.peers: list[Peer] = []

    def run(self) -> dict:
        started = dt.datetime.now(dt.UTC)
        t0 = time.monotonic()
        machine = env.machine()
        try:
            self._prepare()
            for r in range(self.opts.sizes.runs):
                env.log(f"run {r + 1}/{self.opts.sizes.runs}")
                self._measure(r)
        finally:
            self._clean_up()
        self.results.finish()
        machine["redis"] = self.redis.version
        machine["databases"] = {db: env.server_version(db, self.urls.get(db)) for db in self.contexts}
        return {
            "format": 1,
            "started": started.isoformat(timespec="seconds"),
            "seconds": round(time.monotonic() - t0, 1),
            "mode": "quick" if self.opts.quick else "full",
            "runs": self.opts.sizes.runs,
            "sizes": self.opts.sizes.__dict__,
            "databases": list(self.opts.dbs),
            "machine": machine,
            "pq": self.results.pq,
            "peers": self.results.peers,
        }

    # -- preparation ----------------------------------------------------------------------
    def _prepare(self) -> None:
        opts = self.opts
        chosen = {c.name for c in self.classes}
        peers = [
            p
            for p in peers_mod.select(opts.peers, opts.sizes)
            if (p.db is None or p.db in opts.dbs) and p.section in chosen
        ]
        self.urls = env.server_urls(opts.dbs)
        extra: dict = {"server_urls": self.urls}
        if any(p.needs_redis and p.missing_modules() is None for p in peers):
            extra["redis_url"], extra["redis_error"] = self.redis.start(), self.redis.error
        for db in opts.dbs:
            if db != "sqlite" and db not in self.urls:
                self.results.error(db, list(scen_mod.SECTIONS), None, "failed: database not available")
                continue
            self.contexts[db] = Context(db, self.urls.get(db), opts.sizes, self.workdir / db, extra=extra)
            self.scenarios[db] = [cls() for cls in self.classes]
        self.reference = Context("reference", None, opts.sizes, self.workdir / "reference", extra=extra)
        for p in peers:
            ctx = self._context_of(p)
            reason = "skipped: its database is not part of this run" if ctx is None else p.skip_reason(ctx)
            self.results.peer(p, reason or "ok", p.settings(ctx or self.reference))
            if reason:
                env.log(f"peer {p.name}: {reason}")
            else:
                self.peers.append(p)

    def _context_of(self, p: Peer) -> Context | None:
        return self.contexts.get(p.db) if p.db else self.reference

    # -- measuring --------------------------------------------------------------------------
    def _measure(self, r: int) -> None:
        for db, ctx in self.contexts.items():
            ctx.run, ctx.shared = r, {}
            for sc in self.scenarios[db]:
                self._scenario(sc, ctx, r)
            for p in self.peers:
                if p.db == db:
                    self._peer(p, ctx, r)
        self.reference.run = r
        for p in self.peers:
            if p.db is None:
                self._peer(p, self.reference, r)

    def _scenario(self, sc: Scenario, ctx: Context, r: int) -> None:
        sections = [sc.name, *sc.also]
        key = (ctx.db, sc.name)
        if key not in self.ready:
            self.ready[key] = self._attempt(
                ctx, sc.name, sc.setup, lambda msg: self.results.error(ctx.db, sections, None, msg)
            )
        if not self.ready[key]:
            return
        ctx.log(f"{sc.name} (run {r + 1})")
        sample = Sample()
        self._attempt(
            ctx, sc.name, lambda c: sc.run(c, sample), lambda msg: self.results.error(ctx.db, sections, r, msg)
        )
        self.results.add(ctx.db, r, sample)

    def _peer(self, p: Peer, ctx: Context, r: int) -> None:
        entry = self.results.peers[p.name]
        if r == 0 and not self._attempt(
            ctx, f"peer {p.name}", p.setup, lambda msg: entry["errors"].append(f"setup: {msg}")
        ):
            return
        if entry["errors"][:1] and entry["errors"][0].startswith("setup"):
            return
        ctx.log(f"peer {p.name} (run {r + 1})")

        def measure(c: Context) -> None:
            entry["result"]["samples"][r] = p.run(c)

        self._attempt(ctx, f"peer {p.name}", measure, lambda msg: entry["errors"].append(f"run {r + 1}: {msg}"))

    @staticmethod
    def _attempt(ctx: Context, what: str, fn, on_error) -> bool:
        """``fn(ctx)``; a failure is logged and passed to ``on_error`` as one line. Whatever
        the outcome, no process it started survives it."""
        try:
            fn(ctx)
            return True
        except Exception as exc:  # noqa: BLE001 - recorded; the benchmark goes on
            ctx.log(f"{what}: {one_line(exc)}")
            if not isinstance(exc, procs.BenchError):
                env.log("".join(traceback.format_exception(exc)).rstrip())
            on_error(one_line(exc))
            return False
        finally:
            procs.stop_all()

    # -- the end ------------------------------------------------------------------------------
    def _clean_up(self) -> None:
        for db, ctx in self.contexts.items():
            for sc in self.scenarios[db]:
                if self.ready.get((db, sc.name)):
                    _quietly(lambda sc=sc, ctx=ctx: sc.teardown(ctx))
            _quietly(ctx.cleanup)
        for p in self.peers:
            _quietly(lambda p=p: p.teardown(self._context_of(p)))
        procs.stop_all()
        self.redis.stop()
        dispose_engines()
        if self.opts.keep_workdir:
            env.log(f"work files kept in {self.workdir}")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)


def run(opts: Options) -> dict:
    """Run the plan; return the results document (not yet written anywhere)."""
    return Invocation(opts).run()


def _quietly(fn) -> None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - clean-up must not hide the results
        env.log(f"clean-up: {one_line(exc)}")
