"""Handlers: the Runner protocol, Application with its decider, Dispatch and Router.

A handler is a class built with ``Handler(task)`` that has ``run()`` and may have
``kill(reason)``; a plain function ``fn(task)`` works too. What happens after ``run()``:

* it finished, failed, retried or released the task itself: nothing more;
* it returned: the worker finishes the task with outcome ``success``;
* it raised: the worker retries with exponential backoff (or fails it at ``max_attempts``), as
  :mod:`queue_core.rules.policy` decides.

A worker leases only the task types its target serves (:func:`served_types`).
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from typing import Any, ClassVar

from ..errors import ConfigError, UndefinedDecisionError, ValidationError
from .queue import check_types

log = logging.getLogger("queue_core.worker")


class Runner:
    """Base class of handlers: holds the task and the queue (to submit follow-up tasks)."""

    def __init__(self, task):
        self.task = task
        self.queue = task.queue

    def run(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def kill(self, reason: BaseException) -> None:
        """Called from another thread when the task is cancelled, preempted or the worker stops.

        The default does nothing; long-running handlers check ``self.killed`` or override this.
        """
        self.killed = reason

    killed: BaseException | None = None


class Decisions:
    """What happens next when a handler reports a decision with ``decide(name, **opts)``:
    PerfectQueue's decider, one method per decision. These know only
    ``unexpected_error_raised``: retry with backoff (or fail at max_attempts).

    (``queue_core.Decider`` is a deprecated name of this class: pqflow's ``Decider``, the
    handler that serves workflow runs, is the one Decider.)
    """

    def __init__(self, handler: Runner):
        self.handler = handler
        self.task = handler.task
        self.queue = handler.queue

    def unexpected_error_raised(self, error: BaseException | None = None, **_opts: Any) -> None:
        if not self.task.done:
            self.task.retry_or_fail(error)


class Application(Runner):
    """PerfectQueue's template handler: ``before_perform``, ``perform``, ``after_perform``.

    An exception escaping them becomes the decision ``unexpected_error_raised``.
    ``before_perform`` returning ``False`` skips the task (it is finished as success). The
    handler's decisions are methods of its ``decisions`` class (a PerfectQueue handler's
    ``decider = ...`` is honoured too).
    """

    decisions: type[Decisions] = Decisions
    #: PerfectQueue's name of ``decisions``: a subclass may set either, the one set last wins
    decider: type[Decisions] = Decisions

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        if "decider" in cls.__dict__:
            cls.decisions = cls.__dict__["decider"]
        else:
            cls.decider = cls.decisions

    def run(self) -> None:
        try:
            if self.before_perform() is False:
                return
            try:
                self.perform()
            finally:
                self.after_perform()
        except Exception as exc:  # noqa: BLE001 - turned into a decision by design
            self.decide("unexpected_error_raised", error=exc)

    def before_perform(self) -> Any:
        return True

    def perform(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def after_perform(self) -> None:
        pass

    def decide(self, name: str, **opts: Any) -> Any:
        decisions = self.decisions(self)
        method = None if name.startswith("_") else getattr(decisions, name, None)
        if not callable(method):
            raise UndefinedDecisionError(f"undefined decision {name!r} options={opts!r} in {type(decisions).__name__}")
        return method(**opts)


class FunctionRunner(Runner):
    """Adapts a plain function ``fn(task)`` to the handler protocol."""

    def __init__(self, fn: Callable, task):
        super().__init__(task)
        self.fn = fn

    def run(self) -> None:
        self.fn(self.task)


class UnknownTypeError(LookupError):
    """No handler matches the task type."""


class Router:
    """Maps task types to handlers: exact strings and compiled regexes, first match wins.

    >>> router = Router()
    >>> @router.route("email")
    ... def send(task): ...
    """

    def __init__(self) -> None:
        self._routes: list[tuple[Any, Any]] = []
        self._cache: dict[str, Any] = {}

    def add(self, pattern: str | re.Pattern, handler: Any) -> None:
        if not isinstance(pattern, (str, re.Pattern)):
            raise TypeError(f"route pattern must be a string or a compiled regex, not {pattern!r}")
        if not callable(handler):
            raise TypeError(f"route handler for {pattern!r} must be a class or a function")
        self._routes.append((pattern, handler))
        self._cache.clear()

    def route(self, pattern: str | re.Pattern, handler: Any = None):
        if handler is not None:
            self.add(pattern, handler)
            return handler

        def deco(fn):
            self.add(pattern, fn)
            return fn

        return deco

    def find(self, type_: str) -> Any:
        if type_ in self._cache:
            return self._cache[type_]
        found = None
        for pattern, handler in self._routes:
            if (pattern == type_) if isinstance(pattern, str) else pattern.search(type_):
                found = handler
                break
        self._cache[type_] = found
        return found

    def served_types(self) -> frozenset[str] | None:
        """The exact types routed; None (every type) once a route is a regex."""
        patterns = [pattern for pattern, _ in self._routes]
        return None if any(not isinstance(p, str) for p in patterns) else frozenset(patterns)

    def ended_by_claim(self, tx, rows: list[dict]) -> None:
        """Hand the rows of workflow runs a claim ended (``Queue.poll_multi(ended_by_claim=)``) to
        the ``ended_by_claim`` of the handler each row's type routes to, if it has one, each
        handler's in a savepoint of its own (what one raises is logged; the others are told). A
        row whose type is not text (edited by hand) routes nowhere."""
        groups: dict[Any, list[dict]] = {}
        for row in rows:
            handler = self.find(row["type"]) if isinstance(row["type"], str) else None
            hook = getattr(handler, "ended_by_claim", None)
            if hook is not None:
                groups.setdefault(hook, []).append(row)
        for hook, group in groups.items():
            error = tx.isolated(functools.partial(hook, tx, group))
            if error is not None:
                log.error("%s could not decide what follows %d rows a claim ended: %s", hook, len(group), error)

    def runner(self, task) -> Runner:
        handler = self.find(task.type)
        if handler is None:
            raise UnknownTypeError(f"no handler for task type {task.type!r}")
        return make_runner(handler, task)


class Dispatch(Runner):
    """Routes tasks to handler classes by type.

    ``class Worker(Dispatch): routes = [("email", Email), (re.compile(r"^report\\."), Report)]``
    or ``Worker.route("email", Email)``.
    """

    routes: list = []
    #: each class's own router, built from its routes on first use (declared only: read from the class's __dict__)
    _router: ClassVar[Router | None]

    @classmethod
    def router(cls) -> Router:
        r = cls.__dict__.get("_router")
        if r is None:
            r = Router()
            for pattern, handler in cls.routes:
                r.add(pattern, handler)
            cls._router = r
        return r

    @classmethod
    def route(cls, pattern, handler=None):
        if "routes" not in cls.__dict__:
            cls.routes = list(cls.routes)  # copy-on-write: a subclass never edits its parent's routes
        if handler is not None:
            cls.routes.append((pattern, handler))
            cls._router = None
            return handler

        def deco(h):
            cls.routes.append((pattern, h))
            cls._router = None
            return h

        return deco

    @classmethod
    def served_types(cls) -> frozenset[str] | None:
        """The types of its routes, if all are exact; override it to serve others or fewer."""
        return cls.router().served_types()

    @classmethod
    def ended_by_claim(cls, tx, rows: list[dict]) -> None:
        """Rows of workflow runs a claim ended, each to its route's handler (:meth:`Router.ended_by_claim`)."""
        cls.router().ended_by_claim(tx, rows)

    def __init__(self, task):
        super().__init__(task)
        self.inner = self.router().runner(task)

    def run(self) -> None:
        self.inner.run()

    def kill(self, reason: BaseException) -> None:
        super().kill(reason)
        self.inner.kill(reason)


def make_runner(target: Any, task) -> Runner:
    """Build the runner for ``task`` from a worker target (class, Router or function)."""
    if isinstance(target, Router):
        return target.runner(task)
    if isinstance(target, type):
        runner = target(task)
        if not callable(getattr(runner, "run", None)):
            raise TypeError(f"handler class {target.__name__} has no run() method")
        return runner
    if callable(target):
        return FunctionRunner(target, task)
    raise TypeError(f"cannot use {target!r} as a handler")


def served_types(target: Any) -> frozenset[str] | None:
    """The task types a worker serving ``target`` leases; None: every type (a catch-all).

    ``target.served_types`` decides when it exists: a collection of exact types, None, or a
    callable returning either (Router, Dispatch and pqflow.Decider define one). Without it
    (a plain function, an Application) the target takes every type.
    """
    value = _declared(target)
    if value is None:
        return None
    try:
        return frozenset(check_types(value, "served_types"))
    except ValidationError as exc:
        raise ConfigError(f"{_name(target)}: {exc}") from None


def _declared(target: Any) -> Any:
    declared = getattr(target, "served_types", None)
    if not callable(declared):
        return declared
    try:
        return declared()
    except TypeError as exc:
        raise ConfigError(f"{_name(target)}.served_types: {exc} (use a list of task types or a classmethod)") from None


def describe_types(types: frozenset[str] | None, limit: int = 200) -> str:
    """One log line's worth of ``served_types``: sorted, cut at ``limit`` characters."""
    if types is None:
        return "every task type (catch-all target)"
    text = ", ".join(sorted(types))
    if len(text) > limit:
        text = text[:limit].rsplit(", ", 1)[0] + ", ..."
    return f"{len(types)} task type{'s' if len(types) != 1 else ''}: {text}"


def _name(target: Any) -> str:
    return getattr(target, "__qualname__", None) or type(target).__name__


def __getattr__(name: str) -> Any:
    """``Decider`` and ``DefaultDecider``: deprecated names of :class:`Decisions`."""
    if name in ("Decider", "DefaultDecider"):
        import warnings

        warnings.warn(f"queue_core.{name} is deprecated: use queue_core.Decisions", DeprecationWarning, stacklevel=2)
        return Decisions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
