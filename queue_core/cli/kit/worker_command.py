"""The worker commands (``perfectqueue run``, ``pqflow run``): their options and their body."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from ...errors import ConfigError
from .settings import settings


def worker_options(fn: Callable) -> Callable:
    """The options of a worker command: -I, -r, --processors, ..., --log."""
    options = [
        click.option("-I", "--include", "include", multiple=True, metavar="PATH", help="Add PATH to the import path."),
        click.option(
            "-r", "--require", "require", multiple=True, metavar="MODULE", help="Import MODULE (or FILE.py) first."
        ),
        click.option("--processors", type=click.IntRange(min=1), metavar="N", help="Processors per worker."),
        click.option("--processor-type", type=click.Choice(["process", "thread"]), help="Child processes or threads."),
        click.option(
            "--poll-interval",
            type=click.FloatRange(min=0, min_open=True),
            metavar="S",
            help="Idle wait between polls (seconds).",
        ),
        click.option(
            "--queues",
            metavar="LIST",
            help="Queues to serve, best first (critical,default) or weighted (critical=5,default=1).",
        ),
        click.option("--burst", is_flag=True, help="Exit when the queue has no runnable task."),
        click.option(
            "--max-request-per-child",
            type=click.IntRange(min=1),
            metavar="N",
            help="Recycle a child process after N tasks.",
        ),
        click.option("--log", "log_file", metavar="FILE", help="Log to FILE (reopened on SIGUSR2)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def run_worker_command(
    target: str,
    *,
    include,
    require,
    processors,
    processor_type,
    poll_interval,
    queues,
    burst,
    max_request_per_child,
    log_file,
    load: Callable | None = None,
    check: Callable[[Any], None] | None = None,
) -> None:
    """Body of a worker command: settings first, then the target, then the worker (exits)."""
    state = click.get_current_context().obj
    overrides = {
        "processors": processors,
        "processor_type": processor_type,
        "poll_interval": poll_interval,
        "queues": queues,
        "max_request_per_child": max_request_per_child,
        "log": log_file,
        "log_level": "DEBUG" if getattr(state, "verbose", False) else None,
    }
    cfg = settings(state, overrides=overrides)  # config errors first, before importing anything
    try:
        from ...worker.main import load_target, run_worker
    except ImportError as exc:
        raise ConfigError(f"the worker is not available in this installation ({exc})") from None
    handler = (load or load_target)(target, include=list(include), require=list(require))
    if check is not None:
        check(handler)
    code = run_worker(handler, dict(cfg), burst=burst, config_loader=lambda: dict(settings(state, overrides=overrides)))
    sys.exit(code or 0)
