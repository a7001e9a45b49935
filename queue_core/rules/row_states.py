"""The values of a task row's ``state`` column: written by the store, read by pqflow's engine.

What each other column means in each state is drawn in docs/state-machines.md.
"""

from __future__ import annotations

#: waiting (due at ``timeout``) or running (leased until ``timeout``)
LIVE = 0
#: done, with an ``outcome``; purged after ``timeout``
FINISHED = 1
#: waits for an event, not a time (a workflow step whose parents are not done): never claimed
PENDING = 2
