"""OpenTelemetry spans and metrics of a turn, caught by the SDK's in-memory exporter and reader.

Requests go through the ASGI stack the server runs (the ASGI instrumentation
in front of Django), so the request span is the one a deployment makes;
turns run in-process through django-q2's sync mode. The worker hand-off
across processes, over the OTLP wire, is tests/sessions/test_tracing_live.py.
"""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from agents.discovery import deploy_agent_folder
from agentsite.threads import PooledThreadsASGIHandler
from sessions.eventlog.events import read_events
from sessions.models import Turn
from sessions.tracing import setup
from tests.sessions.test_hooks import GATED_TOOL
from tests.sessions.test_mcp import SERVER, call_line, write_agent

transactional = pytest.mark.django_db(transaction=True)

OTEL_TOOL = '''\
from pydantic import BaseModel
from agents.sdk import tool


class Input(BaseModel):
    ticket: str


@tool(description="Resolve a ticket.", effect="write")
def resolve(input: Input, ctx) -> str:
    ctx.host.otel.set_attributes({"acme.ticket_id": input.ticket})
    ctx.host.otel.increment("acme.ticket.resolved")
    ctx.host.otel.record("acme.resolve.duration_ms", 1420, {"acme.queue": "billing"})
    if input.ticket == "bad-name":
        ctx.host.otel.increment("9 not a name")
    return f"resolved {input.ticket}"
'''

SECRET = "the-secret-prompt-4711"


@pytest.fixture(scope="session")
def otel_sinks():
    """The process's providers, set once (OpenTelemetry allows one per process), on memory."""
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    setup.configure(span_exporter=exporter, metric_reader=reader)
    setup._state.update(traces=False, metrics=False)  # on only inside `traced`
    return exporter, reader


@pytest.fixture
def traced(otel_sinks, monkeypatch):
    exporter, reader = otel_sinks
    exporter.clear()
    reader.collect()  # start from what was recorded before
    monkeypatch.setitem(setup._state, "traces", True)
    monkeypatch.setitem(setup._state, "metrics", True)
    return exporter, reader


@pytest.fixture
def traced_agent(db, tmp_path: Path):
    root = tmp_path / "traced"
    tools = root / "agent" / "tools"
    tools.mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("You do as told.\n")
    (root / "agent" / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo")\n')
    (tools / "resolve.py").write_text(OTEL_TOOL)
    (tools / "send_payment.py").write_text(GATED_TOOL)
    deploy_agent_folder(root)


def asgi_post(path: str, body: dict) -> httpx.Response:
    """A POST through the server's ASGI stack with the ASGI instrumentation in front, from loopback."""
    app = OpenTelemetryMiddleware(PooledThreadsASGIHandler(2), exclude_spans=["receive", "send"])

    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 40000))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8000") as client:
            return await client.post(path, json=body)
    return asyncio.run(send())


def by_name(spans, name: str):
    found = [s for s in spans if s.name == name]
    assert found, f"no span {name!r} in {[s.name for s in spans]}"
    return found


def parent_of(span, spans):
    return next(s for s in spans if span.parent and s.context.span_id == span.parent.span_id)


def metric_points(reader) -> dict[str, list]:
    points: dict[str, list] = {}
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points.setdefault(metric.name, []).extend(metric.data.data_points)
    return points


@transactional
def test_a_turn_with_a_tool_call_and_an_approval_is_one_trace_from_its_request(traced, traced_agent, sync_turns):
    exporter, reader = traced
    created = asgi_post("/traced/v1/session", {
        "message": f'{SECRET}\n/call resolve {{"ticket": "INC-1"}}\n/call send_payment {{"amount": 5}}'})
    assert created.status_code == 201, created.text
    session_id = created.json()["sessionId"]
    call_id = next(e["data"]["callId"] for e in read_events(session_id) if e["type"] == "action.approval_requested")
    decided = asgi_post(f"/traced/v1/session/{session_id}/approvals/{call_id}", {"decision": "approve"})
    assert decided.status_code == 200, decided.text

    spans = exporter.get_finished_spans()
    [request] = by_name(spans, "POST /{slug}/v1/session")
    assert request.kind == SpanKind.SERVER and request.attributes["http.route"] == "/{slug}/v1/session"
    [approval_request] = by_name(spans, "POST /{slug}/v1/session/{session_id}/approvals/{call_id}")
    runs = by_name(spans, "invoke_agent traced")
    assert len(runs) == 2, "a parked turn is traced once per run"
    for run in runs:
        assert parent_of(run, spans) is request, "both runs continue the trace of the request that admitted it"
        assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
        assert run.attributes["gen_ai.agent.name"] == "traced"
        assert run.attributes["gen_ai.conversation.id"] == session_id
    assert [link.context.span_id for link in runs[1].links] == [approval_request.context.span_id], \
        "the resumed run links the request that decided it"
    assert runs[1].attributes["agentsite.turn.status"] == "completed"

    chats = by_name(spans, "chat echo")
    assert sorted(parent_of(c, spans).context.span_id for c in chats) == sorted(r.context.span_id for r in runs)
    for chat in chats:
        assert chat.kind == SpanKind.CLIENT
        assert chat.attributes["gen_ai.request.model"] == "echo"
        assert chat.attributes["gen_ai.provider.name"] == "scripted"
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
        assert chat.attributes["agentsite.cost_usd"] == 0.0  # the offline model is free, not unpriced
        assert chat.attributes["gen_ai.conversation.id"] == session_id
    [resolve] = by_name(spans, "execute_tool resolve")
    [payment] = by_name(spans, "execute_tool send_payment")
    assert parent_of(resolve, spans) is runs[0] and parent_of(payment, spans) is runs[1]
    assert resolve.attributes["gen_ai.tool.name"] == "resolve"
    assert resolve.attributes["acme.ticket_id"] == "INC-1", "ctx.host.otel.set_attributes lands on the tool's span"
    assert payment.attributes["gen_ai.tool.call.id"] == call_id

    for span in spans:  # content stays off the wire unless asked for
        for key, value in span.attributes.items():
            assert SECRET not in str(value), (span.name, key)
        assert "gen_ai.input.messages" not in span.attributes and "gen_ai.tool.call.arguments" not in span.attributes

    trace_id = format(request.context.trace_id, "032x")
    turn = Turn.objects.get(session_id=session_id)
    assert (turn.trace_id, turn.trace_parent.split("-")[1]) == (trace_id, trace_id)
    completed = next(e["data"] for e in read_events(session_id) if e["type"] == "turn.completed")
    assert completed["traceId"] == trace_id
    points = metric_points(reader)
    tokens = {p.attributes["gen_ai.token.type"] for p in points["gen_ai.client.token.usage"]}
    assert tokens == {"input", "output"}
    [duration] = points["gen_ai.client.operation.duration"]
    assert duration.count == 2 and duration.attributes["gen_ai.request.model"] == "echo"
    [resolved] = points["acme.ticket.resolved"]
    assert resolved.value == 1 and resolved.attributes["gen_ai.agent.name"] == "traced"
    for point in (duration, resolved):  # a series per session would grow without end
        assert "gen_ai.conversation.id" not in point.attributes
    [recorded] = points["acme.resolve.duration_ms"]
    assert recorded.sum == 1420 and recorded.attributes["acme.queue"] == "billing"


@transactional
def test_content_is_captured_only_when_asked(traced, traced_agent, sync_turns, monkeypatch):
    exporter, _ = traced
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    created = asgi_post("/traced/v1/session", {"message": f'{SECRET}\n/call resolve {{"ticket": "INC-2"}}'})
    assert created.status_code == 201
    spans = exporter.get_finished_spans()
    first_chat = by_name(spans, "chat echo")[0]
    assert SECRET in first_chat.attributes["gen_ai.input.messages"]
    assert "You do as told." in first_chat.attributes["gen_ai.system_instructions"]
    assert "resolve" in first_chat.attributes["gen_ai.output.messages"]
    [tool] = by_name(spans, "execute_tool resolve")
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"ticket": "INC-2"}
    assert tool.attributes["gen_ai.tool.call.result"] == "resolved INC-2"


@transactional
def test_a_turn_no_request_admitted_starts_its_trace_and_keeps_it(traced, traced_agent, sync_turns, local):
    """The Django test client makes no request span: as a schedule or a reminder, the turn's first run starts one."""
    exporter, _ = traced
    created = local.post("/traced/v1/session", json.dumps({"message": '/call send_payment {"amount": 5}'}),
                         content_type="application/json")
    session_id = created.json()["sessionId"]
    turn = Turn.objects.get(session_id=session_id)
    [first] = by_name(exporter.get_finished_spans(), "invoke_agent traced")
    assert first.parent is None
    assert turn.trace_id == format(first.context.trace_id, "032x")
    call_id = next(e["data"]["callId"] for e in read_events(session_id) if e["type"] == "action.approval_requested")
    local.post(f"/traced/v1/session/{session_id}/approvals/{call_id}", json.dumps({"decision": "approve"}),
               content_type="application/json")
    second = by_name(exporter.get_finished_spans(), "invoke_agent traced")[1]
    assert second.context.trace_id == first.context.trace_id and second.parent.span_id == first.context.span_id
    detail = local.get(f"/traced/v1/session/{session_id}").json()
    assert detail["lastTurn"]["traceId"] == turn.trace_id


@transactional
def test_a_bad_metric_name_fails_the_tool_call_with_the_rule(traced, traced_agent, sync_turns, local):
    created = local.post("/traced/v1/session", json.dumps({"message": '/call resolve {"ticket": "bad-name"}'}),
                         content_type="application/json")
    [result] = [e["data"] for e in read_events(created.json()["sessionId"]) if e["type"] == "action.result"]
    assert "metric name '9 not a name' is not valid: start with a letter" in result["error"]


@transactional
def test_the_mcp_sdks_spans_nest_under_the_tool_call(traced, sync_turns, local, tmp_path, monkeypatch):
    monkeypatch.setenv("NOTES_FILE", str(tmp_path / "notes.txt"))
    entry = {"command": "python", "args": [str(SERVER), "stdio"], "env": {"NOTES_FILE": "${NOTES_FILE}"},
             "sandbox": False}
    deploy_agent_folder(write_agent(tmp_path / "notes", {"notes": entry}))
    exporter, _ = traced
    created = local.post("/notes/v1/session", json.dumps({"message": call_line("notes__add", {"a": 2, "b": 3})}),
                         content_type="application/json")
    assert created.status_code == 201
    spans = exporter.get_finished_spans()
    [tool] = by_name(spans, "execute_tool notes__add")
    mcp = [s for s in spans if s.name.startswith("MCP send tools/call")]
    assert mcp and all(parent_of(s, spans) is tool for s in mcp), [s.name for s in spans]


def test_tracing_is_off_without_the_otel_variables(monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER",
                 "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "OTEL_METRICS_EXPORTER", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    assert not setup.wanted()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert setup.wanted()
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert not setup.wanted()
    monkeypatch.delenv("OTEL_SDK_DISABLED")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    assert setup.wanted()
