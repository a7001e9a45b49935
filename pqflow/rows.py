"""How a run is stored: the keys, groups and bookkeeping of its rows (no I/O).

Every row of a run is a row of the queue table:

=========  ====================  ===============  ==========================  =====================
row        key                   type             grp                         data
=========  ====================  ===============  ==========================  =====================
run        ``RUN``               ``wf``           ``#runs``                   the run's input
step       ``RUN#step``          ``wf.step``      ``RUN``                     ``{}``
map item   ``RUN#step#i``        ``wf.step``      ``RUN#step`` (its map row)  ``{"item": value}``
=========  ====================  ===============  ==========================  =====================

The runtime's own bookkeeping is JSON in the ``workflow`` column (:class:`RunState` for the run
row, :class:`NodeState` for step, map and item rows); results are JSON in the ``result`` column.
A step's row exists from the start of its run: ``pending`` while it waits for its parents,
waiting/running once submitted, finished at the end. A map step's row stays pending while its
items run and counts them.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from queue_core.rules import policy
from queue_core.rules.task_states import FINISHED, PENDING

SEP = "#"
#: the group of every run row: '#' can never start a run id, so no run's steps share it
RUNS_GROUP = "#runs"
#: most items one map may have (item keys end in "#<index>", at most 7 digits)
MAX_MAP_ITEMS = 1_000_000
#: longest run id: item keys "<run id>#<step>#<index>" must fit the 255-character key limit
#: (step names have at most 64 characters, indexes at most 7 digits)
MAX_RUN_ID = 255 - len(SEP) - 64 - len(SEP) - 7


def node_key(run_id: str, step: str) -> str:
    return f"{run_id}{SEP}{step}"


def item_key(run_id: str, step: str, index: int) -> str:
    return f"{run_id}{SEP}{step}{SEP}{index}"


def step_type(workflow: str, step: str) -> str:
    return f"{workflow}.{step}"


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


@dataclass
class RunState:
    """The run row's bookkeeping: how many steps are still open, and how the run stands.

    Its DAG snapshot (``dag``) is stored apart, in the row's ``definition`` column, written once:
    the counts change with every step that ends, the snapshot never does."""

    iid: int  # this run's instance: rows of an earlier run with the same id never match it
    dag: dict = field(repr=False, default_factory=dict)
    #: a digest of the DAG snapshot: runs of the same workflow version share one parsed copy
    dag_id: str = ""
    status: str = "running"
    cancel: bool = False
    total: int = 0  # steps of the run (a map counts as one step)
    open: int = 0  # steps not yet finished
    succeeded: int = 0
    failed: int = 0
    cancelled: int = 0
    finished_at: float | None = None

    def dump(self) -> str:
        return dumps({"run": {k: getattr(self, k) for k in _RUN_FIELDS}})

    @staticmethod
    def load(text: str | None, dag: dict | None = None) -> RunState | None:
        """The run's state from its ``workflow`` column; ``dag`` from its ``definition``."""
        raw = _object(text).get("run")
        if not isinstance(raw, dict) or not _typed(raw, _RUN_TYPES):
            return None
        known = {k: raw[k] for k in RunState.__dataclass_fields__ if k in raw and k != "dag"}
        return RunState(**known, dag=dag or {})


_RUN_FIELDS = [f for f in RunState.__dataclass_fields__ if f != "dag"]


@dataclass
class MapCount:
    """A map's items: how many there are and how many ended how."""

    n: int
    ok: int = 0
    failed: int = 0
    cancelled: int = 0

    @property
    def open(self) -> int:
        return self.n - self.ok - self.failed - self.cancelled


@dataclass
class NodeState:
    """The bookkeeping of a step row, a map row or a map item row."""

    run: str
    iid: int
    step: str
    index: int | None = None  # a map item's position
    #: parents that ended so far: succeeded, failed, ended at all (pending step rows)
    wait: list[int] = field(default_factory=lambda: [0, 0, 0])
    failures: int = 0  # how often the step function raised (retries used)
    map: MapCount | None = None

    def own_key(self) -> str:
        """The key the step or item row of this bookkeeping must have."""
        return node_key(self.run, self.step) if self.index is None else item_key(self.run, self.step, self.index)

    def dump(self) -> str:
        out = {"run": self.run, "iid": self.iid, "step": self.step, "wait": self.wait, "failures": self.failures}
        if self.index is not None:
            out["index"] = self.index
        if self.map is not None:
            out["map"] = {
                "n": self.map.n,
                "ok": self.map.ok,
                "failed": self.map.failed,
                "cancelled": self.map.cancelled,
            }
        return dumps({"node": out})

    @staticmethod
    def load(text: str | None, *, cached: bool = True) -> NodeState | None:
        """``cached=False`` for rows read once (a map's items read by its join)."""
        small = text is None or len(text) <= 4096
        known = _node_fields(text) if cached and small else _node_fields.__wrapped__(text)
        if known is None:
            return None
        counts = known.get("map")
        return NodeState(
            **{
                **known,
                "wait": list(known.get("wait", (0, 0, 0))),
                "map": None if counts is None else MapCount(**counts),
            }
        )


@functools.lru_cache(maxsize=4096)
def _node_fields(text: str | None) -> dict | None:
    """The checked fields of a row's node bookkeeping (shared: never mutate; :meth:`NodeState.load`
    copies). Cached: a worker reads the same step row when it leases it, runs it and decides."""
    raw = _object(text).get("node")
    if not isinstance(raw, dict) or not _typed(raw, _NODE_TYPES):
        return None
    known = {k: raw[k] for k in NodeState.__dataclass_fields__ if k in raw}
    counts = known.get("map")
    if counts is not None:
        if not isinstance(counts, dict) or not _typed(counts, _MAP_TYPES):
            return None
        known["map"] = {k: counts[k] for k in _MAP_TYPES if k in counts}
    wait = known.get("wait", [0, 0, 0])
    if not (isinstance(wait, list) and len(wait) == 3 and all(_is_int(x) for x in wait)):
        return None
    return known


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _typed(raw: dict, types: dict[str, tuple]) -> bool:
    """Required keys (types[k][1]) present, every known key of its type: rows may be written by
    hand, and a row that is not ours must never be mistaken for one."""
    for key, (check, required) in types.items():
        if key in raw:
            if not check(raw[key]):
                return False
        elif required:
            return False
    return True


def _opt_int(x: Any) -> bool:
    return x is None or _is_int(x)


_STR = (lambda x: isinstance(x, str), True)
_NODE_TYPES = {
    "run": _STR,
    "iid": (_is_int, True),
    "step": _STR,
    "index": (_opt_int, False),
    "failures": (_is_int, False),
    "wait": (lambda x: isinstance(x, list), False),
    "map": (lambda x: x is None or isinstance(x, dict), False),
}
_MAP_TYPES = {"n": (_is_int, True), "ok": (_is_int, False), "failed": (_is_int, False), "cancelled": (_is_int, False)}
_RUN_TYPES = {
    "iid": (_is_int, True),
    "status": _STR,
    "cancel": (lambda x: isinstance(x, bool), False),
    **{k: (_is_int, False) for k in ("total", "open", "succeeded", "failed", "cancelled")},
    "dag_id": (lambda x: isinstance(x, str), False),
    "finished_at": (lambda x: x is None or isinstance(x, (int, float)), False),
}


def _object(text: str | None) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def digest(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:20]


def item_index(key: str) -> int:
    return int(key.rsplit(SEP, 1)[1])


def status_of_row(row: dict, now: float) -> str:
    """A step's status from its row: pending, waiting, running or how it ended."""
    if row["state"] == FINISHED:
        return {"success": "succeeded", "failure": "failed", "cancelled": "cancelled", "skipped": "skipped"}.get(
            row["outcome"] or "failure", "failed"
        )
    if row["state"] == PENDING:
        return "pending"
    return "running" if policy.lease_held(row["leased"], row["timeout"], now) else "waiting"


OUTCOME_OF = {"succeeded": "success", "failed": "failure", "cancelled": "cancelled", "skipped": "skipped"}
