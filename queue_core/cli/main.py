"""``perfectqueue``: the command line of queue_core (parse, call the library, print).

Exit codes and the common options (-D/--table/-c/-e/-v) are described in
:mod:`queue_core.cli.kit.exits` and :mod:`queue_core.cli.kit.options`.
"""

from __future__ import annotations

from typing import Any

import click

from ..api.queue import STATUSES
from .failure_commands import COMMANDS as BULK_COMMANDS
from .insight_commands import COMMANDS as INSIGHT_COMMANDS
from .insight_commands import print_statistics, timeline
from .kit.exits import EXIT_CODES_HELP, CLIError
from .kit.group import PQGroup, main_wrapper
from .kit.options import common_options
from .kit.output import format_time, json_text, print_json, print_table, printable, short_error
from .kit.parsing import STRICT_INT, parse_json_object, parse_time
from .kit.settings import open_queue, settings
from .kit.worker_command import run_worker_command, worker_options
from .metrics_command import COMMANDS as METRICS_COMMANDS
from .queue_commands import COMMANDS as QUEUE_COMMANDS
from .queue_commands import QUEUE
from .tag_commands import COMMANDS as TAG_COMMANDS
from .tag_commands import TAG

PROG = "perfectqueue"
LIST_COLUMNS = [
    "key",
    "queue",
    "type",
    "user",
    "status",
    "outcome",
    "priority",
    "attempts",
    "run_at",
    "created_at",
    "tags",
    "error",
]
TIME_FIELDS = ("created_at", "run_at", "timeout", "started_at", "finished_at")


@click.group(
    name=PROG,
    cls=PQGroup,
    aliases={"cancel_request": "cancel", "force_finish": "force-finish"},
    epilog=EXIT_CODES_HELP,
)
@click.version_option(package_name="pq", prog_name=PROG, message="%(prog)s %(version)s")
def cli() -> None:
    """A task queue stored in a SQL table (SQLite, MySQL/MariaDB, PostgreSQL).

    Options such as -D URL go after the command: perfectqueue list -D sqlite:///pq.db
    """


def _plain(meta) -> dict:
    return meta.to_dict()


# -- commands -------------------------------------------------------------------------------------
@cli.command()
@click.option("--force", is_flag=True, help="Drop the table first (DELETES ALL TASKS), then create it.")
@common_options
def init(force: bool) -> None:
    """Create the queue table (does nothing if it exists)."""
    with open_queue(settings()) as q:
        q.init(force=force)
        click.echo(f"{'re-created' if force else 'initialized'} table {q.table} in {q.url}")


@cli.command(short_help="Add a task.")
@click.argument("key")
@click.argument("task_type", metavar="TYPE")
@click.argument("data", required=False, metavar="[DATA]")
@click.option("-u", "--user", metavar="USER", help="User (resource) the task belongs to, for fair sharing.")
@click.option("--max-running", type=STRICT_INT, metavar="N", help="Most tasks of this user running at once.")
@click.option("-t", "--run-at", metavar="TIME", help="Do not run before TIME (epoch seconds or ISO 8601 with offset).")
@click.option("--priority", type=STRICT_INT, default=0, show_default=True, metavar="P", help="Higher runs first.")
@click.option("--max-attempts", type=STRICT_INT, metavar="N", help="Fail the task after N failed attempts.")
@click.option("-q", "--queue", "queue_name", type=QUEUE, default="default", show_default=True, help="Its queue.")
@click.option("--tag", "tags", type=TAG, multiple=True, help="A tag of the task (repeat for more).")
@common_options
def submit(
    key: str,
    task_type: str,
    data: str | None,
    user: str | None,
    max_running: int | None,
    run_at: str | None,
    priority: int,
    max_attempts: int | None,
    queue_name: str,
    tags: tuple[str, ...],
) -> None:
    """Add a task; DATA is a JSON object (default {}, @FILE reads a file, - reads stdin)."""
    payload = parse_json_object(data) if data is not None else {}
    when = parse_time(run_at, "--run-at") if run_at is not None else None
    with open_queue(settings()) as q:
        task = q.submit(
            key,
            task_type,
            payload,
            user=user,
            max_running=max_running,
            run_at=when,
            priority=priority,
            max_attempts=max_attempts,
            queue=queue_name,
            tags=tags,
        )
        click.echo(task.key)


@cli.command("list")
@click.option("--status", type=click.Choice(STATUSES), help="Only tasks with this status.")
@click.option("--type", "task_type", metavar="T", help="Only tasks of this type.")
@click.option("--user", metavar="U", help="Only tasks of this user.")
@click.option("-q", "--queue", "queue_name", type=QUEUE, help="Only tasks of this queue.")
@click.option("--tag", type=TAG, help="Only tasks with this tag.")
@click.option("--tracked", is_flag=True, help="Only tracked tasks.")
@click.option("--limit", type=click.IntRange(min=0), metavar="N", help="At most N tasks.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="json includes every field, data too.",
)
@common_options
def list_cmd(
    status: str | None,
    task_type: str | None,
    user: str | None,
    queue_name: str | None,
    tag: str | None,
    tracked: bool,
    limit: int | None,
    fmt: str,
) -> None:
    """List tasks (oldest first)."""
    with open_queue(settings()) as q:
        filters = {"status": status, "type": task_type, "user": user, "queue": queue_name, "tag": tag}
        tasks = list(q.list(**filters, tracked=tracked, limit=limit))
    if fmt == "json":
        print_json([_plain(m) for m in tasks])
        return
    rows = [
        {
            "key": m.key,
            "queue": m.queue_name,
            "type": m.type,
            "user": m.user,
            "status": m.status,
            "outcome": m.outcome,
            "priority": m.priority,
            "attempts": m.attempts,
            "run_at": format_time(m.run_at),
            "created_at": format_time(m.created_at),
            "tags": printable(",".join(m.tags)),
            "error": short_error(m.error),
        }
        for m in tasks
    ]
    print_table(rows, LIST_COLUMNS)
    click.echo(f"{len(rows)} {'entry' if len(rows) == 1 else 'entries'}.")


def _show_value(field: str, value: Any) -> str:
    if field in TIME_FIELDS:
        return format_time(value) if value is not None else "-"
    if field == "data":
        return json_text(value, sort_keys=True)
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if field == "tags":
        return printable(", ".join(value)) if value else "-"
    text = printable(str(value))
    if field == "error":
        return text.replace("\n", "\n" + " " * 19)
    return text.replace("\n", "\\n").replace("\r", "\\r")


@cli.command()
@click.argument("key")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@common_options
def show(key: str, fmt: str) -> None:
    """Show every field of one task, then its history (submitted, claimed, retried, finished...)."""
    with open_queue(settings()) as q:
        meta = q[key].metadata()
        history = q[key].history()
    fields = _plain(meta)
    if fmt == "json":
        print_json(fields | {"history": [e.to_dict() for e in history]})
        return
    for name, value in fields.items():
        click.echo(f"{name + ':':<18} {_show_value(name, value)}")
    click.echo("history:")
    for line in timeline(history):
        click.echo(line)


@cli.command()
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("-q", "--queue", "queue_name", type=QUEUE, help="Only tasks of this queue.")
@click.option(
    "--since",
    help="Statistics of what ran since then (24h, 90m, 7d, epoch seconds, ISO time): started, "
    "succeeded, failed, retried, wait and run times per queue and type.",
)
@click.option("--type", "type_", help="With --since: only tasks of this type.")
@common_options
def stats(fmt: str, queue_name: str | None, since: str | None, type_: str | None) -> None:
    """Count tasks by status, type and outcome; with --since, the statistics of that time."""
    if since is not None:
        print_statistics(since, queue_name, type_, fmt)
        return
    if type_ is not None:
        raise CLIError("--type goes with --since (statistics of a type)", 2)
    with open_queue(settings()) as q:
        st = q.stats(queue=queue_name)
    if fmt == "json":
        print_json(st)
        return
    rows = [{"type": t, **counts, "total": sum(counts.values())} for t, counts in sorted(st["types"].items())]
    rows.append({"type": "(all)", **{s: st[s] for s in STATUSES}, "total": st["total"]})
    print_table(rows, ["type", *STATUSES, "total"])
    click.echo("outcomes: " + ", ".join(f"{o} {n}" for o, n in st["outcomes"].items()))


@cli.command("force-finish", short_help="Finish a task now, waiting or running.")
@click.argument("key")
@common_options
def force_finish(key: str) -> None:
    """Finish a task now, whether waiting or running (its worker loses the lease)."""
    with open_queue(settings()) as q:
        q[key].force_finish()
    click.echo("finished")


@cli.command()
@common_options
def cleanup() -> None:
    """Delete finished tasks whose retention time has passed."""
    with open_queue(settings()) as q:
        n = q.cleanup()
    click.echo(f"{n} {'row' if n == 1 else 'rows'} purged.")


@cli.command(short_help="Run a worker serving TARGET.")
@click.argument("target")
@worker_options
@common_options(own_logging=True, long_running=True)
def run(target: str, **options: Any) -> None:
    """Run a worker serving TARGET (module:Name, path/file.py:Name, or Name with -r)."""
    run_worker_command(target, **options)


for _command in (*QUEUE_COMMANDS, *TAG_COMMANDS, *INSIGHT_COMMANDS, *BULK_COMMANDS, *METRICS_COMMANDS):
    cli.add_command(_command)

main = main_wrapper(cli, PROG)

__all__ = ["cli", "main", "CLIError"]

if __name__ == "__main__":
    main()
