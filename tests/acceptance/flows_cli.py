"""Workflows of the ``pqflow`` command-line tests (loaded by path or with -I/-r by real workers).

cli_etl:  extract -> (transform, audit) -> load -> cleanup (trigger all_done)

Run input keys: ``log`` (every step appends "<run> <step>" to this file), ``fail`` (transform
always fails), ``marker`` (transform fails while this file does not exist).
"""

from __future__ import annotations

import os

import pqflow


def _record(ctx) -> None:
    path = (ctx.data or {}).get("log")
    if path:
        with open(path, "a") as fh:
            fh.write(f"{ctx.run_id} {ctx.step}\n")


etl = pqflow.Workflow("cli_etl", retries=0, retry_wait=0)


@etl.step()
def extract(ctx):
    _record(ctx)
    return [1, 2, 3]


@etl.step(after=extract)
def transform(ctx, extract):
    _record(ctx)
    data = ctx.data or {}
    if data.get("fail"):
        raise RuntimeError("transform failed as asked by the run input")
    marker = data.get("marker")
    if marker is not None and not os.path.exists(marker):
        raise FileNotFoundError(f"marker file {marker} does not exist")
    return [x * 10 for x in extract]


@etl.step(after=extract)
def audit(ctx, extract):
    _record(ctx)
    return {"count": len(extract)}


@etl.step(after=[transform, audit])
def load(ctx, transform, audit):
    _record(ctx)
    return {"loaded": sum(transform), "count": audit["count"]}


@etl.step(after=load, trigger="all_done")
def cleanup(ctx):
    _record(ctx)
    return "cleaned"


# a second workflow, so that drawing the Decider needs --workflow for single-graph formats
ping = pqflow.Workflow("cli_ping", retry_wait=0)


@ping.step()
def pong(ctx):
    _record(ctx)
    return "pong"


class Decider(pqflow.Decider):
    workflows = [etl, ping]


class EtlOnly(pqflow.Decider):
    workflows = [etl]


def not_a_decider(task):  # a valid perfectqueue handler, but not a pqflow.Decider
    pass
