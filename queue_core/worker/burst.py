"""When a burst worker ends: one decision for all its processors.

A processor whose claim found nothing is not done while a sibling still runs a task or holds
successes not written: what that task submits (a map's items, a workflow's next steps) becomes
due only once it is written, and a processor that ended before would leave it to one sibling.
The siblings share one :class:`BurstBoard` (process mode: a page of shared memory the supervisor
maps before it forks its children; thread mode: the same, in one process). A slot is busy from
its fork (or thread start) until its claim finds nothing, and from each claim that leased a task
until its next empty claim; the supervisor clears the slot of a child that exited, whatever its
code, so a crashed child never keeps its siblings waiting.
"""

from __future__ import annotations

import enum
import mmap

#: slots a board tracks (a slot past it, added by a reload, is counted as always idle)
BOARD_SLOTS = mmap.PAGESIZE


class AfterEmpty(enum.Enum):
    """What a processor does after a claim that leased nothing."""

    CLAIM = "claim again at once"
    WAIT = "wait for a poll (or a rate limit's window), then claim again"
    END = "end the burst"


def after_empty_claim(
    *, burst: bool, ended_rows: bool, wrote: bool, rate_limited: bool, siblings_busy: bool
) -> AfterEmpty:
    """The decision after an empty claim, from its facts. ``ended_rows``: the claim only ended
    rows (more are due behind them); ``wrote``: successes were written with the claim or since it
    began (what their after-commit hooks submit, the workflow steps they set off, may be due now);
    ``rate_limited``: a rate limit held a due task back; ``siblings_busy``: another processor of
    the worker runs a task or holds successes not written (what it submits is not due yet)."""
    if ended_rows:
        return AfterEmpty.CLAIM
    if not burst or rate_limited:
        return AfterEmpty.WAIT
    if wrote:
        return AfterEmpty.CLAIM
    return AfterEmpty.WAIT if siblings_busy else AfterEmpty.END


def holds_nothing(*, ended_rows: bool, wrote: bool, rate_limited: bool) -> bool:
    """Whether a processor whose claim was empty is idle on its board: nothing it did or saw may
    make a task due."""
    return not (ended_rows or wrote or rate_limited)


class BurstBoard:
    """Which processors of one worker are busy: one byte per slot, in memory shared across fork."""

    def __init__(self, slots: int):
        self._mem = mmap.mmap(-1, max(slots, BOARD_SLOTS))
        for slot in range(slots):
            self.mark(slot, True)  # busy until its first empty claim

    def mark(self, slot: int, busy: bool) -> None:
        if slot < len(self._mem):
            self._mem[slot] = int(busy)

    def others_busy(self, slot: int) -> bool:
        """Whether a slot other than ``slot`` is busy."""
        return self._mem.find(b"\x01", 0, slot) >= 0 or self._mem.find(b"\x01", slot + 1) >= 0
