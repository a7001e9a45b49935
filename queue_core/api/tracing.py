"""Tracing with OpenTelemetry (the ``tracing`` extra: ``opentelemetry-api``), used only when it
is installed; without it every function here is a no-op.

A submission stores the trace context current in the submitting thread (W3C ``traceparent`` and
``tracestate``, as the globally configured propagator writes them) in the task's ``trace``
column. The worker runs each attempt in a ``CONSUMER`` span ``pq <type>`` whose parent is that
context: a trace goes on from the request that submitted the task to the handler that ran it,
across processes and hosts, and what the handler submits continues it. The first attempt's span
starts when the task was submitted (it covers the wait too: a span from submit to finish); a
later attempt's when it was claimed. Its attributes name the queue, key, type, attempt and the
outcome; an attempt that raised has the status ERROR and the exception recorded.

Without an SDK configured (``opentelemetry-sdk`` and an exporter) no span is made and no context
is stored; an attempt of a task submitted in a trace runs in that trace's context (what its
handler submits or logs carries it on): the cost of a task outside a trace is a function call per
submission and per attempt.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from typing import Any

_api: Any = None  # the opentelemetry modules once looked up; False: not installed
#: the longest trace context a task stores (its column holds 1024 characters)
MAX_CONTEXT = 1024


def _otel() -> Any:
    global _api
    if _api is None:
        try:
            from opentelemetry import context, propagate, trace

            _api = (propagate, trace, context)
        except ImportError:
            _api = False
    return _api or None


def warm() -> None:
    """Import OpenTelemetry's API (when installed) and look at its provider now: a processor
    calls this before its first claim, so its first attempt does not pay the import (tens of
    milliseconds) between the decision to start a rate-limited handler and the handler's first line."""
    api = _otel()
    if api is not None:
        _recording(api)


def context_text() -> str | None:
    """The trace context current in this thread as a task stores it (None: no OpenTelemetry, no
    recording span, or a context too long to keep)."""
    api = _otel()
    if api is None or not api[1].get_current_span().get_span_context().is_valid:
        return None  # no span: nothing to continue (baggage alone is not a trace)
    headers: dict[str, str] = {}
    api[0].inject(headers)
    text = json.dumps(headers, separators=(",", ":"), sort_keys=True) if headers else None
    return text if text is not None and len(text) <= MAX_CONTEXT else None


def _parent(text: str | None) -> Any:
    """The context a stored trace context names; None (a new trace) for none or one that is
    not what :func:`context_text` writes (a row edited by hand)."""
    api = _otel()
    try:
        headers = json.loads(text) if isinstance(text, str) and text else None
        if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
            return None
        return api[0].extract(headers)
    except Exception:  # noqa: BLE001 - whatever a hand-edited column holds, the task runs (in a trace of its own)
        return None


def attempt_span(task: Any) -> AbstractContextManager[Any]:
    """The span of one attempt of ``task`` (an AcquiredTask), current while it runs; None
    without OpenTelemetry. :func:`ended` says how the attempt ended. Tracing never stops a
    worker: a span that cannot be made or ended is left out. Without a configured provider and
    outside a trace (a no-op drain), a shared empty context: nothing made per attempt."""
    api = _otel()
    if api is None:
        return _NOTHING
    if not _recording(api):
        return _carried(api, task.trace) if task.trace else _NOTHING
    return _span(api, task)


#: what an attempt runs in when there is nothing to trace
_NOTHING = nullcontext(None)


@contextmanager
def _span(api: Any, task: Any) -> Iterator[Any]:
    opened = _open(api, task)
    if opened is None:
        yield None
        return
    manager, span = opened
    try:
        yield span
    finally:
        with suppress(Exception):
            manager.__exit__(None, None, None)


@contextmanager
def _carried(api: Any, text: str) -> Iterator[None]:
    """The submitter's trace context (``text``) current while the attempt runs, without a span
    of its own (no SDK: nothing would record it): what the handler submits or logs carries the
    trace on."""
    parent = _parent(text)
    token = None
    with suppress(Exception):
        token = api[2].attach(parent) if parent is not None else None
    try:
        yield
    finally:
        if token is not None:
            with suppress(Exception):
                api[2].detach(token)


def _recording(api: Any) -> bool:
    """Whether a tracer provider is configured (an SDK's): without one the API's spans record
    nothing, and making one for every attempt cost a quarter of a no-op drain's time."""
    trace = api[1]
    try:
        return not isinstance(trace.get_tracer_provider(), (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
    except Exception:  # noqa: BLE001 - tracing must never stop a worker
        return False


def _open(api: Any, task: Any) -> tuple[Any, Any] | None:
    trace = api[1]
    try:
        start = task.created_at if task.attempts <= 1 else task.claimed_at
        attributes = {
            "messaging.system": "pq",
            "messaging.destination.name": task.queue_name,
            "pq.task.key": task.key,
            "pq.task.type": task.type,
            "pq.task.attempt": task.attempts,
        }
        manager = trace.get_tracer("queue_core").start_as_current_span(
            f"pq {task.type}",
            context=_parent(task.trace),
            kind=trace.SpanKind.CONSUMER,
            start_time=int(start * 1e9),
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
        return manager, manager.__enter__()
    except Exception:  # noqa: BLE001 - tracing must never stop a worker
        return None


def ended(span: Any, task: Any, error: BaseException | None) -> None:
    """Record on ``span`` (of :func:`attempt_span`) how the attempt of ``task`` ended: its
    outcome (``success`` also for a success written with the next batch), ``retry``, or
    ``lease_lost``; the handler's error (status ERROR, the exception recorded). An error whose
    text cannot be made (a hostile ``__str__``) is named by its class."""
    if span is None:
        return
    if getattr(task, "lost", False):
        outcome = "lease_lost"
    elif task.outcome is not None:
        outcome = task.outcome
    else:
        outcome = "success" if error is None else "retry"
    with suppress(Exception):
        span.set_attribute("pq.task.outcome", outcome)
        if error is not None:
            status = _otel()[1].Status(_otel()[1].StatusCode.ERROR, _described(error))
            span.set_status(status)
            span.record_exception(error)


def _described(error: BaseException) -> str:
    try:
        return f"{type(error).__name__}: {error}"[:500]
    except Exception:  # noqa: BLE001 - a hostile __str__
        return type(error).__name__[:500]
