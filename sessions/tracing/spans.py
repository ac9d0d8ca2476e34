"""The spans of a turn, named and attributed by the GenAI semantic conventions.

    POST /{slug}/v1/session              the request (the ASGI instrumentation, agentsite.asgi)
    └ invoke_agent {slug}                one run of the turn, in a worker (a parked turn has one per run)
      ├ chat {model}                     one model call
      └ execute_tool {tool}              one tool call; the MCP SDK's own spans nest here
        └ invoke_agent {subagent}        a delegation, with its own chat and execute_tool spans

A turn continues the trace of the request that admitted it: the request's
W3C `traceparent` is stored on the Turn (`link()`), and the worker's span
takes it as its parent. A turn no request admitted (a schedule, a reminder)
starts a trace and stores it, so a resumed run joins it. Every span carries
the session (`gen_ai.conversation.id`) and the agent (`gen_ai.agent.name`);
metrics carry the agent only.
Message and tool content are left out unless
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.

When tracing is off every helper here is a no-op that costs a flag test.
"""
from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, Iterator

from opentelemetry import context as otel_context, trace
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sessions.tracing import instruments
from sessions.tracing.setup import flush_on_exit, metering, tracing
from sessions.turn import extensions

_propagator = TraceContextTextMapPropagator()
_tracer = trace.get_tracer("agentsite")
# The turn's attributes, which its model and tool spans and its metrics carry too.
_about: ContextVar[dict[str, str]] = ContextVar("agentsite_trace_about", default={})


def capture_content() -> bool:
    return os.environ.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").strip().lower() == "true"


def _as_json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def link() -> dict[str, str]:
    """The fields a new Turn takes to continue the current trace: its traceparent and trace id ({} if none)."""
    if not tracing():
        return {}
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    parent = carrier.get("traceparent", "")
    return {"trace_parent": parent, "trace_id": parent.split("-")[1]} if parent else {}


def trace_id() -> str:
    """The current trace's id, hex ('' outside a span)."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else ""


def _traceparent(span) -> str:
    carrier: dict[str, str] = {}
    _propagator.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent", "")


@contextmanager
def turn_span(turn) -> Iterator[Any]:
    """A worker's run of `turn`: `invoke_agent {slug}`, under the request that admitted it."""
    if not (tracing() or metering()):
        yield None
        return
    flush_on_exit()
    session = turn.session
    slug = session.deployment.agent.slug  # the release, read with its agent (the session's agent is not)
    about = {gen_ai.GEN_AI_AGENT_NAME: slug, gen_ai.GEN_AI_CONVERSATION_ID: session.id}
    token = _about.set(about)  # metrics carry them too, traced or not
    try:
        if not tracing():
            yield None
            return
        parent = (_propagator.extract({"traceparent": turn.trace_parent}) if turn.trace_parent
                  else otel_context.Context())
        # Run inside another traced request (a decision resuming the turn, in-process): linked, not the parent.
        here = trace.get_current_span().get_span_context()
        links = [trace.Link(here)] if here.is_valid and here != trace.get_current_span(parent).get_span_context() else []
        with _tracer.start_as_current_span(
            f"invoke_agent {slug}", context=parent, kind=SpanKind.INTERNAL, links=links,
            attributes={**about, gen_ai.GEN_AI_OPERATION_NAME: gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value,
                        "agentsite.turn.id": turn.id, "agentsite.turn.trigger": turn.trigger},
        ) as span:
            if not turn.trace_parent:  # a turn no request admitted: its trace starts here, and is kept
                turn.adopt_trace(format(span.get_span_context().trace_id, "032x"), _traceparent(span))
            yield span
    finally:
        _about.reset(token)


def turn_ended(status: str, code: str, usage: dict[str, int] | None) -> None:
    """The current turn span's outcome."""
    if not tracing():
        return
    span = trace.get_current_span()
    span.set_attribute("agentsite.turn.status", status)
    if usage:
        span.set_attributes({gen_ai.GEN_AI_USAGE_INPUT_TOKENS: usage.get("inputTokens", 0),
                             gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: usage.get("outputTokens", 0)})
        cost_attributes(span, usage)
    if status == "failed":
        span.set_attribute(error_attributes.ERROR_TYPE, code or "turn_failed")
        span.set_status(Status(StatusCode.ERROR, code or "turn_failed"))


def cost_attributes(span, usage: dict[str, Any]) -> None:
    # No semantic convention names a cost yet: agentsite's own attribute, absent when the price is unknown.
    if usage.get("costUsd") is not None:
        span.set_attribute("agentsite.cost_usd", usage["costUsd"])
    if usage.get("unpricedCalls"):
        span.set_attribute("agentsite.unpriced_calls", usage["unpricedCalls"])


class ModelCall:
    """What a `chat` span learns as the call goes: its usage and, when content is captured, the reply."""

    def __init__(self, span, model: str, provider: str):
        self.span, self.model, self.provider = span, model, provider
        self.started = time.monotonic()

    def ended(self, usage: dict[str, int] | None, reply: dict[str, Any] | None = None) -> None:
        if self.span is not None:
            if usage is not None:
                self.span.set_attributes({gen_ai.GEN_AI_USAGE_INPUT_TOKENS: usage["inputTokens"],
                                          gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS: usage["outputTokens"]})
                cost_attributes(self.span, usage)
            if reply is not None and capture_content():
                self.span.set_attribute(gen_ai.GEN_AI_OUTPUT_MESSAGES, _as_json([reply]))
        if metering():
            instruments.model_call(self.model, self.provider, metric_about(), time.monotonic() - self.started,
                                   usage)


@contextmanager
def model_call(provider: str, model: str, system: str, messages: list[dict[str, Any]]) -> Iterator[ModelCall]:
    """`chat {model}` around one model call."""
    if not tracing():
        yield ModelCall(None, model, provider)
        return
    attributes = {**_about.get(), gen_ai.GEN_AI_OPERATION_NAME: gen_ai.GenAiOperationNameValues.CHAT.value,
                  gen_ai.GEN_AI_REQUEST_MODEL: model, gen_ai.GEN_AI_PROVIDER_NAME: provider}
    if capture_content():
        attributes[gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS] = _as_json([{"type": "text", "content": system}])
        attributes[gen_ai.GEN_AI_INPUT_MESSAGES] = _as_json(messages)
    with _tracer.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes) as span:
        yield ModelCall(span, model, provider)


@contextmanager
def tool_call(name: str, call_id: str, arguments: Any) -> Iterator[Any]:
    """`execute_tool {tool}` around one tool call (`ctx.host.otel.set_attributes` lands on it)."""
    if not tracing():
        yield None
        return
    attributes = {**_about.get(), gen_ai.GEN_AI_OPERATION_NAME: gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value,
                  gen_ai.GEN_AI_TOOL_NAME: name, gen_ai.GEN_AI_TOOL_CALL_ID: call_id}
    if capture_content():
        attributes[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = _as_json(arguments)
    with _tracer.start_as_current_span(f"execute_tool {name}", kind=SpanKind.INTERNAL,
                                       attributes=attributes) as span:
        yield span


def tool_ended(span, output: Any, error: str) -> None:
    if span is None:
        return
    if error:
        span.set_attribute(error_attributes.ERROR_TYPE, "tool_error")
        span.set_status(Status(StatusCode.ERROR, error[:200]))
    elif capture_content():
        span.set_attribute(gen_ai.GEN_AI_TOOL_CALL_RESULT, _as_json(output))


def subagent(subagent_id: str):
    """`invoke_agent {subagent}` around a delegation, inside the `delegate` tool's span."""
    if not tracing():
        return nullcontext()
    return _tracer.start_as_current_span(
        f"invoke_agent {subagent_id}", kind=SpanKind.INTERNAL,
        attributes={**_about.get(), gen_ai.GEN_AI_OPERATION_NAME: gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value,
                    "agentsite.subagent": subagent_id})


def metric_about() -> dict[str, str]:
    """The current turn's attributes that metrics carry: its agent, not its session.

    A metric keeps a series per set of attributes for the life of the process:
    one per session would grow without end (spans carry the session instead).
    """
    agent = _about.get().get(gen_ai.GEN_AI_AGENT_NAME)
    return {gen_ai.GEN_AI_AGENT_NAME: agent} if agent else {}


_NOTHING = nullcontext()


class Traced(extensions.TurnObserver):
    """The spans above, as the turn's observer (`register`)."""

    def turn_run(self, turn):
        return turn_span(turn)

    def subagent(self, subagent_id: str):
        return subagent(subagent_id)

    def model_call(self, call: extensions.ModelCall):
        return self._model_call(call) if tracing() or metering() else _NOTHING  # off: no generator per call

    @contextmanager
    def _model_call(self, call: extensions.ModelCall) -> Iterator[None]:
        with model_call(call.provider, call.model, call.system, call.messages) as traced:
            yield
            traced.ended(call.usage, call.reply)

    def tool_call(self, row):
        return self._tool_call(row) if tracing() else _NOTHING

    @contextmanager
    def _tool_call(self, row) -> Iterator[None]:
        with tool_call(row.tool, row.call_id, row.input) as span:
            yield
            tool_ended(span, row.output, row.error)

    def turn_ended(self, status: str, code: str, usage: dict[str, Any] | None) -> None:
        turn_ended(status, code, usage)

    def new_turn(self) -> dict[str, str]:
        return link()


def register() -> None:
    """Spans and GenAI metrics of every turn (sessions.apps); each costs a flag test when off."""
    extensions.add_observer(Traced())
