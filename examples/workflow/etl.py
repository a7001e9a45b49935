"""An ETL workflow: extract -> (transform, audit) -> load -> report (all_done).

Started by hand (pqflow start / etl.start) and by a schedule (perfectsched add ... etl ...);
served by: pqflow run examples/workflow/etl.py:Decider
"""

from __future__ import annotations

import pqflow

etl = pqflow.Workflow("etl", retries=2, retry_wait=1)


@etl.step()
def extract(ctx):
    day = (ctx.data or {}).get("day", "today")
    return [{"day": day, "amount": n} for n in (120, 80, 45)]


@etl.step(after=extract)
def transform(ctx, extract):
    return [dict(row, amount_eur=round(row["amount"] * 0.92, 2)) for row in extract]


@etl.step(after=extract)
def audit(ctx, extract):
    if any(row["amount"] < 0 for row in extract):
        raise ValueError("negative amount")
    return len(extract)


@etl.step(after=[transform, audit])
def load(ctx, transform, audit):
    total = sum(row["amount_eur"] for row in transform)
    print(f"[{ctx.run_id}] loaded {audit} rows, total {total} EUR", flush=True)
    return {"rows": audit, "total_eur": total}


@etl.step(after=load, trigger="all_done")
def report(ctx):
    print(f"[{ctx.run_id}] report: load {ctx.results.get('load')}", flush=True)


class Decider(pqflow.Decider):
    workflows = [etl]

    def on_run_finished(self, run_id, status):
        print(f"[{run_id}] run {status}", flush=True)
