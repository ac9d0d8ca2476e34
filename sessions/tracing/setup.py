"""Whether this process exports OpenTelemetry, and the SDK's providers when it does.

Off unless the standard variables ask for it: `OTEL_EXPORTER_OTLP_ENDPOINT`
(or its per-signal `..._TRACES_ENDPOINT` / `..._METRICS_ENDPOINT`), or
`OTEL_TRACES_EXPORTER` / `OTEL_METRICS_EXPORTER` naming an exporter
(`otlp`, `console`; `none` turns a signal off). `OTEL_SDK_DISABLED=true`
wins over all of them. The exporters read the rest themselves
(`OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_BSP_*`,
`OTEL_METRIC_EXPORT_INTERVAL`); the wire is OTLP over HTTP with protobuf.

Every process configures itself as Django starts (sessions.apps): the web
processes and the workers. The SDK's batch threads start again in a forked
worker (its at-fork hooks), and a worker that django-q2 retires flushes what
it holds on the way out (`flush_on_exit`), as a web process does at exit.
"""
from __future__ import annotations

import logging
import os
from multiprocessing import util as mp_util

log = logging.getLogger(__name__)

_state = {"traces": False, "metrics": False, "pid": 0}
_providers: list = []


def _exporter_name(signal: str) -> str:
    """`otlp`, `console` or `none` for `signal` ("traces", "metrics"), from the environment."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return "none"
    named = os.environ.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip().lower()
    if named:
        return named.split(",")[0].strip()
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
        f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT")
    return "otlp" if endpoint else "none"


def wanted() -> bool:
    return _exporter_name("traces") != "none" or _exporter_name("metrics") != "none"


def tracing() -> bool:
    """Whether this process makes spans (its tracer provider is the SDK's)."""
    return _state["traces"]


def metering() -> bool:
    return _state["metrics"]


# The SDK is imported only by a process that exports (below): one that does not pays nothing for it.
def _resource():
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource

    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; without them, "agentsite".
    attributes = {} if os.environ.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: "agentsite"}
    return Resource.create(attributes)


def _span_exporter(name: str):
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter
        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    return OTLPSpanExporter()


def _metric_exporter(name: str):
    if name == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
        return ConsoleMetricExporter()
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    return OTLPMetricExporter()


def configure(span_exporter=None, metric_reader=None) -> None:
    """Set the process's providers from the environment (or, in tests, the given exporter and reader)."""
    from opentelemetry import metrics, trace

    traces, meters = _exporter_name("traces"), _exporter_name("metrics")
    for name, signal in ((traces, "traces"), (meters, "metrics")):
        if name not in ("otlp", "console", "none"):
            log.error("OTEL_%s_EXPORTER=%s is not one this server has (otlp, console, none): %s are off",
                      signal.upper(), name, signal)
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    if protocol != "http/protobuf" and span_exporter is None:
        log.error("OTEL_EXPORTER_OTLP_PROTOCOL=%s: this server sends OTLP over HTTP with protobuf only; "
                  "point it at the collector's HTTP port (4318)", protocol)
    resource = _resource()
    if span_exporter is not None or traces in ("otlp", "console"):
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

        provider = TracerProvider(resource=resource)
        if span_exporter is not None:  # tests: each span as it ends
            provider.add_span_processor(SimpleSpanProcessor(span_exporter))
        else:
            provider.add_span_processor(BatchSpanProcessor(_span_exporter(traces)))
        trace.set_tracer_provider(provider)
        _providers.append(provider)
        _state["traces"] = True
    if metric_reader is not None or meters in ("otlp", "console"):
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        reader = metric_reader or PeriodicExportingMetricReader(_metric_exporter(meters))
        provider = MeterProvider(resource=resource, metric_readers=[reader])
        metrics.set_meter_provider(provider)
        _providers.append(provider)
        _state["metrics"] = True


def flush_on_exit() -> None:
    """In a worker process: flush the providers when it exits.

    django-q2's workers are multiprocessing children, which end with
    os._exit (no atexit); multiprocessing runs its finalizers first. Once
    per process (a fork starts with none).
    """
    if not _providers or _state["pid"] == os.getpid():
        return
    _state["pid"] = os.getpid()
    for provider in _providers:
        mp_util.Finalize(provider, provider.force_flush, exitpriority=10)
