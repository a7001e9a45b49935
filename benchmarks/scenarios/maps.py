"""Scenario 10: workflow maps (dynamic fan-out), per width.

For each width W of ``map_widths``: ``map_items // W`` runs of :data:`benchmarks.flows.mapped`
(``items`` returns W items, ``work`` runs once per item, ``join`` gets the W results) are
started together, so every width does the same number of items and pays the same start-up;
then ``pqflow run benchmarks.flows:Decider --processors 2`` serves them. Not ``--burst``: a
burst processor that finds nothing due exits for good, so while the first processor runs a
run's ``items`` step the second would leave and a single wide map would be served by one
process. Time = from the worker's start to the last run row's ``finished_at`` (the worker's
clock); the worker is stopped afterwards, unmeasured, as the peers are.

Recorded per width: items/s, time per item, the peak RSS (VmHWM) of the largest process of the
worker (supervisor or child), and the ratio of the time per item at the largest width to the
smallest. Checked: every row of every run succeeded, every run reads as succeeded with W of W
items, every item row exists once and ran once, every ``join`` ran once.
"""

from __future__ import annotations

import time
from collections import Counter

import pqflow

from ..flows import MAP_STEP, MAP_STEPS, mapped
from ..procs import PeakRSS, pq_worker, wait_until
from ..tables import last_run_end, runs_open, task_counts
from .base import Context, Sample, Scenario

PROCESSES = 2
TARGET = "benchmarks.flows:Decider"
SECTION = "maps"
#: the checks (counts that must be 0), summed over the widths: rows not finished as success (run,
#: step and item rows), runs not read back as succeeded with every item, item rows missing, rows
#: of steps and items present twice or run more than once, join rows not there once or not run once
CHECKS = ("not_succeeded", "runs_not_succeeded", "missing_items", "duplicates", "join_not_once")


class Maps(Scenario):
    name = SECTION
    title = "10. Workflow maps: runs of a W-item map + join, the same number of items per width"

    def run(self, ctx: Context, out: Sample) -> None:
        rates, totals = {}, Counter()
        for width in ctx.sizes.map_widths:
            rates[width], found = self._width(ctx, out, width)
            totals.update(found)
            out.detail(SECTION, f"w{width}_checks", found)
        for key in CHECKS:
            out.check(SECTION, key, totals[key])
        lo, hi = min(rates), max(rates)
        if hi != lo:
            out.metric(
                SECTION, "linear_ratio", rates[lo] / rates[hi], f"time per item: {hi:,}-item map ÷ {lo:,}-item map", "x"
            )

    def _width(self, ctx: Context, out: Sample, width: int) -> tuple[float, dict[str, int]]:
        """Serve the runs of one width and record its figures; (items/s, its checks)."""
        runs = ctx.sizes.map_runs(width)
        url, table = ctx.url(SECTION), ctx.table(SECTION)
        ids = [f"m{width}-{i}" for i in range(runs)]
        with ctx.queue(SECTION, table) as q:
            for run_id in ids:
                mapped.start(run_id, {"n": width}, queue=q)
            ctx.log(f"maps: {runs} run(s) x {width:,} items, {PROCESSES} processes")
            seconds, peak_kb = serve(ctx, url, table, runs, f"maps-{width}.log")
            rate = record(out, width, runs, seconds, peak_kb)
            return rate, checks(counts(url, table), runs, width, unfinished_runs(q, ids, width))


def record(out: Sample, width: int, runs: int, seconds: float, peak_kb: int) -> float:
    """The figures of one width; returns its items/s."""
    rate = runs * width / seconds
    tag = f"w{width}"
    what = f"map of {width:,} items ({f'{runs} runs at once' if runs > 1 else '1 run'})"
    out.metric(SECTION, f"{tag}_items_per_s", rate, f"{what}, {PROCESSES} worker processes", "items/s")
    out.metric(SECTION, f"{tag}_ms_per_item", 1000 / rate, f"{what}, time per item", "ms")
    out.metric(
        SECTION,
        f"{tag}_worker_mb",
        peak_kb / 1024,
        f"{what}, largest worker process (supervisor or child), peak RSS",
        "MB",
    )
    out.detail(SECTION, f"{tag}_runs", runs)
    return rate


def serve(ctx: Context, url: str, table: str, runs: int, log: str) -> tuple[float, int]:
    """Run the worker until every run of ``table`` has finished; (seconds from its start to
    the last run's end, peak RSS in kB of its largest process)."""
    started = time.time()
    proc = pq_worker(TARGET, program="pqflow", url=url, table=table, processors=PROCESSES, log=ctx.file(log))
    rss = PeakRSS(proc.pid)
    rss.start()
    try:
        wait_until(lambda: runs_open(url, table) == 0, ctx.sizes.timeout, f"{runs} map runs", [proc], interval=0.1)
    finally:
        rss.stop()
        proc.stop()
    return last_run_end(url, table) - started, max([rss.root_kb, *rss.children_kb.values()])


def counts(url: str, table: str) -> dict[str, dict[str, int]]:
    """Row counts: the whole table, the rows of steps and items, the item rows, the join rows."""
    return {
        "all": task_counts(url, table),
        "steps": task_counts(url, table, key_like="%#%"),
        "items": task_counts(url, table, key_like=f"%#{MAP_STEP}#%"),
        "join": task_counts(url, table, key_like="%#join"),
    }


def unfinished_runs(q, ids: list[str], width: int) -> int:
    """Runs that do not read as succeeded with ``width`` of ``width`` items succeeded."""
    bad = 0
    for run_id in ids:
        run = pqflow.get_run(run_id, queue=q)
        items = run.steps[MAP_STEP].items
        bad += run.status != "succeeded" or items is None or (items.total, items.succeeded) != (width, width)
    return bad


def checks(c: dict[str, dict[str, int]], runs: int, width: int, runs_bad: int) -> dict[str, int]:
    """What must be 0 for one width (see :data:`CHECKS`)."""
    steps, items, join = c["steps"], c["items"], c["join"]
    return {
        "not_succeeded": runs * (1 + MAP_STEPS + width) - c["all"]["success"],
        "runs_not_succeeded": runs_bad,
        "missing_items": runs * width - items["distinct_keys"],
        "duplicates": steps["reexecuted"] + steps["total"] - steps["distinct_keys"],
        "join_not_once": abs(join["total"] - runs) + join["reexecuted"] + join["total"] - join["success"],
    }
