"""Ratios and the targets of issues 5 and 11, computed from a results document.

Ratios are taken run by run (``a[i] / b[i]``: both measured in run i of the same invocation,
minutes apart) and then summarised, never as a ratio of medians.
"""

from __future__ import annotations

import functools

from queue_core.config import DEFAULTS

from .stats import ratio_samples, summary

RAW_COMMIT = "raw commit rate (the higher of INSERT and UPDATE + commit)"


def samples(doc: dict, db: str, section: str, key: str) -> list | None:
    m = doc["pq"].get(db, {}).get(section, {}).get("metrics", {}).get(key)
    return m["samples"] if m else None


def median(doc: dict, db: str, section: str, key: str) -> float | None:
    m = doc["pq"].get(db, {}).get(section, {}).get("metrics", {}).get(key)
    return m.get("median") if m else None


def raw_commit(doc: dict, db: str) -> list | None:
    ins, upd = samples(doc, db, "raw", "insert_per_s"), samples(doc, db, "raw", "update_per_s")
    if not ins or not upd:
        return None
    return [max(a, b) if a is not None and b is not None else None for a, b in zip(ins, upd, strict=False)]


def ratios(doc: dict) -> list[dict]:
    """pq ÷ raw limit and pq ÷ each peer, per database."""
    out = []

    def add(name: str, db: str, num, den, peer: str | None = None) -> None:
        if num and den:
            s = summary(ratio_samples(num, den))
            if s:
                out.append({"name": name, "db": db, "peer": peer, **s})

    for db in doc["pq"]:
        drain2 = samples(doc, db, "drain", "p2_per_s")
        add(f"pq drain (2 processes) ÷ {RAW_COMMIT}", db, drain2, raw_commit(doc, db))
        add(
            "pq submit one by one ÷ raw INSERT + commit",
            db,
            samples(doc, db, "enqueue", "submit_per_s"),
            samples(doc, db, "raw", "insert_per_s"),
        )
        for name, peer in doc["peers"].items():
            result = peer.get("result")
            if not result or not result.get("n") or peer["db"] not in (None, db):
                continue
            metric, label, _ = compared(peer)
            add(f"{label} ÷ {peer['label']}", db, samples(doc, db, peer["section"], metric), result["samples"], name)
    return out


#: what a peer of a results file written before peers said it (by section): pq metric, its name
#: in the ratios, the peers' table's "compared with"
_COMPARED = {
    "drain": ("p2_per_s", "pq drain (2 processes)", "drain, 2 processes"),
    "workflow": ("steps_per_s", "pq workflow steps/s", "workflow (1 → 8 → 1)"),
}


def compared(peer: dict) -> tuple[str, str, str]:
    """The pq figure a peer's result is compared with: (metric of its section, name, description)."""
    if "pq_metric" in peer:
        return peer["pq_metric"], peer["pq_label"], peer["versus"]
    return _COMPARED[peer["section"]]


def _ratio(doc: dict, db: str, peer: str) -> float | None:
    for r in doc.get("ratios", []):
        if r["db"] == db and r["peer"] == peer:
            return r["median"]
    return None


def _raw_ratio(doc: dict, db: str) -> float | None:
    for r in doc.get("ratios", []):
        if r["db"] == db and r["name"].endswith(RAW_COMMIT):
            return r["median"]
    return None


def targets(doc: dict) -> list[dict]:
    """Each target of issues 5 and 11 with the measured median and whether it is met (None: not
    measured); ``issue`` says whose."""
    out: list[dict] = []
    sizes = doc["sizes"]

    def add(db: str, target: str, value: float | None, ok, unit: str = "", needs: tuple = (), issue: int = 5) -> None:
        """``needs``: the sections that must have run for the target to be listed."""
        out.append(
            {
                "db": db,
                "target": target,
                "measured": value,
                "unit": unit,
                "sections": set(needs),
                "issue": issue,
                "ok": None if value is None else bool(ok(value)),
            }
        )

    peer_for = {
        "sqlite": ("huey", "huey (SqliteHuey)"),
        "postgres": ("procrastinate", "procrastinate"),
        "mariadb": ("celery", "Celery on SQLAlchemy"),
    }
    for db in doc["pq"]:
        ran = set(doc["pq"][db])
        start = len(out)
        if db in peer_for:
            peer, label = peer_for[db]
            if peer in doc["peers"]:
                add(db, f"drain, 2 processes ≥ 2 × {label}", _ratio(doc, db, peer), lambda v: v >= 2, "×", ("drain",))
        if db == "mariadb":
            add(
                db,
                "drain, 2 processes ≥ 1,000 tasks/s",
                median(doc, db, "drain", "p2_per_s"),
                lambda v: v >= 1000,
                "tasks/s",
                ("drain",),
            )
        add(
            db,
            "drain, 2 processes ≥ raw single-row commit rate",
            _raw_ratio(doc, db),
            lambda v: v >= 1,
            "×",
            ("drain", "raw"),
        )
        for key, m in sorted(doc["pq"].get(db, {}).get("latency", {}).get("metrics", {}).items()):
            if key.startswith("p95_"):
                interval = float(key[4:-1])
                limit = 20.0 if db == "postgres" else interval * 1000 + 50
                add(
                    db,
                    f"latency p95 ≤ {limit:g} ms (poll interval {interval:g} s"
                    f"{', LISTEN/NOTIFY' if db == 'postgres' else ''})",
                    m.get("median"),
                    lambda v, lim=limit: v <= lim,
                    "ms",
                    ("latency",),
                )
        for what in ("claim", "none"):
            add(
                db,
                f"poll cost, loaded ≤ 2 × empty ({'claiming' if what == 'claim' else 'empty'} poll)",
                median(doc, db, "poll", f"{what}_ratio"),
                lambda v: v <= 2,
                "×",
                ("poll",),
            )
        for p in sizes["sched_processes"]:
            add(
                db,
                f"{sizes['sched_due']:,} due schedules submitted in ≤ 10 s, {p} scheduler process(es)",
                median(doc, db, "scheduler", f"due_p{p}_s"),
                lambda v: v <= 10,
                "s",
                ("scheduler",),
            )
        checks = doc["pq"].get(db, {}).get("scheduler", {}).get("checks", {})
        dups = sum(v for k, v in checks.items() if k.endswith("duplicates")) if checks else None
        add(db, "scheduler duplicates = 0", dups, lambda v: v == 0, "", ("scheduler",))
        add(
            db,
            f"idle tick over {sizes['sched_idle']:,} schedules ≤ 20 ms",
            median(doc, db, "scheduler", "idle_tick_ms"),
            lambda v: v <= 20,
            "ms",
            ("scheduler",),
        )
        add(
            db,
            "workflow overhead per step ≤ 2 × a plain task",
            median(doc, db, "workflow", "overhead_per_step"),
            lambda v: v <= 2,
            "×",
            ("workflow", "drain"),
        )
        add(
            db,
            "worker RSS ≤ 80 MB per process",
            median(doc, db, "memory", "worker_mb"),
            lambda v: v <= 80,
            "MB",
            ("memory",),
        )
        _issue11(doc, db, functools.partial(add, db, issue=11))
        _issue13(doc, db, functools.partial(add, db, issue=13))
        _issue14(doc, db, functools.partial(add, db, issue=14))
        add(
            db,
            "metrics scrape ≤ 100 ms with 1,000,000 finished rows",
            median(doc, db, "insight", "scrape_loaded_ms"),
            lambda v: v <= 100,
            "ms",
            ("insight",),
            issue=15,
        )
        add(
            db,
            "every dashboard page ≤ 200 ms server time (p95) with 1,000,000 finished + 100,000 waiting rows",
            median(doc, db, "dashboard", "worst_p95_ms"),
            lambda v: v <= 200,
            "ms",
            ("dashboard",),
            issue=16,
        )
        listed = [t for t in out[start:] if t["sections"] <= ran]  # only targets of scenarios that ran
        out[start:] = listed
    for t in out:
        del t["sections"]
    return out


def _issue11(doc: dict, db: str, add) -> None:
    """The targets of issue 11 ("Speed": workflows and maps) on ``db``."""
    add(
        "10-step DAG: time per step ≤ 3 × a plain task",
        median(doc, db, "workflow", "overhead_per_step"),
        lambda v: v <= 3,
        "×",
        ("workflow", "drain"),
    )
    if "chord" in doc["peers"]:
        add(
            "10-step DAG: steps/s ≥ 2 × Celery chord on Redis",
            _ratio(doc, db, "chord"),
            lambda v: v >= 2,
            "×",
            ("workflow",),
        )
    widths = doc["sizes"].get("map_widths") or ()
    if not widths:
        return
    lo, hi = min(widths), max(widths)
    add(
        f"map: time per item at {hi:,} items ≤ 1.5 × at {lo:,} items",
        median(doc, db, "maps", "linear_ratio"),
        lambda v: v <= 1.5,
        "×",
        ("maps",),
    )
    for name, peer in doc["peers"].items():
        if peer["section"] == "maps":
            add(
                f"{peer['pq_label'].removeprefix('pq ')} ≥ 2 × {peer['label']}",
                _ratio(doc, db, name),
                lambda v: v >= 2,
                "×",
                ("maps",),
            )
    add(
        f"worker RSS ≤ 80 MB per process during the {hi:,}-item map",
        median(doc, db, "maps", f"w{hi}_worker_mb"),
        lambda v: v <= 80,
        "MB",
        ("maps",),
    )


def _submit_raw_ratio(doc: dict, db: str) -> float | None:
    for r in doc.get("ratios", []):
        if r["db"] == db and r["peer"] is None and r["name"].startswith("pq submit one by one"):
            return r["median"]
    return None


def _issue13(doc: dict, db: str, add) -> None:
    """The targets of issue 13 ("Speed where users feel it") on ``db``."""
    add(
        "submit one by one ≥ 0.9 × raw INSERT + commit",
        _submit_raw_ratio(doc, db),
        lambda v: v >= 0.9,
        "×",
        ("enqueue", "raw"),
    )
    peer = {"sqlite": ("huey", "huey"), "postgres": ("procrastinate", "procrastinate")}.get(db)
    if peer and f"{peer[0]}-submit" in doc["peers"]:
        add(
            f"submit one by one ≥ 1.5 × {peer[1]}",
            _ratio(doc, db, f"{peer[0]}-submit"),
            lambda v: v >= 1.5,
            "×",
            ("enqueue",),
        )
    default = f"p95_{DEFAULTS['poll_interval'][0]:g}s"  # the latency scenario's figure at the default
    if db == "postgres":
        if "procrastinate-latency" in doc["peers"]:
            add(
                "latency p95 ≤ procrastinate's p95 (pq ÷ procrastinate ≤ 1)",
                _ratio(doc, db, "procrastinate-latency"),
                lambda v: v <= 1,
                "×",
                ("latency",),
            )
    else:
        add(
            "latency p95 ≤ 100 ms at the default settings",
            median(doc, db, "latency", default),
            lambda v: v <= 100,
            "ms",
            ("latency",),
        )
    add(
        "perfectqueue run, 2 processes, to the first task ≤ 0.25 s",
        median(doc, db, "startup", "first_task_s"),
        lambda v: v <= 0.25,
        "s",
        ("startup",),
    )


def _issue14(doc: dict, db: str, add) -> None:
    """The targets of issue 14 ("Queues you can steer") on ``db``."""
    n = doc["sizes"].get("queue_count", 20)
    for what in ("claim", "none"):
        add(
            f"poll over {n} queues, loaded ≤ 2 × empty ({'claiming' if what == 'claim' else 'empty'} poll)",
            median(doc, db, "queues", f"poll_{what}_ratio"),
            lambda v: v <= 2,
            "×",
            ("queues",),
        )
    add(
        "drain, 2 processes, 3 queues ≥ 0.9 × 1 queue",
        median(doc, db, "queues", "drain_ratio"),
        lambda v: v >= 0.9,
        "×",
        ("queues",),
    )
    add(
        f"concurrency limit {doc['sizes'].get('limit_concurrency', 10)}: utilisation ≥ 90 %",
        median(doc, db, "queues", "limit_utilisation_pct"),
        lambda v: v >= 90,
        "%",
        ("queues",),
    )
    add(
        "rate limit held within 5 % (achieved / limit in 0.95–1.00)",
        median(doc, db, "queues", "rate_ratio"),
        lambda v: 0.95 <= v <= 1.0,
        "×",
        ("queues",),
    )


def analyse(doc: dict) -> dict:
    doc["ratios"] = ratios(doc)
    doc["targets"] = targets(doc)
    return doc
