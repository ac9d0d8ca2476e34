"""OpenTelemetry from a live server over the OTLP/HTTP wire, into a receiver the test runs on loopback.

A turn admitted by one process (the web server) runs in others (two turn
workers; the approval's resumed run may land on either): its runs continue
the admitting request's trace through the traceparent stored with the turn.
Metrics (the GenAI client metrics, a tool's own counter) arrive too, and the
JSON log lines carry the trace id.
"""
from __future__ import annotations

import contextlib
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tests.sessions.test_hooks import GATED_TOOL
from tests.sessions.test_json_logs import lines_of
from tests.sessions.test_tracing import OTEL_TOOL
from tests.support import read_stream_until, run_server

pytestmark = pytest.mark.slow


class Receiver:
    """What a collector's OTLP/HTTP receiver got: spans and metric names with their points."""

    def __init__(self) -> None:
        self.spans: list[dict] = []
        self.metrics: dict[str, list] = {}
        self.services: set[str] = set()
        self.lock = threading.Lock()

    def take(self, path: str, body: bytes) -> bytes:
        if path == "/v1/traces":
            request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            with self.lock:
                for resource in request.resource_spans:
                    self.services.update(a.value.string_value for a in resource.resource.attributes
                                         if a.key == "service.name")
                    for scope in resource.scope_spans:
                        self.spans.extend(_span(s) for s in scope.spans)
            return trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        request = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
        with self.lock:
            for resource in request.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        points = getattr(metric, metric.WhichOneof("data")).data_points
                        self.metrics.setdefault(metric.name, []).extend(points)
        return metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()

    def named(self, name: str) -> list[dict]:
        with self.lock:
            return [s for s in self.spans if s["name"] == name]


def _span(span) -> dict:
    attributes = {}
    for a in span.attributes:
        value = a.value
        attributes[a.key] = getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None
    return {"name": span.name, "trace": span.trace_id.hex(), "id": span.span_id.hex(),
            "parent": span.parent_span_id.hex(), "attributes": attributes}


@contextlib.contextmanager
def otlp_receiver() -> Iterator[tuple[Receiver, str]]:
    """A collector's OTLP/HTTP receiver on loopback: what it got, and its endpoint."""
    got = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            reply = got.take(self.path, body)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield got, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, str]]:
    with otlp_receiver() as found:
        yield found


def wait_for(check, timeout: float = 20):
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_a_turn_run_by_workers_continues_the_trace_of_the_request_that_admitted_it(tmp_path: Path, receiver):
    got, endpoint = receiver
    agent = tmp_path / "agents" / "traced" / "agent"
    (agent / "tools").mkdir(parents=True)
    (agent / "instructions.md").write_text("You do as told.\n")
    (agent / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo")\n')
    (agent / "tools" / "resolve.py").write_text(OTEL_TOOL)
    (agent / "tools" / "send_payment.py").write_text(GATED_TOOL)
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "100",
           "OTEL_METRIC_EXPORT_INTERVAL": "300", "AGENTSITE_LOG_FORMAT": "json", "AGENTSITE_LOG_LEVEL": "INFO"}
    with run_server(tmp_path / "state", "--no-schedules", "--workers", "2", "--agents", str(tmp_path / "agents"),
                    env=env) as server, server.client(timeout=20) as client:
        created = client.post("/traced/v1/session", json={
            "message": '/call resolve {"ticket": "INC-7"}\n/call send_payment {"amount": 5}'})
        assert created.status_code == 201, created.text
        session_id = created.json()["sessionId"]
        stream = f"/traced/v1/session/{session_id}/stream"
        events = read_stream_until(client, stream, "action.approval_requested")
        call_id = events[-1]["data"]["callId"]
        decided = client.post(f"/traced/v1/session/{session_id}/approvals/{call_id}", json={"decision": "approve"})
        assert decided.status_code == 200, decided.text
        events = read_stream_until(client, stream, "turn.completed")

        ops = client.post("/ops/v1/session", json={"message": "Status of payments?"})
        ops_id = ops.json()["sessionId"]
        read_stream_until(client, f"/ops/v1/session/{ops_id}/stream", "session.waiting")

        [request] = wait_for(lambda: [s for s in got.named("POST /{slug}/v1/session")
                                      if s["attributes"].get("http.route") and
                                      any(r["trace"] == s["trace"] for r in got.named("invoke_agent traced"))])
        runs = wait_for(lambda: [r for r in got.named("invoke_agent traced") if r["trace"] == request["trace"]]
                        if len(got.named("invoke_agent traced")) >= 2 else [])
        assert len(runs) == 2, "the parked turn's two runs, each in a worker"
        assert all(r["parent"] == request["id"] for r in runs), "continued across the hand-off to the workers"
        assert {r["attributes"]["gen_ai.conversation.id"] for r in runs} == {session_id}
        [resolve] = wait_for(lambda: got.named("execute_tool resolve"))
        assert resolve["trace"] == request["trace"] and resolve["attributes"]["acme.ticket_id"] == "INC-7"
        assert any(c["trace"] == request["trace"] for c in got.named("chat echo"))
        assert got.services == {"agentsite"}

        counted = wait_for(lambda: got.metrics.get("acme.ticket.resolved"))
        assert sum(p.as_double or p.as_int for p in counted) >= 1
        assert wait_for(lambda: got.metrics.get("gen_ai.client.token.usage"))
        assert wait_for(lambda: got.metrics.get("gen_ai.client.operation.duration"))

        assert events[-1]["data"]["traceId"] == request["trace"]
        detail = client.get(f"/traced/v1/session/{session_id}").json()
        assert detail["lastTurn"]["traceId"] == request["trace"]

        ops_turn = client.get(f"/ops/v1/session/{ops_id}").json()["lastTurn"]
        (ended,) = lines_of(server, "agentsite.examples.ops")
        assert ended["traceId"] == ops_turn["traceId"] and ended["turnId"] == ops_turn["id"]


def test_a_retired_worker_sends_its_spans_on_the_way_out(tmp_path: Path, receiver):
    """django-q2 replaces a worker after AGENTSITE_Q_RECYCLE tasks: what it holds is flushed as it exits,
    long before the batch's next scheduled send (a minute here)."""
    got, endpoint = receiver
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "60000",
           "OTEL_METRICS_EXPORTER": "none", "AGENTSITE_Q_RECYCLE": "1"}
    with run_server(tmp_path / "state", "--no-schedules", "--workers", "1", env=env) as server, \
            server.client(timeout=20) as client:
        created = client.post("/support/v1/session", json={"message": "hello"})
        assert created.status_code == 201, created.text
        session_id = created.json()["sessionId"]
        read_stream_until(client, f"/support/v1/session/{session_id}/stream", "session.waiting")
        runs = wait_for(lambda: got.named("invoke_agent support"), timeout=15)
        assert [r["attributes"]["gen_ai.conversation.id"] for r in runs] == [session_id]
