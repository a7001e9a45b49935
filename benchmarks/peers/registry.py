"""The peers, in the order a run measures them."""

from __future__ import annotations

from .base import Peer
from .celery_chord import CeleryChord, CeleryChordMap
from .celery_sqla import CelerySqla
from .huey_sqlite import HueySqlite
from .procrastinate_pg import Procrastinate
from .rq_redis import RQ

PEERS: tuple[type[Peer], ...] = (HueySqlite, Procrastinate, CelerySqla, RQ, CeleryChord, CeleryChordMap)
NAMES = tuple(p.name for p in PEERS)


def select(names: list[str] | None, sizes=None) -> list[Peer]:
    """The peers named (all: None); with ``sizes``, each as the peers it stands for (its variants)."""
    unknown = [n for n in names or () if n not in NAMES]
    if unknown:
        raise ValueError(f"unknown peer {', '.join(unknown)}; choose from {', '.join(NAMES)}")
    chosen = [cls() for cls in PEERS if names is None or cls.name in names]
    return chosen if sizes is None else [v for p in chosen for v in p.variants(sizes)]


__all__ = ["NAMES", "PEERS", "Peer", "select"]
