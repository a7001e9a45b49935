"""``perfectqueue failures``, ``retry`` and ``cancel``: failed tasks grouped, and what an
operator does to many tasks at once, on the command line (parse, call the library, print).
Registered on the ``perfectqueue`` group by :mod:`queue_core.cli.main`."""

from __future__ import annotations

import click

from .kit.exits import CLIError
from .kit.options import common_options
from .kit.output import format_time, print_json, print_table
from .kit.settings import open_queue, settings
from .queue_commands import QUEUE
from .tag_commands import TAG

FAILURE_COLUMNS = ["queue", "type", "error_class", "count", "first_seen", "last_seen", "sample_key", "message"]


def _filters(f):
    f = click.option("-q", "--queue", "queue_name", type=QUEUE, help="Only tasks of this queue.")(f)
    f = click.option("--type", "type_", help="Only tasks of this type.")(f)
    return click.option("--tag", type=TAG, help="Only tasks with this tag.")(f)


@click.command(short_help="Group failed tasks by queue, type and error class.")
@_filters
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@common_options
def failures(queue_name: str | None, type_: str | None, tag: str | None, fmt: str) -> None:
    """The tasks that ended as failure, grouped by queue, type and the class their error names:
    how many, first and last seen, a sample key and the latest error's first line."""
    with open_queue(settings()) as q:
        groups = q.failures(queue=queue_name, type=type_, tag=tag)
    if fmt == "json":
        print_json([g.to_dict() for g in groups])
        return
    rows = [
        g.to_dict() | {"first_seen": format_time(g.first_seen), "last_seen": format_time(g.last_seen)} for g in groups
    ]
    print_table(rows, FAILURE_COLUMNS)
    total = sum(g.count for g in groups)
    click.echo(
        f"{total} failed {'task' if total == 1 else 'tasks'} in {len(groups)} "
        f"{'group' if len(groups) == 1 else 'groups'}."
    )


@click.command(short_help="Run failed tasks again (--failed, with filters).")
@click.option("--failed", is_flag=True, help="Every failed task matching the filters (required).")
@_filters
@click.option("--error", "error_class", help="Only tasks whose error names this class (as failures shows it).")
@click.option("--dry-run", is_flag=True, help="Say how many would run again; change nothing.")
@common_options
def retry(
    failed: bool, queue_name: str | None, type_: str | None, tag: str | None, error_class: str | None, dry_run: bool
) -> None:
    """Run again, with fresh attempts and due now, the plain tasks that ended as failure and match
    the filters (in batches; run twice, it requeues each task once). Steps of workflow runs are
    left to pqflow retry."""
    if not failed:
        raise CLIError("say which tasks: retry --failed [--queue Q] [--type T] [--error CLASS] [--tag TAG]", 2)
    with open_queue(settings()) as q:
        n = q.retry_failed(queue=queue_name, type=type_, error=error_class, tag=tag, dry_run=dry_run)
    click.echo(f"{'would requeue' if dry_run else 'requeued'} {n} {'task' if n == 1 else 'tasks'}")


@click.command(short_help="Cancel a task, or every waiting task matching filters.")
@click.argument("key", required=False)
@click.option("--waiting", is_flag=True, help="Every waiting task matching the filters, instead of KEY.")
@_filters
@click.option("--dry-run", is_flag=True, help="With --waiting: say how many would be cancelled; change nothing.")
@common_options
def cancel(
    key: str | None, waiting: bool, queue_name: str | None, type_: str | None, tag: str | None, dry_run: bool
) -> None:
    """Cancel the task KEY: a waiting one finishes now, a running one is asked to stop. With
    --waiting instead: cancel every plain task nobody runs that matches the filters."""
    if (key is None) == (not waiting):
        raise CLIError("give a KEY, or --waiting with filters (not both)", 2)
    with open_queue(settings()) as q:
        if key is not None:
            click.echo(q[key].cancel_request())
            return
        n = q.cancel_waiting(queue=queue_name, type=type_, tag=tag, dry_run=dry_run)
    click.echo(f"{'would cancel' if dry_run else 'cancelled'} {n} {'task' if n == 1 else 'tasks'}")


COMMANDS = (failures, retry, cancel)
