#!/usr/bin/env python
"""A stand-in OTLP/HTTP collector for measuring what tracing costs the server.

It accepts `/v1/traces` and `/v1/metrics` on loopback, counts spans and
metric points, and drops them; Ctrl-C prints the counts.

    .venv/bin/python bench/otlp_sink.py --port 4318 &
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 .venv/bin/python bench/turns.py --config embedded --only W1
"""
from __future__ import annotations

import argparse
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

counts = {"spans": 0, "points": 0, "requests": 0}
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path == "/v1/traces":
            request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
            found = sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
            reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
            key = "spans"
        else:
            request = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
            found = sum(len(m.ListFields()) for r in request.resource_metrics for s in r.scope_metrics
                        for m in s.metrics)
            reply = metrics_service_pb2.ExportMetricsServiceResponse().SerializeToString()
            key = "points"
        with lock:
            counts[key] += found
            counts["requests"] += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=4318)
    port = parser.parse_args().port
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"OTLP sink on http://127.0.0.1:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    print(f"received {counts['spans']} spans, {counts['points']} metrics in {counts['requests']} requests")


if __name__ == "__main__":
    main()
