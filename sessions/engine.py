"""The turn engine: one run of the model loop for one input.

`run_turn` is the django-q task. It claims the turn, streams the model,
runs tool calls, loops until a final reply or the step limit, and settles
the session. Events are buffered and written in small batches: text deltas
are coalesced for a few tens of ms, and a batch is written before every
model call and tool run so readers see progress live.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import time
from datetime import datetime
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from pydantic import BaseModel, ValidationError

from agents.discovery import LoadedAgent, load_deployment
from agents.providers import get_provider
from agents.providers.base import (
    ModelRequest,
    ProviderError,
    ReasoningDelta,
    ReasoningSignature,
    TextDelta,
    ToolCall,
    ToolSpec,
    Usage,
)
from agents.sdk import SessionInfo, ToolContext
from sessions.admission import dispatch_next
from sessions.events import SessionGone, append_events
from sessions.models import Session, Turn

log = logging.getLogger(__name__)

LEASE_SECONDS = 300
DRY_RUN_ACK = "Operation acknowledged."
INTERRUPT_CHECK_SECONDS = 0.05


class Interrupted(Exception):
    pass


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Emitter:
    """Buffers a turn's events and writes them in batches through append_events."""

    session_id: str
    turn_id: str
    flush_seconds: float
    buffer: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    first_buffered: float = 0.0

    def emit(self, type_: str, data: dict[str, Any]) -> None:
        last = self.buffer[-1] if self.buffer else None
        if last and last[0] == type_ and type_ in ("message.appended", "reasoning.appended"):
            last[1]["delta"] += data["delta"]  # coalesce consecutive deltas
        else:
            if not self.buffer:
                self.first_buffered = time.monotonic()
            self.buffer.append((type_, data))
        if time.monotonic() - self.first_buffered >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            batch, self.buffer = self.buffer, []
            append_events(self.session_id, batch, self.turn_id)

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        batch, self.buffer = self.buffer, []
        return batch


def _usage_dict(usage: Usage | None = None) -> dict[str, int]:
    usage = usage or Usage()
    return {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "cacheReadTokens": usage.cache_read_tokens,
        "cacheWriteTokens": usage.cache_write_tokens,
    }


USAGE_KEYS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")


def _add_usage(total: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    return {k: total.get(k, 0) + more.get(k, 0) for k in USAGE_KEYS}


def _json_safe(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return json.loads(json.dumps(value, default=str))


def check_time_args(names: tuple[str, ...], validated: BaseModel, as_of: datetime) -> str | None:
    """Under asOf, each named argument must be an absolute instant at or before it."""
    for name in names:
        value = getattr(validated, name, None)
        if isinstance(value, datetime):
            instant = value
        else:
            try:
                instant = datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
            except ValueError:
                instant = None
        if instant is None or instant.tzinfo is None:
            return (f"{name} must be an absolute ISO-8601 instant with a timezone, at or before "
                    f"{as_of.isoformat()} (this session's asOf); retry with absolute bounds")
        if instant > as_of:
            return (f"{name}={value} is after this session's asOf instant {as_of.isoformat()}; "
                    "retry with bounds at or before it")
    return None


def run_turn(turn_id: str) -> None:
    """The django-q task: claim the turn and run it; a turn already claimed is left alone."""
    turn = Turn.objects.select_related("session__deployment__agent").filter(pk=turn_id).first()
    if turn is None or not turn.claim(worker_name(), LEASE_SECONDS):
        return
    try:
        TurnRunner(turn).run()
    except SessionGone:
        log.info("session of turn %s was deleted mid-turn", turn_id)


class TurnRunner:
    def __init__(self, turn: Turn):
        self.turn = turn
        self.session: Session = turn.session
        self.emitter = Emitter(self.session.id, turn.id, settings.AGENTSITE_DELTA_FLUSH_SECONDS)
        self.usage: dict[str, int] = _usage_dict()
        self.started = time.monotonic()
        self._next_interrupt_check = 0.0
        self._interrupted = False

    # -- interrupts ------------------------------------------------------
    def should_stop(self) -> bool:
        if self._interrupted:
            return True
        now = time.monotonic()
        if now >= self._next_interrupt_check:
            self._next_interrupt_check = now + INTERRUPT_CHECK_SECONDS
            self._interrupted = self.turn.interrupted()
        return self._interrupted

    def check_interrupt(self) -> None:
        self._next_interrupt_check = 0.0
        if self.should_stop():
            raise Interrupted()

    # -- the loop --------------------------------------------------------
    def run(self) -> None:
        emit = self.emitter.emit
        Session.objects.filter(pk=self.session.pk).update(status=Session.Status.RUNNING)
        emit("message.received", {"source": self.turn.trigger, "text": self.turn.message})
        emit("turn.started", {"trigger": self.turn.trigger, "admission": self.turn.admission})
        conversation = list(self.session.conversation)
        messages = conversation + [{"role": "user", "content": self.turn.message}]
        try:
            loaded = load_deployment(self.session.deployment)
            self.check_interrupt()
            self.loop(loaded, messages)
        except Interrupted:
            self.finish(messages, error="turn interrupted", status=Turn.Status.INTERRUPTED)
        except ProviderError as exc:
            self.finish(messages, error=str(exc), status=Turn.Status.FAILED, code=exc.code)
        except SessionGone:
            raise
        except Exception as exc:  # a bug must not leave the session stuck in running
            log.exception("turn %s crashed", self.turn.id)
            self.finish(messages, error=f"internal error: {type(exc).__name__}: {exc}", status=Turn.Status.FAILED, code="internal_error")
        else:
            self.finish(messages, status=Turn.Status.COMPLETED)

    def loop(self, loaded: LoadedAgent, messages: list[dict[str, Any]]) -> None:
        provider, model = get_provider(loaded.model)
        max_steps = loaded.config.max_steps or settings.AGENTSITE_MAX_STEPS
        tools = [ToolSpec(name, t.description, t.input_schema()) for name, t in sorted(loaded.tools.items())]
        system = loaded.instructions
        if (as_of := self.as_of()) is not None:
            system += (
                f"\n\nThis session is frozen at {as_of.isoformat()} (asOf): treat that instant as now, "
                "and bound every time range at or before it with absolute ISO-8601 instants."
            )
        for step in range(1, max_steps + 1):
            step_started = time.monotonic()
            self.emitter.emit("step.started", {"step": step})
            self.emitter.flush()
            request = ModelRequest(
                model=model, system=system, messages=messages, tools=tools,
                params=dict(loaded.config.params), should_stop=self.should_stop,
            )
            text, reasoning, signature, calls, step_usage = self.stream_step(provider, request)
            self.usage = _add_usage(self.usage, step_usage)
            if reasoning:
                self.emitter.emit("reasoning.completed", {"text": reasoning})
            if text:
                self.emitter.emit("message.completed", {"text": text})
            assistant: dict[str, Any] = {"role": "assistant", "content": text}
            if reasoning:
                assistant["reasoning"] = reasoning
            if signature:
                assistant["reasoningSignature"] = signature
            if calls:
                assistant["toolCalls"] = [{"id": c.call_id, "name": c.name, "input": _json_safe(c.input)} for c in calls]
            messages.append(assistant)
            self.emitter.emit("step.completed", {
                "step": step, "durationMs": round((time.monotonic() - step_started) * 1000, 1), "usage": step_usage,
            })
            if not calls:
                return
            messages.extend(self.run_tools(loaded, calls))
            self.check_interrupt()
        raise ProviderError(f"step limit reached ({max_steps} steps) without a final reply", code="step_limit")

    def stream_step(self, provider, request: ModelRequest):
        text: list[str] = []
        reasoning: list[str] = []
        signature: list[str] = []
        calls: list[ToolCall] = []
        usage = _usage_dict()
        for event in provider.stream(request):
            if self.should_stop():
                raise Interrupted()
            if isinstance(event, TextDelta):
                text.append(event.text)
                self.emitter.emit("message.appended", {"delta": event.text})
            elif isinstance(event, ReasoningDelta):
                reasoning.append(event.text)
                self.emitter.emit("reasoning.appended", {"delta": event.text})
            elif isinstance(event, ReasoningSignature):
                signature.append(event.signature)
            elif isinstance(event, ToolCall):
                calls.append(event)
            elif isinstance(event, Usage):
                usage = _add_usage(usage, _usage_dict(event))
        if self.should_stop():
            raise Interrupted()
        return "".join(text), "".join(reasoning), "".join(signature), calls, usage

    def run_tools(self, loaded: LoadedAgent, calls: list[ToolCall]) -> list[dict[str, Any]]:
        prepared = []
        for call in calls:
            tool = loaded.tools.get(call.name)
            validated, error = None, None
            if tool is None:
                error = f"unknown tool {call.name!r}; available tools: {', '.join(sorted(loaded.tools)) or 'none'}"
            else:
                try:
                    validated = tool.input_model.model_validate(call.input)
                except ValidationError as exc:
                    error = "invalid input: " + "; ".join(
                        f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
                    )
            prepared.append((call, tool, validated, error))
        self.emitter.emit("actions.requested", {"calls": [
            {"callId": c.call_id, "toolName": c.name,
             "input": validated.model_dump(mode="json") if validated is not None else _json_safe(c.input)}
            for c, _, validated, _ in prepared
        ]})
        self.emitter.flush()

        dry_run = bool(self.session.options.get("dryRun"))
        as_of = self.as_of()
        info = SessionInfo(
            id=self.session.id, agent=self.session.agent.slug, mode=self.session.mode,
            principal_id=self.session.principal_id, dry_run=dry_run,
        )
        results = []
        for call, tool, validated, error in prepared:
            started = time.monotonic()
            output = None
            stubbed = False
            if error is None and as_of is not None and tool.time_args:
                error = check_time_args(tool.time_args, validated, as_of)
            if error is None and dry_run and tool.effect == "write":
                stubbed = True
                output = _json_safe(tool.dry_run_result) if tool.dry_run_result is not None else DRY_RUN_ACK
            elif error is None:
                try:
                    output = _json_safe(tool(validated, ToolContext(session=info, call_id=call.call_id, as_of=as_of)))
                except Exception as exc:  # the model sees tool errors and can act on them
                    error = f"{type(exc).__name__}: {exc}"
            result: dict[str, Any] = {
                "callId": call.call_id, "toolName": call.name,
                "durationMs": round((time.monotonic() - started) * 1000, 1), "stubbed": stubbed,
            }
            if error is None:
                result["output"] = output
            else:
                result["error"] = error
            self.emitter.emit("action.result", result)
            self.emitter.flush()
            content = error if error is not None else (output if isinstance(output, str) else json.dumps(output))
            results.append({"role": "tool", "callId": call.call_id, "name": call.name, "content": content, "isError": error is not None})
        return results

    def as_of(self) -> datetime | None:
        raw = self.session.options.get("asOf")
        return datetime.fromisoformat(raw) if raw else None

    # -- settling --------------------------------------------------------
    def finish(self, messages: list[dict[str, Any]], *, status: str, error: str = "", code: str = "") -> None:
        """Record the outcome, release the session and dispatch its next queued turn, atomically."""
        duration_ms = round((time.monotonic() - self.started) * 1000, 1)
        session = self.session
        task = session.mode == Session.Mode.TASK
        pending = self.emitter.take()
        if status == Turn.Status.COMPLETED:
            pending.append(("turn.completed", {"usage": self.usage, "durationMs": duration_ms}))
            pending.append(("session.completed", {}) if task else ("session.waiting", {}))
            session_status = Session.Status.COMPLETED if task else Session.Status.WAITING
        else:
            failure = {"error": error, "code": code or ("interrupted" if status == Turn.Status.INTERRUPTED else "turn_failed"),
                       "usage": self.usage, "durationMs": duration_ms}
            pending.append(("turn.failed", failure))
            pending.append(("session.failed", {"error": error}) if task else ("session.waiting", {}))
            session_status = Session.Status.FAILED if task else Session.Status.WAITING
        # A failed turn's input stays in the conversation: the next turn's model sees what was asked.
        with transaction.atomic():
            append_events(session.id, pending, self.turn.id)
            current = Session.objects.filter(pk=session.pk).values_list("usage", flat=True).first() or {}
            Session.objects.filter(pk=session.pk).update(
                conversation=messages,
                usage=_add_usage(current, self.usage),
                status=session_status,
                active_turn=None,
                updated_at=timezone.now(),
            )
            Turn.objects.filter(pk=self.turn.pk).update(
                status=status, error=error, usage=self.usage, ended_at=timezone.now(), lease_until=None,
            )
            if not task:
                dispatch_next(session.id)
