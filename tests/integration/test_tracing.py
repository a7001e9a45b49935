"""Tracing with OpenTelemetry, on SQLite, MariaDB and PostgreSQL: a task submitted under
a span carries its trace context; the worker runs each attempt in a span of that trace, from the
submission (first attempt) or the claim (later ones) to its end, with the outcome and the error;
what a handler submits continues the trace. A context edited by hand starts a trace of its own."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from queue_core import config
from queue_core.worker.main import Processor

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans():
    """Spans recorded by the process's tracer provider (set once: OpenTelemetry keeps the first)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # another test module may have set one first
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if not getattr(provider, "_pq_test_exporter", False):
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        provider._pq_test_exporter = True  # type: ignore[attr-defined]
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _drain(queue, target, **settings):
    s = config.build({"url": queue.config["url"], "table": queue.table, "retry_wait": 0, **settings})
    Processor(target, s, burst=True, queue=queue).run(listen=False)


def test_a_task_continues_the_trace_it_was_submitted_in(queue, clock, spans):
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        queue.submit("k", "invoice", {"n": 1})
    stored = json.loads(queue.store.task_get("k")["trace"])
    assert f"{request.get_span_context().trace_id:032x}" in stored["traceparent"]
    clock.advance(5)
    seen = []
    _drain(queue, lambda task: seen.append(trace.get_current_span().get_span_context().trace_id))
    [attempt] = [s for s in spans.get_finished_spans() if s.name == "pq invoice"]
    assert attempt.kind == SpanKind.CONSUMER
    assert attempt.context.trace_id == request.get_span_context().trace_id == seen[0]
    assert attempt.parent.span_id == request.get_span_context().span_id
    assert attempt.start_time == int(queue.store.task_get("k")["created_at"] * 1e9)  # from the submission
    assert attempt.attributes["pq.task.key"] == "k" and attempt.attributes["pq.task.outcome"] == "success"
    assert attempt.attributes["messaging.destination.name"] == "default"


def test_a_failed_attempt_has_the_error_and_a_handler_submission_continues_the_trace(queue, spans):
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("request") as request:
        queue.submit("k", "t", max_attempts=1)

    def handler(task):
        task.queue.submit("child", "t2")
        raise ValueError("api down")

    _drain(queue, handler)
    [attempt] = [s for s in spans.get_finished_spans() if s.name == "pq t"]
    assert attempt.status.status_code == StatusCode.ERROR and "api down" in attempt.status.description
    assert attempt.attributes["pq.task.outcome"] == "failure"
    assert [e.name for e in attempt.events] == ["exception"]
    child = json.loads(queue.store.task_get("child")["trace"])
    assert f"{request.get_span_context().trace_id:032x}" in child["traceparent"]
    assert f"{attempt.context.span_id:016x}" in child["traceparent"]  # its parent: the attempt


def test_no_span_no_context_and_a_context_edited_by_hand_starts_a_new_trace(queue, spans):
    queue.submit("plain", "t")
    assert queue.store.task_get("plain")["trace"] is None
    with trace.get_tracer("test").start_as_current_span("request"):
        queue.submit("edited", "t")
    t = queue.store.t
    queue.db.run(lambda c: c.execute(sa.update(t).where(t.c.key == "edited").values(trace='{"traceparent": 7')))
    _drain(queue, lambda task: None)
    names = sorted(s.name for s in spans.get_finished_spans() if s.name == "pq t")
    assert names == ["pq t", "pq t"]
    assert all(s.parent is None for s in spans.get_finished_spans() if s.name == "pq t")
