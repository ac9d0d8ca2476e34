"""OpenTelemetry for agentsite: traces of each turn and the GenAI metrics, sent over OTLP when asked.

`setup` decides from the standard `OTEL_*` variables whether this process
exports and configures the SDK; `spans` names and attributes the spans of a
turn; `instruments` holds the OTLP metrics, the ones tools record through
`ctx.host.otel` (sessions.host.otel) included.
"""
from sessions.tracing.setup import configure, metering, tracing, wanted
from sessions.tracing.spans import (
    capture_content,
    link,
    metric_about,
    model_call,
    register,
    subagent,
    tool_call,
    tool_ended,
    trace_id,
    turn_ended,
    turn_span,
)

__all__ = [
    "capture_content", "configure", "link", "metering", "metric_about", "model_call", "register", "subagent",
    "tool_call", "tool_ended", "trace_id", "tracing", "turn_ended", "turn_span", "wanted",
]
