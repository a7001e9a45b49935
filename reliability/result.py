"""The outcome of one scenario on one database: its figures and the guarantees it found broken."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

#: at most this many examples are kept per kind of violation
EXAMPLES = 8


@dataclass
class Result:
    scenario: str
    backend: str
    #: units checked: tasks, occurrences or workflow steps
    tasks: int = 0
    #: processes SIGKILLed (workers, schedulers, database servers) or restart signals sent
    kills: int = 0
    #: processes or servers restarted after a kill or signal
    restarts: int = 0
    #: effects that happened more than once: a task finished twice, a re-execution no cut lease
    #: explains, a second task for one occurrence, a workflow step succeeded twice
    duplicates: int = 0
    #: effects that never happened: an acknowledged submission missing, a task not finished with
    #: outcome success, an occurrence without its task, a run not succeeded
    losses: int = 0
    #: worst time from a fault until the work it hit was done again (s)
    recover_s: float | None = None
    duration_s: float = 0.0
    figures: dict = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    #: when the scenario ended (ISO time; stamped by the runner, else when the results are saved)
    measured: str | None = None
    _counts: dict = field(default_factory=dict, repr=False)

    @property
    def ok(self) -> bool:
        return not self.failures

    def _note(self, kind: str, message: str) -> None:
        n = self._counts.get(kind, 0) + 1
        self._counts[kind] = n
        if n <= EXAMPLES:
            self.failures.append(f"{kind}: {message}")
        elif n == EXAMPLES + 1:
            self.failures.append(f"{kind}: ... (more)")

    def loss(self, message: str) -> None:
        self.losses += 1
        self._note("loss", message)

    def duplicate(self, message: str) -> None:
        self.duplicates += 1
        self._note("duplicate", message)

    def fail(self, message: str) -> None:
        """A broken guarantee that is neither a loss nor a duplicate (a cap exceeded, an error
        that reached a user, a resource that kept growing)."""
        self._note("violation", message)

    def recovered(self, seconds: float | None) -> None:
        if seconds is not None:
            self.recover_s = round(max(self.recover_s or 0.0, seconds), 2)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("_counts")
        d["ok"] = self.ok
        return d

    def summary(self) -> str:
        rec = "-" if self.recover_s is None else f"{self.recover_s:.1f}s"
        return (
            f"{self.scenario:<18} {self.backend:<9} {'PASS' if self.ok else 'FAIL'}  tasks={self.tasks} "
            f"kills={self.kills} restarts={self.restarts} duplicates={self.duplicates} "
            f"losses={self.losses} recover={rec} duration={self.duration_s:.1f}s"
        )
