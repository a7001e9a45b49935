"""``perfectsched``: the command line of perfectsched (parse, call the library, print).

Exit codes and the common options (-D/--table/-c/-e/-v) are those of ``perfectqueue``, see
:mod:`queue_core.cli.kit`. ``--table`` (config ``table``) names the QUEUE table that
occurrences are submitted into; ``--schedule-table`` (config ``schedule_table``, env
``PQ_SCHEDULE_TABLE``) names the schedule table. New schedules use the config ``timezone``
(default UTC) unless ``-t`` is given. Times are shown in each schedule's own timezone.
"""

from __future__ import annotations

import functools
import sys
import time
from typing import Any

import click

from queue_core.api.queue import check_name
from queue_core.cli.kit.exits import EXIT_CODES_HELP, CLIError
from queue_core.cli.kit.group import PQGroup, main_wrapper
from queue_core.cli.kit.options import CLIState, common_options
from queue_core.cli.kit.output import format_time, json_text, print_json, print_table, printable
from queue_core.cli.kit.parsing import STRICT_INT, parse_json_object, parse_time
from queue_core.cli.kit.settings import settings, short_lived_retries
from queue_core.cli.queue_commands import QUEUE
from queue_core.cli.tag_commands import TAG
from queue_core.errors import ConfigError

from . import catchup as catchup_mod
from . import cron as cronlib
from . import every, preview
from .runner import open_scheduler
from .scheduler import EXTRA_KEYS, ScheduleMetadata

PROG = "perfectsched"
LIST_COLUMNS = [
    "key",
    "type",
    "cron",
    "queue",
    "delay",
    "timezone",
    "next_time",
    "next_run_time",
    "catchup",
    "dst",
    "status",
    "data",
]
TIME_FIELDS = ("next_time", "next_run_time", "timeout")
CATCHUP_CHOICE = click.Choice(list(catchup_mod.POLICIES))
DST_CHOICE = click.Choice(list(cronlib.DST_POLICIES))
MARKS = preview.MARKS


@click.group(name=PROG, cls=PQGroup, epilog=EXIT_CODES_HELP)
@click.version_option(package_name="pq", prog_name=PROG, message="%(prog)s %(version)s")
def cli() -> None:
    """A distributed cron stored in SQL: each occurrence becomes one queue task.

    Options such as -D URL go after the command: perfectsched list -D sqlite:///pq.db.
    --table names the queue table, --schedule-table the schedule table.
    """


# -- plumbing ------------------------------------------------------------------------------------
def _state() -> CLIState:
    return click.get_current_context().ensure_object(CLIState)


def sched_options(fn=None, *, own_logging: bool = False, long_running: bool = False):
    """:func:`common_options` plus ``--schedule-table NAME``."""

    def decorate(f):
        @functools.wraps(f)
        def inner(*args: Any, schedule_table: str | None = None, **kwargs: Any):
            _state().extra["schedule_table"] = schedule_table or None
            return f(*args, **kwargs)

        inner = click.option(
            "--schedule-table",
            "schedule_table",
            metavar="NAME",
            help="Schedule table name (config schedule_table, env PQ_SCHEDULE_TABLE; default: pq_schedules).",
        )(inner)
        return common_options(inner, own_logging=own_logging, long_running=long_running)

    return decorate(fn) if fn is not None else decorate


def _settings_for(state: CLIState, overrides: dict):
    """Merged settings with perfectsched's keys; also the reload function of ``run``."""
    extra = {"schedule_table": state.extra.get("schedule_table")}
    return settings(state, extra_keys=EXTRA_KEYS, overrides={**extra, **overrides})


def _settings(**overrides: Any):
    return _settings_for(_state(), overrides)


def _open(cfg=None):
    """The scheduler for a short-lived command: fail in seconds on an unreachable database."""
    cfg = _settings() if cfg is None else cfg
    return open_scheduler(dict(cfg), **short_lived_retries(cfg))


def _zone(name: str) -> str:
    """Validate a timezone name given on the command line (exit 1 naming it)."""
    return cronlib.validate_timezone(name).key


def _time(ts: float | None, zone: str) -> str:
    """``ts`` in the schedule's own zone; in UTC when this host cannot compute that zone (the
    schedule is then set aside when due, and ``show`` tells why)."""
    try:
        return format_time(ts, zone)
    except (ConfigError, OSError):  # OSError: a zone name edited by hand into a path
        return format_time(ts)


def _data_text(data: dict) -> str:
    return json_text(data, sort_keys=True, separators=(",", ":"))


def _status(m: ScheduleMetadata) -> str:
    """``active``, ``set_aside``, or ``corrupt``: active, but it cannot be computed as stored (a
    row edited by hand, a zone this host lacks); the scheduler sets it aside when it is due."""
    return "corrupt" if m.status == "active" and m.problem is not None else m.status


def _shown(m: ScheduleMetadata) -> dict:
    return m.to_dict() | {"status": _status(m)}


def _json_meta(m: ScheduleMetadata) -> dict:
    out = _shown(m)
    for f in TIME_FIELDS:
        out[f + "_iso"] = _time(out[f], m.timezone)
    return out


def _summary(m: ScheduleMetadata) -> str:
    return f"{m.key} next_time={_time(m.next_time, m.timezone)} next_run_time={_time(m.next_run_time, m.timezone)}"


# -- commands -------------------------------------------------------------------------------------
@cli.command()
@click.option("--force", is_flag=True, help="Drop the schedule table first (DELETES ALL SCHEDULES).")
@sched_options
def init(force: bool) -> None:
    """Create the schedule table and the queue table (does nothing if they exist)."""
    with _open() as sc:
        sc.init(force=force)
        click.echo(
            f"{'re-created' if force else 'initialized'} schedule table {sc.table} "
            f"and queue table {sc.queue.table} in {sc.queue.url}"
        )


@cli.command(short_help="Add a schedule.")
@click.argument("key")
@click.argument("sched_type", metavar="TYPE")
@click.argument("cron_expr", metavar="CRON")
@click.argument("data", required=False, metavar="[DATA]")
@click.option(
    "-d",
    "--delay",
    type=STRICT_INT,
    default=0,
    show_default=True,
    metavar="SEC",
    help="Submit each occurrence SEC seconds after its scheduled time.",
)
@click.option(
    "-t",
    "--timezone",
    "tz",
    metavar="TZ",
    help="IANA timezone of the cron expression (default: config timezone, else UTC).",
)
@click.option("-s", "--start", metavar="TIME", help="First occurrence at or after TIME (default: now).")
@click.option("-a", "--at", "at", metavar="TIME", help="Run the first occurrence at TIME (its next_run_time).")
@click.option(
    "--catchup",
    type=CATCHUP_CHOICE,
    default="all",
    show_default=True,
    help="Missed occurrences after downtime: all, only the latest, or skip them.",
)
@click.option(
    "--dst", type=DST_CHOICE, default="vixie", show_default=True, help="Daylight-saving policy (see docs/cron.md)."
)
@click.option("--offset", metavar="DURATION", help="An interval's offset from the epoch (@every:1h --offset 15m).")
@click.option("-q", "--queue", "queue_name", type=QUEUE, default="default", show_default=True, help="Its tasks' queue.")
@click.option("--tag", "tags", multiple=True, type=TAG, help="A tag its tasks carry (repeat for more).")
@sched_options
def add(
    key: str,
    sched_type: str,
    cron_expr: str,
    data: str | None,
    delay: int,
    tz: str | None,
    start: str | None,
    at: str | None,
    catchup: str,
    dst: str,
    offset: str | None,
    queue_name: str,
    tags: tuple[str, ...],
) -> None:
    """Add a schedule firing TYPE tasks at CRON (5 fields, e.g. '0 * * * *', or an interval,
    '@every:15m', aligned to the epoch plus --offset).

    DATA is a JSON object (default {}, @FILE reads a file, - reads stdin). TIME is epoch
    seconds or ISO 8601 with an offset. Prints the key and the first next_time/next_run_time.
    """
    payload = parse_json_object(data) if data is not None else {}
    if offset is not None:
        cron_expr = every.with_offset(cron_expr, offset)
    cron_expr = cronlib.validate_cron(cron_expr)
    start_ts = parse_time(start, "--start") if start is not None else None
    at_ts = parse_time(at, "--at") if at is not None else None
    cfg = _settings()
    zone = _zone(tz) if tz is not None else None
    with _open(cfg) as sc:
        s = sc.add(
            key,
            sched_type,
            cron=cron_expr,
            data=payload,
            delay=delay,
            timezone=zone,
            next_time=start_ts,
            next_run_time=at_ts,
            catchup=catchup,
            dst=dst,
            queue=queue_name,
            tags=tags,
        )
        click.echo(_summary(s.metadata()))


@cli.command("list")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="json has every field, epoch numbers plus ISO strings.",
)
@sched_options
def list_cmd(fmt: str) -> None:
    """List schedules (next due first); times in each schedule's own timezone.

    status is active; set_aside: the schedule cannot be computed and never fires until it is
    modified or resumed; or corrupt: it cannot be computed as stored (a row edited by hand) and is
    set aside when it is due. 'show KEY' tells why.
    """
    with _open() as sc:
        rows = list(sc.list())
    if fmt == "json":
        print_json([_json_meta(m) for m in rows])
        return
    print_table(
        [
            {
                "key": m.key,
                "type": m.type,
                "cron": m.cron,
                "queue": m.queue_name,
                "delay": m.delay,
                "timezone": m.timezone,
                "next_time": _time(m.next_time, m.timezone),
                "next_run_time": _time(m.next_run_time, m.timezone),
                "catchup": m.catchup,
                "dst": m.dst,
                "status": _status(m),
                "data": _data_text(m.data),
            }
            for m in rows
        ],
        LIST_COLUMNS,
    )
    click.echo(f"{len(rows)} {'entry' if len(rows) == 1 else 'entries'}.")


def _show_value(name: str, value: Any, zone: str) -> str:
    if value is None:
        return "-"
    if name in TIME_FIELDS:
        return f"{_time(value, zone)} ({value})"
    if name == "data":
        return _data_text(value)
    if name == "tags":
        return printable(",".join(value)) or "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return printable(str(value)).replace("\n", "\\n").replace("\r", "\\r")


@cli.command()
@click.argument("key")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@sched_options
def show(key: str, fmt: str) -> None:
    """Show every field of one schedule as stored (error: why a set-aside schedule cannot be
    computed; problem: why one cannot be computed as stored, column first)."""
    with _open() as sc:
        meta = sc[key].metadata(check=False)
    if fmt == "json":
        print_json(_json_meta(meta))
        return
    for name, value in _shown(meta).items():
        click.echo(f"{name + ':':<15} {_show_value(name, value, meta.timezone)}")


@cli.command()
@click.argument("key")
@sched_options
def delete(key: str) -> None:
    """Delete a schedule (tasks it already submitted stay in the queue)."""
    with _open() as sc:
        sc[key].delete()
    click.echo("deleted")


@cli.command(short_help="Change a schedule.")
@click.argument("key")
@click.option("--cron", "cron_expr", metavar="CRON", help="New cron expression.")
@click.option("--type", "sched_type", metavar="TYPE", help="New task type.")
@click.option("--data", metavar="DATA", help="New data (JSON object, @FILE, or - for stdin).")
@click.option("--delay", type=STRICT_INT, metavar="SEC", help="New delay in seconds.")
@click.option("--timezone", "tz", metavar="TZ", help="New IANA timezone.")
@click.option("--catchup", type=CATCHUP_CHOICE, help="New catch-up policy.")
@click.option("--dst", type=DST_CHOICE, help="New daylight-saving policy.")
@click.option("-q", "--queue", "queue_name", type=QUEUE, help="New queue of its tasks.")
@click.option("--tag", "tags", multiple=True, type=TAG, help="New tags of its tasks (repeat; replaces them all).")
@click.option("--no-tags", is_flag=True, help="Its tasks carry no tags any more.")
@sched_options
def modify(
    key: str,
    cron_expr: str | None,
    sched_type: str | None,
    data: str | None,
    delay: int | None,
    tz: str | None,
    catchup: str | None,
    dst: str | None,
    queue_name: str | None,
    tags: tuple[str, ...],
    no_tags: bool,
) -> None:
    """Change a schedule. A new cron, timezone, delay or dst recomputes next_time from now.

    Any change of a set-aside schedule brings it back, from now; one that leaves it unable to fire
    is refused.

    Prints the key and the (new) next_time/next_run_time.
    """
    check_name(key, "schedule key")  # before it reaches the database driver
    if tags and no_tags:
        raise click.UsageError("--tag and --no-tags contradict each other")
    new_tags = () if no_tags else tags or None
    if all(v is None for v in (cron_expr, sched_type, data, delay, tz, catchup, dst, queue_name, new_tags)):
        raise click.UsageError(
            "nothing to change: give at least one of --cron, --type, --data, --delay, --timezone, --catchup, --dst, "
            "--queue, --tag, --no-tags"
        )
    payload = parse_json_object(data, "--data") if data is not None else None
    if cron_expr is not None:
        cron_expr = cronlib.validate_cron(cron_expr)
    zone = _zone(tz) if tz is not None else None
    with _open() as sc:
        meta = sc.modify(
            key,
            cron=cron_expr,
            type=sched_type,
            data=payload,
            delay=delay,
            timezone=zone,
            catchup=catchup,
            dst=dst,
            queue=queue_name,
            tags=new_tags,
        )
    click.echo(_summary(meta))


@cli.command(short_help="Bring back a set-aside schedule as it is.")
@click.argument("key")
@sched_options
def resume(key: str) -> None:
    """Bring back a schedule set aside because it could not be computed (a timezone the host
    lacked, a row edited by hand), as it is now: it goes on from the occurrence it stopped at and
    its catch-up policy decides about the ones missed since. Refused while it still cannot be
    computed ('modify' changes it and restarts it from now). An active schedule is left as it is.

    Prints the key and its next_time/next_run_time.
    """
    check_name(key, "schedule key")
    with _open() as sc:
        sc[key].resume()
        meta = sc[key].metadata()
    click.echo(_summary(meta))


@cli.command(short_help="Submit due occurrences (or run TARGET on them) until stopped.")
@click.argument("target", required=False)
@click.option("-I", "--include", "include", multiple=True, metavar="PATH", help="Add PATH to the import path.")
@click.option("-r", "--require", "require", multiple=True, metavar="MODULE", help="Import MODULE (or FILE.py) first.")
@click.option("--burst", is_flag=True, help="Handle what is due now, then exit.")
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0, min_open=True),
    metavar="S",
    help="Longest idle wait between ticks (seconds; config poll_interval, default 1).",
)
@click.option("--log", "log_file", metavar="FILE", help="Log to FILE (reopened on SIGUSR2).")
@sched_options(own_logging=True, long_running=True)
def run(
    target: str | None,
    include: tuple[str, ...],
    require: tuple[str, ...],
    burst: bool,
    poll_interval: float | None,
    log_file: str | None,
) -> None:
    """Run the scheduler.

    Without TARGET every due occurrence is submitted into the queue table as a task keyed
    "<schedule key>.<scheduled time>"; run perfectqueue workers to execute them. With TARGET
    (module:Name, path/file.py:Name, or Name with -r) the handler runs each occurrence itself,
    PerfectSched style. Signals: TERM/INT/QUIT stop, USR1/HUP restart, USR2 reopen logs.
    """
    state = _state()
    overrides = {"poll_interval": poll_interval, "log": log_file, "log_level": "DEBUG" if state.verbose else None}
    cfg = _settings(**overrides)  # config errors first, before importing anything
    handler = None
    if target is not None:
        from queue_core.worker.loader import load_target

        handler = load_target(target, include=list(include), require=list(require))
    elif include or require:
        raise click.UsageError("-I/--include and -r/--require need a TARGET")
    from .runner import run_scheduler

    code = run_scheduler(
        dict(cfg),
        target=handler,
        burst=burst,
        poll_interval=poll_interval,
        config_loader=lambda: dict(_settings_for(state, overrides)),
    )
    sys.exit(code or 0)


@cli.command("next", short_help="Preview the upcoming fire times of a cron expression or interval.")
@click.argument("cron_expr", metavar="CRON")
@click.option("-t", "--timezone", "tz", metavar="TZ", help="IANA timezone (default: config timezone, else UTC).")
@click.option(
    "-n",
    "count",
    type=click.IntRange(min=1, max=cronlib.MAX_COUNT),
    default=10,
    show_default=True,
    metavar="N",
    help="How many occurrences.",
)
@click.option("--from", "from_", metavar="TIME", help="Start after TIME (epoch or ISO 8601; default now).")
@click.option("--dst", type=DST_CHOICE, default="vixie", show_default=True, help="Daylight-saving policy.")
@click.option("--offset", metavar="DURATION", help="An interval's offset from the epoch (@every:1h --offset 15m).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@sched_options
def next_cmd(
    cron_expr: str, tz: str | None, count: int, from_: str | None, dst: str, offset: str | None, fmt: str
) -> None:
    """Print the next N occurrences of CRON after --from (no database needed).

    Each line: the local time with its offset, the UTC time, and a mark when DST moved it:
    "shifted (DST gap)" or "repeated (DST fold)".
    """
    if offset is not None:
        cron_expr = every.with_offset(cron_expr, offset)
    cron_expr = cronlib.validate_cron(cron_expr)
    start = parse_time(from_, "--from") if from_ is not None else time.time()
    zone = _zone(tz) if tz is not None else _config_zone()
    fires = preview.fires_after(cron_expr, start, count, zone, dst)
    if fmt == "json":
        print_json(
            [
                {"time": f.time, "local": f.local, "utc": f.utc, "shifted": f.shifted, "repeated": f.repeated}
                for f in fires
            ]
        )
        return
    for f in fires:
        click.echo(f"{f.local}  {f.utc}  {f.mark}".rstrip())


def _config_zone() -> str:
    name = _settings()["timezone"]
    try:
        return _zone(name)
    except ValueError as exc:
        raise ConfigError(f"config timezone: {exc}") from None


main = main_wrapper(cli, PROG)

__all__ = ["cli", "main", "CLIError"]

if __name__ == "__main__":
    main()
