"""Metrics sent over OTLP: the GenAI client metrics, and what tools record through `ctx.host.otel`.

    gen_ai.client.token.usage          histogram of tokens per model call, by gen_ai.token.type
    gen_ai.client.operation.duration   histogram of a model call's seconds
    <name a tool gives>                counters (`increment`) and histograms (`record`), made on first use

Each carries the turn's agent (never its session: a series per session would
grow without end), the model calls their operation, model and provider.
Instruments are made once per process.
"""
from __future__ import annotations

import re
import threading
from typing import Any

from opentelemetry import metrics
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics

# OpenTelemetry's instrument name rule: a letter, then up to 254 of letters, digits, _ . - /
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-/]{0,254}")

_lock = threading.Lock()
_made: dict[tuple[str, str], Any] = {}


def _instrument(kind: str, name: str):
    with _lock:
        made = _made.get((kind, name))
        if made is None:
            meter = metrics.get_meter("agentsite")
            if kind == "gen_ai.token.usage":
                made = gen_ai_metrics.create_gen_ai_client_token_usage(meter)
            elif kind == "gen_ai.duration":
                made = gen_ai_metrics.create_gen_ai_client_operation_duration(meter)
            elif kind == "counter":
                made = meter.create_counter(name)
            else:
                made = meter.create_histogram(name)
            _made[(kind, name)] = made
        return made


def model_call(model: str, provider: str, about: dict[str, str], seconds: float,
               usage: dict[str, int] | None) -> None:
    attributes = {**about, gen_ai.GEN_AI_OPERATION_NAME: gen_ai.GenAiOperationNameValues.CHAT.value,
                  gen_ai.GEN_AI_REQUEST_MODEL: model, gen_ai.GEN_AI_PROVIDER_NAME: provider}
    _instrument("gen_ai.duration", "").record(seconds, attributes)
    if usage is not None:  # unknown usage records nothing: zero would claim the call was free
        tokens = _instrument("gen_ai.token.usage", "")
        tokens.record(usage["inputTokens"], {**attributes, gen_ai.GEN_AI_TOKEN_TYPE: "input"})
        tokens.record(usage["outputTokens"], {**attributes, gen_ai.GEN_AI_TOKEN_TYPE: "output"})


def check_name(name: Any) -> str:
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ValueError(f"metric name {name!r} is not valid: start with a letter, then letters, digits, "
                         "'_', '.', '-' or '/', at most 255 characters (prefix it with your team or agent)")
    return name


def increment(name: str, value: float, attributes: dict[str, Any]) -> None:
    _instrument("counter", check_name(name)).add(value, attributes)


def record(name: str, value: float, attributes: dict[str, Any]) -> None:
    _instrument("histogram", check_name(name)).record(value, attributes)
