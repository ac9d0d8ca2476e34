"""`ctx.host.otel`: what a tool adds to the turn's trace and to the OTLP metrics.

    ctx.host.otel.set_attributes({"abc.ticket_id": "INC-123"})   on the tool call's span
    ctx.host.otel.increment("abc.ticket.resolved")               a counter (by 1, or `value`)
    ctx.host.otel.record("abc.approval.duration_ms", 1420)       a histogram

Metrics carry the turn's agent and any `attributes` given (keep their values
few: each set of values is a series of its own).
All three do nothing when OpenTelemetry is off, so a tool need not ask;
a name that is not a valid instrument name is refused either way, so a tool
that works without a collector works with one. Prefix names with your team or
agent.
"""
from __future__ import annotations

from typing import Any, Mapping

from opentelemetry import trace

from sessions import tracing
from sessions.tracing import instruments

Attributes = Mapping[str, Any]


class Otel:
    def set_attributes(self, attributes: Attributes | None = None, /, **more: Any) -> None:
        """Attributes on the span of the tool call running now."""
        if tracing.tracing():
            trace.get_current_span().set_attributes({**(attributes or {}), **more})

    def increment(self, name: str, value: float = 1, attributes: Attributes | None = None) -> None:
        instruments.check_name(name)
        if tracing.metering():
            instruments.increment(name, value, {**tracing.metric_about(), **(attributes or {})})

    def record(self, name: str, value: float, attributes: Attributes | None = None) -> None:
        instruments.check_name(name)
        if tracing.metering():
            instruments.record(name, value, {**tracing.metric_about(), **(attributes or {})})
