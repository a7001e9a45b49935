"""The lease ledger: what a worker child holds, in memory its supervisor shares with it.

A child writes here, without a round trip to the database, the lease token of the claim it is
about to make, the leases of the batch it claimed (task id and lease token) and which one's
handler is running. The memory is the supervisor's (an anonymous shared mapping per processor
slot, made before the first fork), so it outlives the child: when the child dies (a handler
SIGKILLs its process, the OOM killer, the supervisor's kill of a silent child), the child forked
in its place reads what it held and gives back, uncharged, every lease but the one whose handler
was running (:func:`queue_core.rules.policy.crash_end`); that one's lease expires and counts as the
crash. A child that died between its claim's COMMIT and the record of the batch left the claim's
token: every row still leased under it goes back. A process nobody replaces in time, or a whole
host that dies, leaves every lease it held to expire: each counts one crash (docs/reliability.md).

Each write is a few bytes stored in place; an entry being rewritten when the child dies is
fenced by its lease token (a torn entry matches no lease), and the count is written last.
"""

from __future__ import annotations

import mmap
import struct
from typing import Any

#: the most leases a ledger keeps (1 MiB of address space; only the pages written are memory):
#: a batch larger than this has its rest unrecorded (charged as crashes should its process die)
CAPACITY = 65535
_HEADER = struct.Struct("<qqq")  # entries, running (an entry's index, NONE or ALL), claiming (a token, 0)
_FIELD = struct.Struct("<q")  # one field of the header: running at offset 8, claiming at 16
_ENTRY = struct.Struct("<qq")  # task id, lease token
#: no handler runs
NONE = -1
#: code runs for the whole batch (a handler class's prefetch): every entry counts as running
ALL = -2


class LeaseLedger:
    """The leases of one processor slot's child; made by the supervisor before it forks."""

    def __init__(self, capacity: int = CAPACITY):
        self.capacity = capacity
        self._mem = mmap.mmap(-1, _HEADER.size + capacity * _ENTRY.size)  # MAP_SHARED: the children's too
        self._index: dict[tuple[int, int], int] = {}  # (task id, token) -> its entry (the child's own memory)

    def claiming(self, token: int) -> None:
        """A claim leasing under ``token`` is about to run: should the child die before it records
        what that claim leased, its successor gives back every row still leased under ``token``."""
        _FIELD.pack_into(self._mem, 16, token)

    def claimed(self) -> None:
        """The claim noted by :meth:`claiming` is dealt with (what it leased was given back)."""
        _FIELD.pack_into(self._mem, 16, 0)

    def record(self, tasks: list[Any]) -> None:
        """The batch the child just leased: its ``(id, lease token)`` pairs replace the previous
        batch's (those are finished, or fenced out by their tokens), and the claim is recorded."""
        tasks = tasks[: self.capacity]
        claiming = self.unrecorded_claim() or 0
        _HEADER.pack_into(self._mem, 0, 0, NONE, claiming)  # should it die now, the claim's token tells
        for i, t in enumerate(tasks):
            _ENTRY.pack_into(self._mem, _HEADER.size + i * _ENTRY.size, t._id, t._token)
        _HEADER.pack_into(self._mem, 0, len(tasks), NONE, 0)
        self._index = {(t._id, t._token): i for i, t in enumerate(tasks)}

    def running(self, task: Any | None) -> None:
        """The task whose handler starts now (None: it ended)."""
        self._set_running(NONE if task is None else self._index.get((task._id, task._token), NONE))

    def running_all(self) -> None:
        """Code that runs for every task of the batch starts now (ended by ``running(None)``)."""
        self._set_running(ALL)

    def _set_running(self, index: int) -> None:
        _FIELD.pack_into(self._mem, 8, index)

    def read(self) -> list[tuple[int, int, bool]]:
        """What a dead child held: ``(task id, lease token, its handler was running)``."""
        count, running, _ = _HEADER.unpack_from(self._mem, 0)
        entries = [_ENTRY.unpack_from(self._mem, _HEADER.size + i * _ENTRY.size) for i in range(max(0, count))]
        return [(i, token, running == ALL or running == n) for n, (i, token) in enumerate(entries)]

    def unrecorded_claim(self) -> int | None:
        """The token of a claim whose batch was not recorded (it ran, or was about to), if any."""
        return _FIELD.unpack_from(self._mem, 16)[0] or None

    def clear(self) -> None:
        _HEADER.pack_into(self._mem, 0, 0, NONE, 0)
        self._index = {}


class NoLedger:
    """The ledger of a processor nobody replaces (thread mode, an embedded one): kept nowhere."""

    def claiming(self, token: int) -> None:
        pass

    def claimed(self) -> None:
        pass

    def record(self, tasks: list[Any]) -> None:
        pass

    def running(self, task: Any | None) -> None:
        pass

    def running_all(self) -> None:
        pass

    def read(self) -> list[tuple[int, int, bool]]:
        return []

    def unrecorded_claim(self) -> int | None:
        return None

    def clear(self) -> None:
        pass
