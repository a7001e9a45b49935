"""``perfectqueue tag|untag|track|untrack``: tags and tracking on the command line (parse, call
the library, print). Registered on the ``perfectqueue`` group by :mod:`queue_core.cli.main`, which
also takes ``--tag`` on ``submit`` and ``--tag``/``--tracked`` on ``list``."""

from __future__ import annotations

import click

from ..rules.validate import check_tag
from .kit.options import common_options
from .kit.parsing import Checked
from .kit.settings import open_queue, settings

TAG = Checked("TAG", check_tag)


def _shown(tags: list[str]) -> str:
    return ", ".join(tags) if tags else "(no tags)"


@click.command(short_help="Add tags to a task.")
@click.argument("key")
@click.argument("tags", nargs=-1, required=True, type=TAG)
@common_options
def tag(key: str, tags: tuple[str, ...]) -> None:
    """Add TAGS to the task KEY (in any state); prints its tags after."""
    with open_queue(settings()) as q:
        click.echo(_shown(q[key].tag(*tags)))


@click.command(short_help="Remove tags from a task.")
@click.argument("key")
@click.argument("tags", nargs=-1, required=True, type=TAG)
@common_options
def untag(key: str, tags: tuple[str, ...]) -> None:
    """Remove TAGS from the task KEY; prints its tags after."""
    with open_queue(settings()) as q:
        click.echo(_shown(q[key].untag(*tags)))


@click.command(short_help="Track a task (list --tracked).")
@click.argument("key")
@common_options
def track(key: str) -> None:
    """Track the task KEY: list --tracked lists it."""
    with open_queue(settings()) as q:
        q[key].track()
    click.echo("tracked")


@click.command(short_help="Stop tracking a task.")
@click.argument("key")
@common_options
def untrack(key: str) -> None:
    """Stop tracking the task KEY."""
    with open_queue(settings()) as q:
        q[key].untrack()
    click.echo("untracked")


COMMANDS = (tag, untag, track, untrack)
