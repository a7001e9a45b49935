"""Finishes a handler leaves to the worker, written with the worker's next batched commit.

A plain task's success is written by the worker together with its next claim (one commit for
a batch). A handler whose outcome needs more writes than a plain finish — a workflow step, whose
completion decides its successors — can take part in the same batch: it sets
:attr:`AcquiredTask.deferred` to a :class:`Deferred` instead of finishing, and the worker writes
all deferred finishes of a batch that share a ``writer`` with one call of that writer, inside
the batch's transaction (each writer in a savepoint of its own, so one that fails leaves the
rest written). The writer fences its writes by lease token and returns the tasks it found lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from ..errors import TaskError

log = logging.getLogger("queue_core.worker")

#: ``writer(tx, tasks) -> the tasks whose lease was lost`` (nothing written for those)
Writer = Callable[[Any, list[Any]], list[Any]]


@dataclass
class Deferred:
    """What a handler leaves for the worker to write."""

    writer: Writer
    payload: Any = None
    #: called once the batch committed and this task's finish is written (hooks, logs)
    committed: Callable[[], None] | None = None


def split(tasks: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """The plain successes and the deferred finishes of a batch."""
    plain = [t for t in tasks if t.deferred is None]
    return plain, [t for t in tasks if t.deferred is not None]


def write(
    tx: Any, tasks: Sequence[Any], isolated: Callable[[Callable[[], None]], Exception | None]
) -> tuple[list[Any], list[Any]]:
    """Write deferred finishes inside ``tx``; returns (lost, failed) tasks.

    ``lost``: their lease was taken over. ``failed``: their writer raised (its savepoint rolled
    back; their leases expire and they run again). A database error aborts the whole
    transaction (retried by the caller as a whole). ``isolated(fn)`` runs ``fn`` in a savepoint
    and returns what it raised."""
    groups: dict[Writer, list[Any]] = {}
    for t in tasks:
        groups.setdefault(t.deferred.writer, []).append(t)
    lost: list[Any] = []
    failed: list[Any] = []
    for writer, group in groups.items():
        found: list[Any] = []
        error = isolated(partial(_write_group, writer, tx, group, found))
        if error is None:
            lost += found
        else:
            if not isinstance(error, TaskError):
                log.error("finish writer %r raised", writer, exc_info=error)
            log.error("could not write %d finishes (they will run again): %s", len(group), error)
            failed += group
    return lost, failed


def _write_group(writer: Writer, tx: Any, group: list[Any], lost: list[Any]) -> None:
    """Write ``group`` with its ``writer``; the tasks it found lost go to ``lost``."""
    lost.extend(writer(tx, group))


def after_commit(tasks: Sequence[Any]) -> None:
    for t in tasks:
        if t.deferred.committed is not None and not t.lost:
            try:
                t.deferred.committed()
            except Exception:  # noqa: BLE001 - the finish is committed; a callback cannot undo it
                log.exception("callback after the finish of task=%s raised", t.key)
