"""``perfectqueue queues|pause|resume|limit|move``: named queues on the command line (parse, call
the library, print). Registered on the ``perfectqueue`` group by :mod:`queue_core.cli.main`."""

from __future__ import annotations

from typing import Any

import click

from ..api.queue_controls import RATE_KEYS, QueueInfo
from ..errors import ValidationError
from ..rules.validate import RATE_EXAMPLE, check_queue, check_rate
from .kit.options import common_options
from .kit.output import print_json, print_table
from .kit.parsing import Checked
from .kit.settings import open_queue, settings

QUEUE_COLUMNS = ["queue", "state", "waiting", "running", "pending", "finished", "oldest_waiting", "concurrency", "rate"]


class Rate(click.ParamType):
    """A rate limit ``N/W`` (exit 2 with an example of the right form when it is not one)."""

    name = "N/WINDOW"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[int, float]:
        if isinstance(value, tuple):
            return value
        try:
            return check_rate(value)
        except ValidationError:
            self.fail(f"{value!r} is not a rate: {RATE_EXAMPLE}", param, ctx)


QUEUE = Checked("QUEUE", check_queue)


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.1f}s"


def _limits(s: Any) -> tuple[str, str]:
    """The concurrency and rate limit of a queue's settings (a QueueInfo or QueueSettings) as shown."""
    concurrency = str(s.concurrency) if s.concurrency is not None else "-"
    if s.rate_limit is None or s.rate_window is None:
        return concurrency, "-"
    return concurrency, f"{s.rate_limit}/{s.rate_window:g}s" + (f" per {s.rate_key}" if s.rate_key else "")


def _row(info: QueueInfo) -> dict:
    concurrency, rate = _limits(info)
    return {
        "queue": info.name,
        "state": "paused" if info.paused else "running",
        "waiting": info.waiting,
        "running": info.running,
        "pending": info.pending,
        "finished": info.finished,
        "oldest_waiting": _age(info.oldest_waiting_age),
        "concurrency": concurrency,
        "rate": rate,
    }


@click.command("queues")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@common_options
def queues_cmd(fmt: str) -> None:
    """List every queue: paused or running, its tasks by status, its limits."""
    with open_queue(settings()) as q:
        found = q.queues()
    if fmt == "json":
        print_json([i.to_dict() for i in found])
        return
    print_table([_row(i) for i in found], QUEUE_COLUMNS)
    click.echo(f"{len(found)} {'queue' if len(found) == 1 else 'queues'}.")


@click.command()
@click.argument("queue", type=QUEUE)
@common_options
def pause(queue: str) -> None:
    """Stop handing out QUEUE's tasks (on every host, from the next claim on); running ones finish."""
    _set_paused(queue, True)


@click.command()
@click.argument("queue", type=QUEUE)
@common_options
def resume(queue: str) -> None:
    """Hand out a paused QUEUE's tasks again."""
    _set_paused(queue, False)


def _set_paused(queue: str, paused: bool) -> None:
    with open_queue(settings()) as q:
        (q.pause if paused else q.resume)(queue)
    click.echo(f"{'paused' if paused else 'resumed'} {queue}")


@click.command(short_help="Limit a queue's concurrency or start rate.")
@click.argument("queue", type=QUEUE)
@click.option("--concurrency", type=click.IntRange(min=1), metavar="N", help="At most N of its tasks run at once.")
@click.option("--rate", type=Rate(), metavar="N/WINDOW", help="At most N starts in any WINDOW (100/60s, 10/s, 5/m).")
@click.option(
    "--rate-key",
    type=click.Choice([*RATE_KEYS, "queue"]),
    help="Keep the rate per user, per type, or for the whole queue (the default).",
)
@click.option("--no-concurrency", is_flag=True, help="Lift the concurrency limit.")
@click.option("--no-rate", is_flag=True, help="Lift the rate limit.")
@common_options
def limit(queue: str, concurrency, rate, rate_key, no_concurrency: bool, no_rate: bool) -> None:
    """Limit QUEUE across all workers and hosts; options not given keep their current value."""
    if (concurrency and no_concurrency) or (rate and no_rate):
        raise click.UsageError("give a limit or lift it, not both")
    with open_queue(settings()) as q:
        now = q.queue_settings(queue)
        keep_rate = (now.rate_limit, now.rate_window) if now.rate_limit else None
        if rate_key and not (rate or (keep_rate and not no_rate)):
            raise click.UsageError("--rate-key needs a rate (for example: --rate 10/s --rate-key user)")
        new = q.limit(
            queue,
            concurrency=None if no_concurrency else concurrency or now.concurrency,
            rate=None if no_rate else rate or keep_rate,
            rate_key=None if no_rate or rate_key == "queue" else rate_key or now.rate_key,
        )
    concurrency, rate = _limits(new)
    click.echo(f"{queue}: concurrency {concurrency}, rate {rate}")


@click.command(short_help="Move a waiting task to another queue.")
@click.argument("key")
@click.argument("queue", type=QUEUE)
@common_options
def move(key: str, queue: str) -> None:
    """Move the waiting task KEY to QUEUE (a running task is refused)."""
    with open_queue(settings()) as q:
        q.move(key, queue)
    click.echo(f"moved {key} to {queue}")


COMMANDS = (queues_cmd, pause, resume, limit, move)
