"""An attempt's span is made only when a tracer provider is configured: with the OpenTelemetry
API installed but no SDK, making one per attempt recorded nothing and cost a quarter of a no-op
drain's time (beyond the drain's cost budget). Each case in a fresh interpreter: a process's tracer
provider can be set only once."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import types
from queue_core.api import tracing
{setup}
task = types.SimpleNamespace(created_at=1.0, claimed_at=2.0, attempts=1, queue_name="default", key="k",
                             type="t", trace=None, lost=False, outcome="success")
with tracing.attempt_span(task) as span:
    print(type(span).__name__)
"""

SDK = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
trace.set_tracer_provider(TracerProvider())
"""


def _span_class(setup: str) -> str:
    out = subprocess.run([sys.executable, "-c", CODE.format(setup=setup)], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_no_span_is_made_without_a_configured_tracer_provider():
    assert _span_class("") == "NoneType"


def test_a_span_is_made_once_an_sdk_provider_is_configured():
    assert _span_class(SDK) not in ("NoneType", "NonRecordingSpan")
