"""``perfectqueue events`` and ``workers``, and the timeline ``show`` prints: the event stream,
the worker registry and a task's history on the command line (parse, call the library, print).
Registered on the ``perfectqueue`` group by :mod:`queue_core.cli.main`."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

import click

from ..api.task_history import TaskEvent, trimmed_after
from ..store.protocol import EVENT_KINDS
from .kit.exits import CLIError
from .kit.options import common_options
from .kit.output import format_time, json_text, print_json, print_table, printable, short_error, terminal_text
from .kit.parsing import parse_time
from .kit.settings import open_queue, settings
from .queue_commands import QUEUE

_AGO = re.compile(r"^(\d{1,9}(?:\.\d{1,6})?)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str, now: float, *, or_cursor: bool = True) -> float:
    """A start time as the command line gives it: a duration back from ``now`` (``90s``,
    ``10m``, ``24h``, ``7d``, ``2w``), epoch seconds or an ISO 8601 time with an offset
    (``or_cursor``: the error says that an event's cursor would do too)."""
    m = _AGO.match(text.strip())
    if m:
        return max(0.0, now - float(m[1]) * _UNITS[m[2]])
    try:
        return parse_time(text, "--since")
    except CLIError:
        raise CLIError(
            f"--since {text[:80]!r} is neither a duration back from now (90s, 10m, 24h, 7d), "
            + ("an event's cursor, 'now', " if or_cursor else "")
            + "epoch seconds nor an ISO 8601 time with an offset"
        ) from None


def _since(text: str | None, follow: bool):
    """What ``Queue.events(since=...)`` takes for the option: a cursor as it is, else a time."""
    if text is None:
        return "now" if follow else time.time() - 3600
    if text == "now" or re.match(r"^t\d", text):
        return text
    return parse_since(text, time.time())


def event_line(e: TaskEvent, *, with_key: bool = True) -> str:
    """One event as a line of text: time, kind, what it says."""
    parts = [format_time(e.at), f"{e.kind:<16}"]
    if with_key:
        parts.append(printable(e.key))
    parts.append(_what(e))
    return terminal_text(" ".join(p for p in parts if p))


def _what(e: TaskEvent) -> str:
    said = [f"queue={e.queue}" if e.kind in ("submitted", "moved") else ""]
    said.append(f"attempt={e.attempt}" if e.kind != "submitted" else "")
    said += [f"owner={e.owner}" if e.owner else "", f"outcome={e.outcome}" if e.outcome else ""]
    said.append(f"waited={e.waited:.3f}s" if e.waited is not None else "")
    said.append(f"ran={e.ran:.3f}s" if e.ran is not None else "")
    said.append(f"due={format_time(e.due_at)}" if e.due_at is not None else "")
    said.append(f"error={short_error(e.error)}" if e.error else "")
    return " ".join(s for s in said if s)


def timeline(entries: list[TaskEvent]) -> list[str]:
    """The lines of a task's history, with a mark where its middle was trimmed."""
    cut = trimmed_after(entries)
    lines = []
    for i, e in enumerate(entries):
        lines.append("  " + event_line(e, with_key=False))
        lines.extend(traceback_lines(e))
        if i == cut:
            lines.append("  ... (earlier attempts trimmed: a history keeps its first and last entries)")
    return lines


def traceback_lines(e: TaskEvent) -> list[str]:
    """The traceback an event of a task's history keeps (an attempt that ended in an error),
    headed by the attempt and the worker it ran on, indented under its event line."""
    if e.traceback is None:
        return []
    head = terminal_text(f"    traceback of attempt {e.attempt} on worker {e.owner or '-'}:")
    return [head, *("      " + terminal_text(line) for line in e.traceback.splitlines())]


@click.command(short_help="Print task events (submitted, claimed, finished, ...).")
@click.option("--follow", "-f", is_flag=True, help="Keep printing events as they happen (Ctrl-C ends).")
@click.option(
    "--since",
    help="Where to start: 24h, 10m (back from now), an ISO time, epoch seconds, an event's cursor, or 'now'. "
    "Default: 'now' with --follow, else 1h.",
)
@click.option("-q", "--queue", "queue_name", type=QUEUE, help="Only events of tasks of this queue.")
@click.option("--tracked", is_flag=True, help="Only events of tracked tasks.")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(EVENT_KINDS), help="Only events of this kind.")
@click.option("--key", help="Only events of this task.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one object per line, with its cursor (resume with --since CURSOR).",
)
@common_options(long_running=True)
def events(
    follow: bool,
    since: str | None,
    queue_name: str | None,
    tracked: bool,
    kinds: Iterable[str],
    key: str | None,
    fmt: str,
) -> None:
    """Print the events of tasks, oldest first: submitted, claimed, retried, finished, cancelled, moved..."""
    with open_queue(settings()) as q:
        stream = q.events(
            since=_since(since, follow),
            follow=follow,
            queue=queue_name,
            tracked=tracked,
            kinds=list(kinds) or None,
            key=key,
        )
        try:
            for e in stream:
                click.echo(json_text(e.to_dict()) if fmt == "json" else event_line(e))
        except KeyboardInterrupt:
            pass


WORKER_COLUMNS = ["owner", "queues", "types", "version", "started_at", "last_seen", "held", "held_keys"]


@click.command(short_help="List the live worker processes and what they hold.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@common_options
def workers(fmt: str) -> None:
    """List the worker processes seen within registry_timeout: host:pid, the queues and task types
    they serve, their pq version, when they started and were last seen, the tasks they hold now
    (how many, and their keys)."""
    with open_queue(settings()) as q:
        found = q.workers()
    if fmt == "json":
        print_json([w.to_dict() for w in found])
        return
    rows = [
        w.to_dict()
        | {
            "queues": ",".join(w.queues),
            "types": "(any)" if w.types is None else ",".join(w.types),
            "started_at": format_time(w.started_at),
            "last_seen": format_time(w.last_seen),
            "held_keys": ",".join(w.held_keys) + (",…" if w.held > len(w.held_keys) else "") or "-",
        }
        for w in found
    ]
    print_table(rows, WORKER_COLUMNS)
    click.echo(f"{len(found)} {'worker' if len(found) == 1 else 'workers'}.")


_STATS_COLUMNS = ["queue", "type", "started", "succeeded", "failed", "cancelled", "retried"]
_TIMES = [f"{d}_{m}" for d in ("wait", "run") for m in ("mean", "p50", "p95", "p99")]


def print_statistics(since: str, queue: str | None, type_: str | None, fmt: str) -> None:
    """``stats --since``: the statistics per queue and type (json: also per bucket of time)."""
    with open_queue(settings()) as q:
        st = q.statistics(parse_since(since, time.time(), or_cursor=False), queue=queue, type=type_)
    if fmt == "json":
        print_json(st.to_dict())
        return
    rows = []
    for (queue_name, type_name), tally in st.totals().items():
        times = {
            f"{d}_{m}": _seconds(getattr(tally, d).summary()[m])
            for d in ("wait", "run")
            for m in ("mean", "p50", "p95", "p99")
        }
        rows.append({"queue": queue_name, "type": type_name, **tally.to_dict(), **times})
    click.echo(f"since {format_time(st.since)} (buckets of {st.span // 60} min)")
    print_table(rows, [*_STATS_COLUMNS, *_TIMES])


def _seconds(value: float | None) -> str | None:
    return None if value is None else f"{value:.3f}s"


COMMANDS = (events, workers)
