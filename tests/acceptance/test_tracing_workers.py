"""Tracing across processes, on SQLite and one server database (marker one_server): a real worker process
runs a task in the trace it was submitted in."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from procs import finish, start_worker

pytestmark = pytest.mark.one_server


@pytest.mark.slow
def test_a_worker_process_runs_the_task_in_the_submitters_trace(wq, tmp_path):
    """A real worker process with only OpenTelemetry's API (no SDK: nothing recorded there) still
    runs the handler in the submitter's trace: what the handler submits or logs carries it on.
    The submitting side records (an SDK provider), as an instrumented web application would."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        trace.set_tracer_provider(TracerProvider())
    log = tmp_path / "runs.log"
    with trace.get_tracer("test").start_as_current_span("request") as request:
        wq.submit("k", "traced", {"log": str(log)})
    worker = start_worker(wq.config["url"], wq.table, burst=True)
    finish(worker, timeout=60)
    assert worker.returncode == 0
    assert log.read_text().split()[-1] == f"trace={request.get_span_context().trace_id:032x}"
