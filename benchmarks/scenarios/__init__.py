"""The pq scenarios of issues 5, 11, 13, 14 and 16, in the order a run measures them."""

from __future__ import annotations

from .base import Context, Sample, Scenario
from .dashboard import Dashboard
from .drain import Drain
from .enqueue import Enqueue
from .fairness import Fairness
from .idle import IdleLoad
from .latency import Latency
from .maps import Maps
from .poll import PollCost
from .queues import NamedQueues
from .raw import Raw
from .scheduler import Scheduler
from .startup import Startup
from .workflow import Workflow

#: run order: the raw limit first; drain before workflow (the workflow overhead uses it)
SCENARIOS: tuple[type[Scenario], ...] = (
    Raw,
    Enqueue,
    Drain,
    Latency,
    PollCost,
    Fairness,
    Scheduler,
    Workflow,
    Maps,
    IdleLoad,
    Startup,
    NamedQueues,
    Dashboard,
)

#: every results section, in report order, with its title
TITLES: dict[str, str] = {
    name: title for cls in SCENARIOS for name, title in ((cls.name, cls.title), *cls.also.items())
}
SECTIONS = tuple(TITLES)


def select(names: list[str] | None) -> list[type[Scenario]]:
    """The scenario classes named (a section such as ``memory`` selects its scenario)."""
    if not names:
        return list(SCENARIOS)
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise ValueError(f"unknown scenario {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    return [cls for cls in SCENARIOS if cls.name in names or set(cls.also) & set(names)]


__all__ = ["Context", "SCENARIOS", "SECTIONS", "Sample", "Scenario", "TITLES", "select"]
