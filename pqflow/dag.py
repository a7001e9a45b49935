"""Workflow definitions: a named DAG of step functions, validated and snapshotted.

A :class:`Workflow` collects steps with the :meth:`Workflow.step` decorator. The
decorator returns the original function unchanged (it stays a plain callable, easy to
unit test) after attaching ``fn.__pqflow_step__`` (a :class:`StepDef`).

Anything that can be checked when a step is declared (names, trigger, duplicates,
dependencies given as functions) is refused at once; what needs the whole graph
(unknown step names given as strings, cycles, parameters fed by ancestors) is
checked by :meth:`Workflow.validate`, which :meth:`Workflow.snapshot` and
:meth:`Workflow.graph` call.

:meth:`Workflow.snapshot` returns the self-contained, JSON-serialisable form stored
with each run; :func:`snapshot_graph` rebuilds a graph from it.
"""

from __future__ import annotations

import difflib
import inspect
import math
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import networkx as nx

from pqflow.errors import UnknownWorkflowError, WorkflowDefinitionError
from pqflow.runs import Run, start_run
from queue_core.errors import ValidationError
from queue_core.rules.validate import check_queue, check_tags

__all__ = [
    "DEFAULT_TRIGGER",
    "SNAPSHOT_FORMAT",
    "TRIGGERS",
    "StepDef",
    "Workflow",
    "get_workflow",
    "registered_workflows",
    "snapshot_graph",
]

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$"
_NAME_RE = re.compile(NAME_PATTERN)
_NAME_RULE = "1 to 64 characters: a letter or '_' followed by letters, digits, '_' or '-'"

#: Every trigger, with what it waits for.
TRIGGERS: dict[str, str] = {
    "all_success": "every parent succeeded",
    "all_done": "every parent finished (succeeded, failed, skipped or cancelled)",
    "all_failed": "every parent failed",
    "one_failed": "at least one parent failed (fires without waiting for the others)",
    "one_success": "at least one parent succeeded (fires without waiting for the others)",
    "none_failed": "every parent finished and none failed (skipped is fine)",
}
DEFAULT_TRIGGER = "all_success"
#: Triggers that can only hold on some parent's outcome, so they make no sense on a root step.
_NEEDS_PARENTS = frozenset({"all_failed", "one_failed", "one_success"})
SNAPSHOT_FORMAT = 1

CallSite = tuple[str, int]

_registry: dict[str, Workflow] = {}


def _call_site(frame: FrameType | None) -> CallSite:
    if frame is None:  # pragma: no cover - only on interpreters without frames
        return ("<unknown>", 0)
    return (frame.f_code.co_filename, frame.f_lineno)


def _check_name(kind: str, name: object) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        extra = " (no dots: a step's task type is '<workflow>.<step>')" if kind == "workflow" else ""
        raise WorkflowDefinitionError(f"invalid {kind} name {name!r}: must be {_NAME_RULE}{extra}")
    return name


def _check_queue(queue: object) -> str:
    try:
        return check_queue(queue)
    except ValidationError as exc:
        raise WorkflowDefinitionError(str(exc)) from None


def _check_tags(tags: object) -> tuple[str, ...]:
    try:
        return check_tags(tags)
    except ValidationError as exc:
        raise WorkflowDefinitionError(str(exc)) from None


def _check_trigger(trigger: object) -> str:
    if trigger not in TRIGGERS:
        raise WorkflowDefinitionError(f"unknown trigger {trigger!r}; valid triggers: {', '.join(TRIGGERS)}")
    return trigger


def _check_retries(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise WorkflowDefinitionError(f"{what} must be an integer >= 0, not {value!r}")
    return value


def _check_seconds(what: str, value: object, *, positive: bool = False) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
        or (positive and value == 0)
    ):
        rule = "> 0" if positive else ">= 0"
        raise WorkflowDefinitionError(f"{what} must be a finite number of seconds {rule}, not {value!r}")
    return value


def _hint(name: str, candidates: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


@dataclass(eq=False)
class StepDef:
    """One declared step. ``inputs`` is filled in by :meth:`Workflow.validate`."""

    name: str
    fn: Callable[..., Any] = field(repr=False)
    workflow: Workflow = field(repr=False)
    after: tuple[str, ...]
    trigger: str
    retries: int | None
    retry_wait: float | None
    defined_at: CallSite = field(repr=False)
    inputs: tuple[str, ...] = ()
    #: the step whose result (a JSON list) this step maps over: one task per item
    map: str | None = None
    #: how many items of this map may run at once across all workers (None: no cap)
    max_parallel: int | None = None
    #: a map whose items failed still succeeds; downstream receives None for a failed item
    allow_failed_items: bool = False
    #: the queue its tasks go to (None: its workflow's)
    queue: str | None = None
    #: tags its tasks carry besides its workflow's
    tags: tuple[str, ...] = ()

    @property
    def effective_retries(self) -> int:
        """Retries of this step, falling back to the workflow's default."""
        return self.workflow.retries if self.retries is None else self.retries

    @property
    def effective_retry_wait(self) -> float:
        """Seconds between retries of this step, falling back to the workflow's default."""
        return self.workflow.retry_wait if self.retry_wait is None else self.retry_wait

    @property
    def effective_queue(self) -> str:
        """The queue of this step's tasks, falling back to the workflow's."""
        return self.workflow.queue if self.queue is None else self.queue

    @property
    def effective_tags(self) -> tuple[str, ...]:
        """The tags of this step's tasks: its workflow's and its own."""
        return _check_tags((*self.workflow.tags, *self.tags))


class Workflow:
    """A named DAG of steps. The name is global: see :func:`get_workflow`."""

    def __init__(
        self,
        name: str,
        *,
        retries: int = 0,
        retry_wait: float = 10,
        retention: float = 7 * 86400,
        priority: int = 0,
        queue: str = "default",
        tags: Any = (),
    ) -> None:
        self._name = _check_name("workflow", name)
        self._retries = _check_retries("retries", retries)
        self._retry_wait = _check_seconds("retry_wait", retry_wait)
        self._retention = _check_seconds("retention", retention, positive=True)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise WorkflowDefinitionError(f"priority must be an integer, not {priority!r}")
        self._priority = priority
        self._queue = _check_queue(queue)
        self._tags = _check_tags(tags)
        self._steps: dict[str, StepDef] = {}
        self._version = 0
        self._validated_version = -1
        self.defined_at = _call_site(self._outer_frame())
        self._register()

    def _outer_frame(self) -> FrameType | None:
        # Skip __init__ frames of subclasses so the call site is the user's line.
        frame: FrameType | None = sys._getframe(1)
        while frame is not None and frame.f_code.co_name == "__init__" and frame.f_locals.get("self") is self:
            frame = frame.f_back
        return frame

    def _register(self) -> None:
        old = _registry.get(self._name)
        if old is not None and old is not self and old.defined_at != self.defined_at:
            file, line = old.defined_at
            raise WorkflowDefinitionError(f"workflow name {self._name!r} is already defined at {file}:{line}")
        _registry[self._name] = self

    # -- read-only settings ---------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def retries(self) -> int:
        return self._retries

    @property
    def retry_wait(self) -> float:
        return self._retry_wait

    @property
    def retention(self) -> float:
        return self._retention

    @property
    def queue(self) -> str:
        """The queue of its run row and of the steps that name none."""
        return self._queue

    @property
    def tags(self) -> tuple[str, ...]:
        """The tags of its run row and of every step's tasks."""
        return self._tags

    @property
    def priority(self) -> int:
        return self._priority

    @property
    def steps(self) -> dict[str, StepDef]:
        """The steps, in definition order (a copy)."""
        return dict(self._steps)

    def __repr__(self) -> str:
        return f"Workflow({self._name!r}, steps={list(self._steps)})"

    def __contains__(self, step: object) -> bool:
        return step in self._steps

    # -- declaring steps --------------------------------------------------------------
    def step(
        self,
        after: Any = None,
        *,
        name: str | None = None,
        retries: int | None = None,
        retry_wait: float | None = None,
        trigger: str = DEFAULT_TRIGGER,
        map: Any = None,
        max_parallel: int | None = None,
        allow_failed_items: bool = False,
        queue: str | None = None,
        tags: Any = (),
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator declaring a step; returns the function unchanged.

        ``after`` is None, a step function or step name, or a list/tuple of those.
        Names may refer to steps declared later. ``map``: a step (function or name) whose
        result is a JSON list; this step then runs once per item (``fn(ctx, item, ...)``),
        at most ``max_parallel`` at once, and its downstream receives the list of results.
        """
        site = _call_site(sys._getframe(1))
        mapped = self._resolve_after(map)[0] if map is not None else None
        parents = self._resolve_after(after)
        if mapped is not None and mapped not in parents:
            parents = (mapped, *parents)
        self._check_map_options(mapped, max_parallel, allow_failed_items)
        step_tags = _check_step_options(trigger, retries, retry_wait, name, queue, tags)

        def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
            step_name = self._check_step_function(fn, name, site)
            sd = StepDef(
                step_name,
                fn,
                self,
                parents,
                trigger,
                retries,
                retry_wait,
                site,
                map=mapped,
                max_parallel=max_parallel,
                allow_failed_items=allow_failed_items,
                queue=queue,
                tags=step_tags,
            )
            fn.__pqflow_step__ = sd  # type: ignore[attr-defined]
            self._steps[step_name] = sd
            self._version += 1
            return fn

        return decorate

    def _check_map_options(self, mapped: str | None, max_parallel: Any, allow_failed_items: Any) -> None:
        if max_parallel is not None and (
            isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1
        ):
            raise WorkflowDefinitionError(f"max_parallel must be an integer >= 1, not {max_parallel!r}")
        if not isinstance(allow_failed_items, bool):
            raise WorkflowDefinitionError(f"allow_failed_items must be True or False, not {allow_failed_items!r}")
        if mapped is None and (max_parallel is not None or allow_failed_items):
            raise WorkflowDefinitionError("max_parallel and allow_failed_items apply to map steps only (map=...)")

    def _check_step_function(self, fn: Any, name: str | None, site: tuple[str, int]) -> str:
        """The name of the step ``fn`` declared at ``site`` (``name``, else the function's),
        refused if it is not callable or is already another step."""
        if not callable(fn):
            raise WorkflowDefinitionError(f"workflow {self._name!r}: a step must be callable, not {fn!r}")
        step_name = _check_name("step", name if name is not None else getattr(fn, "__name__", None))
        self._check_context_param(step_name, fn)
        existing = self._steps.get(step_name)
        if existing is not None and existing.defined_at != site:
            file, line = existing.defined_at
            raise WorkflowDefinitionError(
                f"workflow {self._name!r}: step {step_name!r} is already defined at {file}:{line}"
            )
        previous = getattr(fn, "__pqflow_step__", None)
        if isinstance(previous, StepDef) and previous.defined_at != site:
            raise WorkflowDefinitionError(
                f"function {getattr(fn, '__qualname__', fn)!r} is already step {previous.name!r} "
                f"of workflow {previous.workflow.name!r}; wrap it in a new function to reuse it"
            )
        return step_name

    def _resolve_after(self, after: Any) -> tuple[str, ...]:
        items = [] if after is None else list(after) if isinstance(after, (list, tuple)) else [after]
        names: list[str] = []
        for item in items:
            if isinstance(item, str):
                names.append(_check_name("step", item))
                continue
            sd = getattr(item, "__pqflow_step__", None)
            label = getattr(item, "__qualname__", None) or repr(item)
            if not isinstance(sd, StepDef):
                hint = " (write @wf.step() with parentheses)" if callable(item) and len(items) == 1 else ""
                raise WorkflowDefinitionError(
                    f"workflow {self._name!r}: after= got {label!r}, which is not a step{hint}"
                )
            if sd.workflow is not self or self._steps.get(sd.name) is not sd:
                raise WorkflowDefinitionError(
                    f"workflow {self._name!r}: after= got {label!r}, which is step {sd.name!r} "
                    f"of workflow {sd.workflow.name!r}, not of this workflow"
                )
            names.append(sd.name)
        return tuple(dict.fromkeys(names))

    def _check_context_param(self, step: str, fn: Callable[..., Any]) -> None:
        params = self._signature(step, fn).parameters.values()
        if not any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params):
            raise WorkflowDefinitionError(
                f"workflow {self._name!r}: step {step!r} must take the run context as its first positional parameter"
            )

    def _signature(self, step: str, fn: Callable[..., Any]) -> inspect.Signature:
        try:
            return inspect.signature(fn)
        except (TypeError, ValueError) as exc:
            raise WorkflowDefinitionError(
                f"workflow {self._name!r}: cannot read the parameters of step {step!r}: {exc}"
            ) from exc

    # -- whole-graph checks -----------------------------------------------------------
    def _build_graph(self) -> nx.DiGraph:
        g = nx.DiGraph()
        for sd in self._steps.values():
            g.add_node(
                sd.name,
                trigger=sd.trigger,
                retries=sd.effective_retries,
                retry_wait=sd.effective_retry_wait,
                **({"map": sd.map} if sd.map else {}),
            )
        for sd in self._steps.values():
            for parent in sd.after:
                g.add_edge(parent, sd.name)
        return g

    def validate(self) -> None:
        """Check the whole graph (unknown steps, cycles, parameters); fill ``inputs``."""
        if self._validated_version == self._version:
            return
        if not self._steps:
            raise WorkflowDefinitionError(f"workflow {self._name!r} has no steps")
        for sd in self._steps.values():
            for parent in sd.after:
                if parent not in self._steps:
                    raise WorkflowDefinitionError(
                        f"workflow {self._name!r}: step {sd.name!r} depends on unknown step {parent!r}"
                        + _hint(parent, self._steps)
                    )
            if not sd.after and sd.trigger in _NEEDS_PARENTS:
                raise WorkflowDefinitionError(
                    f"workflow {self._name!r}: step {sd.name!r} has trigger {sd.trigger} but no parents (after=)"
                )
        g = self._build_graph()
        try:
            cycle = nx.find_cycle(g)
        except nx.NetworkXNoCycle:
            cycle = None
        if cycle:
            nodes = [edge[0] for edge in cycle]
            index = list(self._steps)
            start = min(range(len(nodes)), key=lambda i: index.index(nodes[i]))
            nodes = nodes[start:] + nodes[:start]
            raise WorkflowDefinitionError(f"workflow {self._name!r} has a cycle: {' -> '.join(nodes + nodes[:1])}")
        for sd in self._steps.values():
            sd.inputs = self._inputs(sd, nx.ancestors(g, sd.name))
        self._validated_version = self._version

    def _inputs(self, sd: StepDef, ancestors: set[str]) -> tuple[str, ...]:
        inputs: list[str] = []
        params = list(self._signature(sd.name, sd.fn).parameters.values())
        if params and params[0].kind is not params[0].VAR_POSITIONAL:
            params = params[1:]  # the context
        where = f"workflow {self._name!r}: parameter {{!r}} of step {sd.name!r}"
        for p in params:
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                continue
            if sd.map is not None and p.name == "item":
                continue  # receives this task's item of the map
            if sd.map is not None and p.name == sd.map:
                raise WorkflowDefinitionError(
                    where.format(p.name) + " would receive the whole list it maps over; a map step receives "
                    "one element as 'item' (and its index as ctx.index)"
                )
            has_default = p.default is not p.empty
            if p.kind is p.POSITIONAL_ONLY:
                if not has_default:
                    raise WorkflowDefinitionError(
                        where.format(p.name) + " is positional-only and has no default; step results are "
                        "passed by keyword"
                    )
                continue
            if p.name in ancestors:
                inputs.append(p.name)
            elif not has_default:
                if p.name in self._steps:
                    why = f"names step {p.name!r}, which is not upstream of it (add it to after=)"
                else:
                    why = "is neither an upstream step nor has a default value" + _hint(p.name, ancestors)
                raise WorkflowDefinitionError(where.format(p.name) + " " + why)
        return tuple(inputs)

    # -- outputs ----------------------------------------------------------------------
    def graph(self) -> nx.DiGraph:
        """The validated DAG: nodes are step names (trigger, retries, retry_wait), edges parent -> child."""
        self.validate()
        return self._build_graph()

    def start(
        self,
        run_id: str,
        data: Any = None,
        *,
        url: str | None = None,
        table: str | None = None,
        now: float | None = None,
        queue: Any = None,
    ) -> Run:
        """Start a run: submit the queue task (key = run id, type = this workflow's name).

        A duplicate run id raises queue_core's IdempotentAlreadyExistsError.
        """
        return start_run(self, run_id, data, url=url, table=table, now=now, queue=queue)

    def snapshot(self) -> dict[str, Any]:
        """The self-contained, JSON-serialisable definition stored with each run."""
        self.validate()
        index = {name: i for i, name in enumerate(self._steps)}
        order = list(nx.lexicographical_topological_sort(self._build_graph(), key=index.__getitem__))
        return {
            "format": SNAPSHOT_FORMAT,
            "workflow": self._name,
            "retries": self._retries,
            "retry_wait": self._retry_wait,
            "retention": self._retention,
            "priority": self._priority,
            "queue": self._queue,
            **({"tags": list(self._tags)} if self._tags else {}),
            "steps": {
                sd.name: {
                    "after": list(sd.after),
                    "trigger": sd.trigger,
                    "retries": sd.effective_retries,
                    "retry_wait": sd.effective_retry_wait,
                    "inputs": list(sd.inputs),
                    "queue": sd.effective_queue,
                    **({"tags": list(sd.effective_tags)} if sd.effective_tags else {}),
                    **(
                        {"map": sd.map, "max_parallel": sd.max_parallel, "allow_failed_items": sd.allow_failed_items}
                        if sd.map
                        else {}
                    ),
                }
                for sd in self._steps.values()
            },
            "order": order,
        }


def snapshot_graph(snapshot: dict[str, Any]) -> nx.DiGraph:
    """Rebuild the DAG of a stored :meth:`Workflow.snapshot`."""
    if snapshot.get("format") != SNAPSHOT_FORMAT:
        raise ValueError(f"unsupported workflow snapshot format {snapshot.get('format')!r}")
    g = nx.DiGraph()
    steps: dict[str, dict[str, Any]] = snapshot["steps"]
    for name, spec in steps.items():
        g.add_node(
            name,
            trigger=spec["trigger"],
            retries=spec["retries"],
            retry_wait=spec["retry_wait"],
            **({"map": spec["map"]} if spec.get("map") else {}),
        )
    for name, spec in steps.items():
        for parent in spec["after"]:
            g.add_edge(parent, name)
    return g


def get_workflow(name: str) -> Workflow:
    """The workflow defined (imported) under this name."""
    try:
        return _registry[name]
    except KeyError:
        known = ", ".join(sorted(_registry)) or "none"
        raise UnknownWorkflowError(f"unknown workflow {name!r}{_hint(name, _registry)} (defined: {known})") from None


def registered_workflows() -> dict[str, Workflow]:
    """All defined workflows by name (a copy)."""
    return dict(_registry)


def _check_step_options(trigger, retries, retry_wait, name, queue, tags) -> tuple[str, ...]:
    """Refuse a step's options that are not valid; returns its tags, checked."""
    _check_trigger(trigger)
    if retries is not None:
        _check_retries("retries", retries)
    if retry_wait is not None:
        _check_seconds("retry_wait", retry_wait)
    if name is not None:
        _check_name("step", name)
    if queue is not None:
        _check_queue(queue)
    return _check_tags(tags)
