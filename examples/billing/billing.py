"""Bill every customer, then report: a map over the result of a step (pqflow).

    pqflow run examples/billing/billing.py:Decider

``customers`` returns the list of customers to bill; ``bill`` runs once per customer (one queue
task each, at most 5 at once across all workers, each retried on its own); ``report`` receives
the list of bills in customer order, with None for a customer that could not be billed.
"""

from __future__ import annotations

import random

import pqflow

billing = pqflow.Workflow("billing", retry_wait=0)  # a real job would wait a few seconds


@billing.step()
def customers(ctx):
    """Who to bill this month (a real job would read its database)."""
    return [f"customer-{i:03d}" for i in range(ctx.data.get("customers", 25))]


@billing.step(map=customers, retries=2, max_parallel=5, allow_failed_items=True)
def bill(ctx, item):
    """Charge one customer; a flaky payment API fails now and then (retried, this item only)."""
    if random.random() < ctx.data.get("flaky", 0.2) and ctx.attempt == 1:
        raise ConnectionError(f"payment API timed out for {item}")
    if item in ctx.data.get("blocked", []):
        raise PermissionError(f"{item}: card declined")
    return {"customer": item, "amount_cents": 1000 + 37 * ctx.index}


@billing.step(after=bill)
def report(ctx, bill):
    """One line per month: how much was billed, and who must be billed by hand."""
    billed = [b for b in bill if b is not None]
    return {
        "billed": len(billed),
        "total_cents": sum(b["amount_cents"] for b in billed),
        "by_hand": [f"customer-{i:03d}" for i in ctx.failed_items.get("bill", [])],
    }


class Decider(pqflow.Decider):
    workflows = [billing]
