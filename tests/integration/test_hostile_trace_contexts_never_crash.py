"""Tracing against hostile contexts: hostile ``trace`` column contents never crash a worker or
a claim; no span, no context; submit_many and Transaction.submit store the context."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa
from opentelemetry import baggage, context, trace
from opentelemetry.sdk.trace import TracerProvider

from queue_core import config
from queue_core.worker.main import Processor


@pytest.fixture(autouse=True)
def provider():
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())


def _drain(queue, target):
    s = config.build({"url": queue.config["url"], "table": queue.table, "retry_wait": 0})
    Processor(target, s, burst=True, queue=queue).run(listen=False)


def _edit(queue, key, value):
    t = queue.store.t
    queue.db.run(lambda c: c.execute(sa.update(t).where(t.c.key == key).values(trace=value)))


def test_a_deeply_nested_trace_never_crashes_the_worker(queue):
    """A context edited to 1024 '[' (it fits the VARCHAR(1024) column everywhere) passes the claim's
    row check (it is text) and makes json.loads raise RecursionError in tracing._parent, which
    catches ValueError only: the exception leaves Processor.process before the handler ran, and
    the worker's loop dies (a poison task: every worker that claims it dies)."""
    queue.submit("deep", "t")
    _edit(queue, "deep", "[" * 1024)
    ran = []
    _drain(queue, lambda task: ran.append(task.key))
    assert ran == ["deep"]


def test_a_trace_column_holding_a_blob_starts_a_new_trace_not_a_set_aside(queue, backend):
    """rowcheck.TASK_COLUMNS says of ``trace``: "a worker that cannot read it starts a trace of its
    own". A BLOB there (SQLite keeps one; the context is advisory) makes the whole task corrupt:
    the claim sets it aside and it never runs."""
    if backend != "sqlite":
        pytest.skip("only SQLite keeps a number in a text column")
    queue.submit("num", "t")
    _edit(queue, "num", b"\x80not text")  # a BLOB: SQLite's TEXT affinity turns a number into text
    ran = []
    _drain(queue, lambda task: ran.append(task.key))
    assert ran == ["num"]


@pytest.mark.parametrize(
    "value",
    [
        '{"traceparent": "00-' + "f" * 32 + "-" + "f" * 16 + '-01"}',
        "[]",
        '{"traceparent": 5}',
        '"x"',
        "null",
        '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\\r\\nX-Injected: 1"}',
        '{"baggage": "' + "k=v," * 200 + '"}',
        "\x00",
        "",
    ],
)
def test_hostile_trace_texts_run_the_task(queue, value, backend):
    if backend == "postgres" and "\x00" in value:
        pytest.skip("PostgreSQL keeps no NUL in text")
    queue.submit("h", "t")
    _edit(queue, "h", value)
    ran = []
    _drain(queue, lambda task: ran.append(task.key))
    assert ran == ["h"]


def test_no_current_span_stores_no_context_even_with_baggage(queue):
    """tracing.context_text: None without a recording span. With only baggage in the context (no
    span at all), the propagator writes a baggage header and the task stores it."""
    token = context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        assert not trace.get_current_span().get_span_context().is_valid
        queue.submit("b", "t")
    finally:
        context.detach(token)
    assert queue.store.task_get("b")["trace"] is None


def test_submit_many_and_a_transaction_store_the_context(queue):
    with trace.get_tracer("test").start_as_current_span("request") as span:
        queue.submit_many([{"key": "m1", "type": "t"}, {"key": "m2", "type": "t"}])
        queue.transaction(lambda tx: tx.submit("x1", "t"))
    want = f"{span.get_span_context().trace_id:032x}"
    for key in ("m1", "m2", "x1"):
        stored = queue.store.task_get(key)["trace"]
        assert stored is not None and want in json.loads(stored)["traceparent"], key


def test_a_context_longer_than_1024_characters_is_not_stored(queue):
    with trace.get_tracer("test").start_as_current_span("request"):
        token = context.attach(baggage.set_baggage("big", "v" * 2000))
        try:
            queue.submit("long", "t")
        finally:
            context.detach(token)
    assert queue.store.task_get("long")["trace"] is None
