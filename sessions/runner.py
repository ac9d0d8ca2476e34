"""The agent loop: a model provider, the tool executor and the event emitter.

One `Runner` runs a turn's agent, and another each subagent the agent
delegates to: stream a step from the model, store and run its tool calls,
loop until a reply without calls or the step limit. The caller owns what
wraps the loop (a turn's start, parking and settling; a subagent's
`subagent.called`/`subagent.completed`).

Events are buffered and written in batches: text deltas are coalesced for a
few tens of ms, and a batch is written when a step starts (so a step's tool
results and the next step's start commit together) and before tools run.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from django.db import transaction

from agents.providers import get_provider, parse_model_id
from agents.providers.base import (
    ModelRequest,
    ProviderError,
    ReasoningDelta,
    ReasoningSignature,
    TextDelta,
    ToolCall,
)
from agents.hooks import Hook
from agents.providers.base import Usage as ProviderUsage
from sessions import metrics, tracing
from sessions.events import append_events
from sessions.models import EventType, ToolCall as ToolCallRow
from sessions.storable import clean_text
from sessions.timings import TurnClock
from sessions.tools import Executor, json_safe, result_payload, tool_message
from sessions.usage import Usage, add_usage, from_provider, zero

COALESCED = (EventType.MESSAGE_APPENDED, EventType.REASONING_APPENDED)
# What a subagent's run shows in the parent's log: its tool calls (the reply comes back as the delegate result).
SUBAGENT_EVENTS = frozenset({
    EventType.SUBAGENT_CALLED, EventType.SUBAGENT_COMPLETED, EventType.ACTIONS_REQUESTED, EventType.ACTION_RESULT,
})


INTERRUPT_CHECK_SECONDS = 0.05


class Interrupted(Exception):
    pass


class InterruptWatch:
    """Whether the turn was asked to stop, read from the database at most every INTERRUPT_CHECK_SECONDS."""

    def __init__(self, turn, fresh: bool = False):
        self.turn = turn
        # `fresh`: the turn row was read just after its claim, so its flag is
        # current: the first check() need not read it again, nor should_stop() for a while.
        self._next_check = time.monotonic() + INTERRUPT_CHECK_SECONDS if fresh else 0.0
        self._interrupted = bool(fresh and turn.interrupt_requested)
        self._fresh = fresh

    def should_stop(self) -> bool:
        if self._interrupted:
            return True
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + INTERRUPT_CHECK_SECONDS
            self._interrupted = self.turn.interrupted()
        return self._interrupted

    def check(self) -> None:
        """Read the flag now (between steps, before resuming) and raise Interrupted if set."""
        if self._fresh:
            self._fresh = False
            if self._interrupted:
                raise Interrupted()
            return
        self._next_check = 0.0
        if self.should_stop():
            raise Interrupted()


class Parked(Exception):
    """Calls of this step wait for approval; the turn resumes in a new task once they are decided."""

    def __init__(self, step: int, tools: list[str] | None = None):
        super().__init__(step)
        self.step = step
        self.tools = tools or []  # the names of the calls that wait


@dataclass
class Emitter:
    """Buffers a loop's events and writes them in batches through append_events.

    A subagent's emitter keeps only SUBAGENT_EVENTS and tags each with the subagent's id.
    """

    session_id: str
    turn_id: str
    flush_seconds: float
    hooks: Sequence[Hook] = ()
    subagent: str | None = None
    buffer: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    first_buffered: float = 0.0

    def emit(self, type_: EventType, data: dict[str, Any]) -> None:
        if self.subagent is not None:
            if type_ not in SUBAGENT_EVENTS:
                return
            data = {**data, "subagent": self.subagent}
        last = self.buffer[-1] if self.buffer else None
        if last and last[0] == type_ and type_ in COALESCED:
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
            append_events(self.session_id, batch, self.turn_id, hooks=self.hooks)

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        batch, self.buffer = self.buffer, []
        return batch


@dataclass(frozen=True)
class Profile:
    """What a loop runs as: the agent or one of its subagents."""

    model: str
    system: str
    params: dict[str, Any]
    max_steps: int


class Runner:
    def __init__(self, profile: Profile, executor: Executor, emitter: Emitter, interrupts: InterruptWatch,
                 usage: Usage, clock: TurnClock | None = None):
        self.profile = profile
        self.executor = executor
        self.emitter = emitter
        self.interrupts = interrupts
        self.should_stop = interrupts.should_stop
        self.usage: Usage = usage  # the loop's total so far: None once any step's usage is unknown
        # The turn's timings; a subagent's loop has none (its time is its delegate call's).
        self.clock = clock
        self.first_output: float | None = None  # when the model call streaming now first said something

    def run(self, messages: list[dict[str, Any]], first_step: int = 1) -> str:
        """Loop until a reply without tool calls; returns its text. `messages` grows in place.

        Raises Parked (calls wait for approval), Interrupted, or ProviderError (the step limit included).
        """
        provider, model = get_provider(self.profile.model)
        provider_name = parse_model_id(self.profile.model)[0]
        specs = self.executor.specs()
        for step in range(first_step, self.profile.max_steps + 1):
            step_started = time.monotonic()
            self.emitter.emit(EventType.STEP_STARTED, {"step": step})
            self.emitter.flush()
            request = ModelRequest(model=model, system=self.profile.system, messages=messages, tools=specs,
                                   params=dict(self.profile.params), should_stop=self.should_stop)
            called = time.monotonic()
            with tracing.model_call(provider_name, model, self.profile.system, messages) as traced:
                try:
                    text, reasoning, signature, calls, step_usage = self.stream_step(provider, request)
                finally:  # a failed or interrupted call is timed too
                    if self.clock is not None:
                        self.clock.model_call(self.profile.model, called, self.first_output)
                reply = assistant_message(text, reasoning, signature, calls)
                traced.ended(step_usage, reply)
            self.usage = add_usage(self.usage, step_usage)
            metrics.model_called(self.executor.session, self.profile.model,
                                 None if self.first_output is None else self.first_output - called, step_usage)
            if reasoning:
                self.emitter.emit(EventType.REASONING_COMPLETED, {"text": reasoning})
            if text:
                self.emitter.emit(EventType.MESSAGE_COMPLETED, {"text": text})
            messages.append(reply)
            self.emitter.emit(EventType.STEP_COMPLETED, {
                "step": step, "durationMs": round((time.monotonic() - step_started) * 1000, 1), "usage": step_usage,
            })
            if not calls:
                return text
            messages.extend(self.run_tools(calls, step))
            self.interrupts.check()
        raise ProviderError(f"step limit reached ({self.profile.max_steps} steps) without a final reply",
                            code="step_limit")

    def stream_step(self, provider, request: ModelRequest):
        text: list[str] = []
        reasoning: list[str] = []
        signature: list[str] = []
        calls: list[ToolCall] = []
        usage: Usage = None  # unknown until the provider reports some
        self.first_output = None
        for event in provider.stream(request):
            if self.should_stop():
                raise Interrupted()
            if self.first_output is None and not isinstance(event, ProviderUsage):
                self.first_output = time.monotonic()
            if isinstance(event, TextDelta):
                delta = clean_text(event.text)  # a model's NUL or lone surrogate would not store
                text.append(delta)
                self.emitter.emit(EventType.MESSAGE_APPENDED, {"delta": delta})
            elif isinstance(event, ReasoningDelta):
                delta = clean_text(event.text)
                reasoning.append(delta)
                self.emitter.emit(EventType.REASONING_APPENDED, {"delta": delta})
            elif isinstance(event, ReasoningSignature):
                signature.append(event.signature)
            elif isinstance(event, ToolCall):
                calls.append(event)
            elif isinstance(event, ProviderUsage):
                usage = add_usage(usage if usage is not None else zero(), from_provider(event))
        if self.should_stop():
            raise Interrupted()
        return "".join(text), "".join(reasoning), "".join(signature), calls, usage

    def run_tools(self, calls: list[ToolCall], step: int) -> list[dict[str, Any]]:
        """Store and run one step's calls; their tool messages. Raises Parked if any waits for approval.

        The results stay buffered: they commit with the next step's start (or the turn's parking or end).
        """
        # The calls' rows and the events announcing them commit together (one commit, not two).
        with transaction.atomic():
            prepared = self.executor.prepare(calls)
            self.emitter.emit(EventType.ACTIONS_REQUESTED, {"calls": [p.requested() for p in prepared]})
            parked = [p for p in prepared if p.row.status == ToolCallRow.Status.AWAITING_APPROVAL]
            for p in parked:
                self.emitter.emit(EventType.ACTION_APPROVAL_REQUESTED, {
                    **p.requested(), "description": p.tool.description, "effect": p.tool.effect,
                })
            if any(p.row.status == ToolCallRow.Status.REQUESTED for p in prepared):
                self.emitter.flush()  # readers see the calls while they run
        started = time.monotonic()
        durations = self.executor.run(prepared)
        self.time_tools(started, [p.row for p in prepared], durations)
        for p in prepared:
            if p.row.status != ToolCallRow.Status.AWAITING_APPROVAL:
                self.emitter.emit(EventType.ACTION_RESULT, result_payload(p.row, durations.get(p.row.pk, 0.0)))
                metrics.tool_call_ended(self.executor.session, p.row)
        if parked:
            raise Parked(step, [p.row.tool for p in parked])
        # The model's own call ids: a subagent's rows carry a prefix the model never saw.
        return [tool_message(p.row, clean_text(p.call.call_id)) for p in prepared]

    def resume_tools(self, rows: list[ToolCallRow]) -> list[dict[str, Any]]:
        """Finish a parked step once decided: run approved calls once, report denied ones."""
        self.executor.explain_denials(rows)
        self.interrupts.check()  # an interrupt while parked wins over the approvals
        started = time.monotonic()
        durations = self.executor.run_approved(rows)
        self.time_tools(started, rows, durations)
        for row in rows:
            if row.pk in durations or row.status == ToolCallRow.Status.DENIED:
                self.emitter.emit(EventType.ACTION_RESULT, result_payload(row, durations.get(row.pk, 0.0)))
                metrics.tool_call_ended(self.executor.session, row)
        return [tool_message(r) for r in rows]

    def time_tools(self, started: float, rows: list[ToolCallRow], durations: dict[int, float]) -> None:
        """Each call that ran (from its row's start) and the wall time of the step's tool run."""
        if self.clock is None or not durations:
            return
        for row in rows:
            if durations.get(row.pk):  # 0: another runner had started it (never twice)
                self.clock.tool_call(row.tool, row.call_id, row.started_at, durations[row.pk])
        self.clock.tools_ran(started)


def assistant_message(text: str, reasoning: str, signature: str, calls: list[ToolCall]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning:
        message["reasoning"] = reasoning
    if signature:
        message["reasoningSignature"] = signature
    if calls:
        # Cleaned like the ToolCall rows (Executor.prepare), so the stored conversation matches them.
        message["toolCalls"] = [{"id": clean_text(c.call_id), "name": clean_text(c.name),
                                 "input": json_safe(c.input)} for c in calls]
    return message
