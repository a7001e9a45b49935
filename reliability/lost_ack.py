"""Processes whose COMMIT acknowledgements get lost: ``lost_ack_site/sitecustomize.py`` injected
through their environment.

:func:`env` gives the variables under which a process's store transactions sometimes commit on
the server and then see the connection drop (a transient error: the store runs the whole
transaction again); :func:`faults` reads which transactions that happened to. The product is
not changed: the fault sits in SQLAlchemy's ``do_commit`` of those processes only.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SITE = Path(__file__).with_name("lost_ack_site")
#: the text of every injected error (the same in ``lost_ack_site/sitecustomize.py``)
MESSAGE = "lost connection after COMMIT (injected by reliability.lost_ack)"


def env(rate: float, log: Path, seed: int | str = 1) -> dict:
    """Environment variables under which the first COMMIT of each kind of store transaction that
    changed rows, and then a ``rate`` of them, lose their acknowledgement; each fault is a line of
    ``log``."""
    return {
        "PQ_LOST_ACK": repr(float(rate)),
        "PQ_LOST_ACK_SEED": str(seed),
        "PQ_LOST_ACK_LOG": str(log),
        "PYTHONPATH": f"{ROOT}{os.pathsep}{SITE}",
    }


def faults(log: Path) -> Counter:
    """Faults injected per kind of transaction (``poll``, ``finish``, ``submit``, ``tick`` ...)."""
    p = Path(log)
    if not p.exists():
        return Counter()
    return Counter(line.split(" ", 1)[1] for line in p.read_text().splitlines() if " " in line)
