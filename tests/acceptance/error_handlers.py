"""Handlers and a workflow whose errors are long or whose input is invalid (loaded by path in
real worker processes): each run appends "<key> <pid> run" to the file named by data["log"]."""

from __future__ import annotations

import os
import re

import pqflow
import queue_core

#: bytes of the message of every error raised here (past the stored cap)
MESSAGE_BYTES = 100_000


def message(unit: str) -> str:
    """An error message of about MESSAGE_BYTES bytes of ``unit`` ("x", "é", "€": 1 to 3 bytes)."""
    return "start " + unit * (MESSAGE_BYTES // len(unit.encode()))


def _record(path: str | None, key: str) -> None:
    if path:
        with open(path, "a") as fh:
            fh.write(f"{key} {os.getpid()} run\n")


def _raise_huge(unit: str) -> None:
    raise RuntimeError(message(unit))


def huge(task):
    _record(task.data.get("log"), task.key)
    _raise_huge(task.data.get("unit", "x"))


def _deep_failure(attempt: int) -> None:
    raise ValueError(f"bad value on attempt {attempt}")


def failing(task):
    _record(task.data.get("log"), task.key)
    _deep_failure(task.attempts)


def fine(task):
    _record(task.data.get("log"), task.key)


class Huge(queue_core.Dispatch):
    routes = [(re.compile(r"^huge"), huge), ("failing", failing), ("fine", fine)]


huge_flow = pqflow.Workflow("huge_errors", retries=1, retry_wait=0)


@huge_flow.step()
def boom(ctx):
    _record((ctx.data or {}).get("log"), f"{ctx.run_id}#boom")
    _raise_huge((ctx.data or {}).get("unit", "x"))


failing_flow = pqflow.Workflow("failing_steps", retries=1, retry_wait=0)


@failing_flow.step()
def wobbly(ctx):
    _deep_failure(ctx.attempt)


class Decider(pqflow.Decider):
    workflows = [huge_flow, failing_flow]
