"""The agent loop: a model provider, the tool executor and the event emitter.

One `Runner` runs a turn's agent, and another each subagent the agent
delegates to: stream a step from the model, store and run its tool calls,
loop until a reply without calls or the step limit. The caller owns what
wraps the loop (a turn's start, parking and settling; a subagent's
`subagent.called`/`subagent.completed`).

Events are buffered and written in batches: text deltas are coalesced for a
few tens of ms (after a streaming model's first, which is written at once),
and a batch is written when a step starts (so a step's tool results and the
next step's start commit together) and before tools run.
"""
from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from django.db import transaction
from django.utils import timezone

from agents.providers import get_provider, parse_model_id
from agents.providers.base import (
    RETRYABLE_CODES,
    ModelRequest,
    ProviderError,
    ReasoningDelta,
    ReasoningSignature,
    TextDelta,
    ToolCall,
    params_for,
)
from agents.hooks import Hook
from agents.providers.transcript import for_model
from agents.providers.base import Usage as ProviderUsage
from sessions.eventlog.events import append_events
from sessions.models import EventType, ToolCall as ToolCallRow
from sessions.sql import turns as sql_turns
from sessions.eventlog.storable import clean_text
from sessions.spend.meter import Meter
from sessions.turn import extensions
from sessions.turn.extensions import ModelCall
from sessions.turn.timings import TurnClock
from sessions.turn.tools import Executor, json_safe, result_payload, tool_message
from sessions.turn.usage import Usage, add_usage, from_provider, priced, reached_at, zero

COALESCED = (EventType.MESSAGE_APPENDED, EventType.REASONING_APPENDED)
# What a subagent's run shows in the parent's log: its tool calls (the reply comes back as the delegate result).
SUBAGENT_EVENTS = frozenset({
    EventType.SUBAGENT_CALLED, EventType.SUBAGENT_COMPLETED, EventType.ACTIONS_REQUESTED, EventType.ACTION_RESULT,
})


# How stale the stop flag may be while a model streams. The turn's own appends read it too (every
# AGENTSITE_DELTA_FLUSH_SECONDS while deltas flow: Emitter.stop_flag), so a streaming turn rarely polls for it.
INTERRUPT_CHECK_SECONDS = 0.1


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
            self._interrupted = sql_turns.interrupted(self.turn.pk)
        return self._interrupted

    def observe(self, stopped: bool) -> None:
        """A reading of the flag made by another statement (the turn's event appends): no poll for a while."""
        self._interrupted = self._interrupted or stopped
        self._next_check = time.monotonic() + INTERRUPT_CHECK_SECONDS

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

    def __init__(self, step: int, tools: list[str] | None = None, resume: dict[str, Any] | None = None):
        super().__init__(step)
        self.step = step
        self.tools = tools or []  # the names of the calls that wait
        self.resume = resume  # what another runtime's leg resumes from (sessions.claude_agent), kept with the turn


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
    # Told the turn's stop flag by every append (InterruptWatch.observe), which reads it in the same statement.
    stop_flag: Callable[[bool], object] | None = None
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
            append_events(self.session_id, batch, self.turn_id, hooks=self.hooks, stop_flag=self.stop_flag)

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
    # What a failed model call may fall over to, in order (the agent's declared fallback; a subagent's: none).
    fallback: tuple[str, ...] = ()
    # The model `params` were declared for (the agent's default); blank: `model`. Another provider's
    # model gets them without the client's (base_url, api_key_env): those name the other provider's server.
    declared_for: str = ""


class Runner:
    def __init__(self, profile: Profile, executor: Executor, emitter: Emitter, interrupts: InterruptWatch,
                 usage: Usage, clock: TurnClock | None = None, model: str | None = None,
                 usage_by_model: dict[str, Usage] | None = None, meter: Meter | None = None):
        """`model`, `usage_by_model`: where a parked turn's earlier run of the loop left off;
        `meter`: where each call's cost goes (the turn's, shared with its subagents' loops)."""
        self.profile = profile
        self.executor = executor
        self.emitter = emitter
        self.interrupts = interrupts
        self.should_stop = interrupts.should_stop
        self.usage: Usage = usage  # the loop's total so far: None once any step's usage is unknown
        # The model called now: the profile's, until a call fails over to a fallback (then the rest of the turn).
        self.model = model if model in self.chain else profile.model
        # Each model's share of `usage`, for a turn that used more than one.
        self.usage_by_model: dict[str, Usage] = dict(usage_by_model or {})
        self.meter = meter or Meter()
        # The turn's timings; a subagent's loop has none (its time is its delegate call's).
        self.clock = clock
        # Who hears of each model and tool call: the features' observers, and the turn's clock.
        self.observers = (*extensions.observers, clock) if clock is not None else tuple(extensions.observers)
        self.first_output: float | None = None  # when the model call streaming now first said something
        self._providers: dict[str, tuple[Any, str, str]] = {}

    @property
    def chain(self) -> list[str]:
        return [self.profile.model] + [m for m in self.profile.fallback if m != self.profile.model]

    def run(self, messages: list[dict[str, Any]], first_step: int = 1) -> str:
        """Loop until a reply without tool calls; returns its text. `messages` grows in place.

        Raises Parked (calls wait for approval), Interrupted, or ProviderError (the step limit included).
        """
        specs = self.executor.specs()
        for step in range(first_step, self.profile.max_steps + 1):
            step_started = time.monotonic()
            self.emitter.emit(EventType.STEP_STARTED, {"step": step})
            self.emitter.flush()
            text, reasoning, signature, calls, step_usage = self.call_model(messages, specs, step)
            if reasoning:
                self.emitter.emit(EventType.REASONING_COMPLETED, {"text": reasoning})
            if text:
                self.emitter.emit(EventType.MESSAGE_COMPLETED, {"text": text})
            messages.append(assistant_message(text, reasoning, signature, calls, self.model))
            self.emitter.emit(EventType.STEP_COMPLETED, {
                "step": step, "durationMs": round((time.monotonic() - step_started) * 1000, 1), "usage": step_usage,
            })
            if not calls:
                return text
            messages.extend(self.run_tools(calls, step))
            self.interrupts.check()
        raise ProviderError(f"step limit reached ({self.profile.max_steps} steps) without a final reply",
                            code="step_limit")

    def call_model(self, messages: list[dict[str, Any]], specs, step: int):
        """One step's model call, falling over to the next declared fallback when the provider fails.

        Only a provider's failure (RETRYABLE_CODES: rate limited, overloaded,
        server error, timeout, unreachable) falls over, only to a model the
        agent declared, and only while the failed call had said nothing yet:
        its streamed text is already in the log, and a second answer would
        repeat it. Each fall-over is a `model.fallback` event; the session's
        own model is left as it is, so its next turn starts on it again.
        """
        while True:
            try:
                return self.call_once(self.model, messages, specs)
            except ProviderError as exc:
                chain = self.chain
                position = chain.index(self.model)
                if exc.code not in RETRYABLE_CODES or self.first_output is not None or position + 1 >= len(chain):
                    raise
                following = chain[position + 1]
                self.emitter.emit(EventType.MODEL_FALLBACK, {"from": self.model, "to": following, "reason": exc.code,
                                                             "error": str(exc), "step": step})
                self.emitter.flush()  # readers learn of it now, not once the next model has answered
                # A failed call reports no usage: its model counts what it answered before, if anything.
                self.usage_by_model.setdefault(self.model, zero())
                self.model = following

    def provider(self, model_id: str) -> tuple[Any, str, str]:
        """The provider, its model name and the provider's name, looked up once per loop and model."""
        if model_id not in self._providers:
            self._providers[model_id] = (*get_provider(model_id), parse_model_id(model_id)[0])
        return self._providers[model_id]

    def call_once(self, model_id: str, messages: list[dict[str, Any]], specs):
        self.meter.before_call()  # a spent budget stops the turn here, between steps
        provider, model, provider_name = self.provider(model_id)
        params = params_for(model_id, self.profile.params, self.profile.declared_for or self.profile.model)
        # Each model is handed back only the thinking it signed: a fall-over mixes two models' in one history.
        request = ModelRequest(model=model, system=self.profile.system, tools=specs, params=dict(params),
                               messages=for_model(messages, model_id, self.profile.model), should_stop=self.should_stop)
        call = ModelCall(self.executor.session, model_id, provider_name, model, self.profile.system,
                         request.messages, time.monotonic())  # as sent: the span shows what the model was given
        with ExitStack() as observed:  # each observer wraps the call (a span is current around it)
            for observer in self.observers:
                observed.enter_context(observer.model_call(call))
            try:
                text, reasoning, signature, calls, step_usage = self.stream_step(provider, request)
            finally:  # a failed or interrupted call is reported too
                call.first_output = self.first_output
            if step_usage is not None:
                step_usage = priced(step_usage, model_id, timezone.now(), reached_at(provider, params))
            call.usage, call.reply = step_usage, assistant_message(text, reasoning, signature, calls)
        self.usage = add_usage(self.usage, step_usage)
        self.usage_by_model[model_id] = add_usage(self.usage_by_model.get(model_id, zero()), step_usage)
        self.meter.called(model_id, step_usage)
        return text, reasoning, signature, calls, step_usage

    def add_usage_of(self, other: "Runner") -> None:
        """A subagent's loop's usage, counted in this one's (its caller holds the lock parallel calls need)."""
        self.usage = add_usage(self.usage, other.usage)
        for model_id, used in other.usage_by_model.items():
            self.usage_by_model[model_id] = add_usage(self.usage_by_model.get(model_id, zero()), used)

    def reported_usage(self) -> Usage | dict[str, Any]:
        """The loop's usage as turn.completed and turn.failed give it: the totals, and `byModel` once
        more than one model was called (a fall-over, a subagent on another model)."""
        if self.usage is None or len(self.usage_by_model) < 2:
            return self.usage
        return {**self.usage, "byModel": dict(self.usage_by_model)}

    def stream_step(self, provider, request: ModelRequest):
        text: list[str] = []
        reasoning: list[str] = []
        signature: list[str] = []
        calls: list[ToolCall] = []
        usage: Usage = None  # unknown until the provider reports some
        self.first_output = None
        first_written = False
        in_process = getattr(provider, "in_process", False)
        for event in provider.stream(request):
            if self.should_stop():
                raise Interrupted()
            if self.first_output is None and not isinstance(event, ProviderUsage):
                self.first_output = time.monotonic()
            if isinstance(event, (TextDelta, ReasoningDelta)):
                delta = clean_text(event.text)  # a model's NUL or lone surrogate would not store
                if isinstance(event, TextDelta):
                    text.append(delta)
                    self.emitter.emit(EventType.MESSAGE_APPENDED, {"delta": delta})
                else:
                    reasoning.append(delta)
                    self.emitter.emit(EventType.REASONING_APPENDED, {"delta": delta})
                if not first_written:
                    # The first delta is written at once (coalescing starts after it), so a reader's first
                    # token does not wait out the flush window: every model over the network, and an
                    # in-process one that waited for it. One that had its reply at hand stays one write.
                    first_written = True
                    if not in_process or request.waited:
                        self.emitter.flush()
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
                self.emitter.emit(EventType.ACTION_APPROVAL_REQUESTED, p.approval_requested())
            if any(p.row.status == ToolCallRow.Status.REQUESTED for p in prepared):
                self.emitter.flush()  # readers see the calls while they run
        started = time.monotonic()
        durations = self.executor.run(prepared)
        self.report_tools(started, [p.row for p in prepared if p.row.status != ToolCallRow.Status.AWAITING_APPROVAL],
                          durations)
        if parked:
            raise Parked(step, [p.row.tool for p in parked])
        # The model's own call ids: a subagent's rows carry a prefix the model never saw.
        return [tool_message(p.row, clean_text(p.call.call_id)) for p in prepared]

    def resume_tools(self, rows: list[ToolCallRow]) -> list[dict[str, Any]]:
        """Finish a parked step once decided: run approved calls once, report denied ones and answers."""
        self.executor.explain_denials(rows)
        self.interrupts.check()  # an interrupt while parked wins over the approvals
        started = time.monotonic()
        durations = self.executor.run_approved(rows)
        self.report_tools(started, [r for r in rows if r.pk in durations or r.status == ToolCallRow.Status.DENIED
                                    or (r.question and r.status == ToolCallRow.Status.DONE)], durations)
        return [tool_message(r) for r in rows]

    def report_tools(self, started: float, rows: list[ToolCallRow], durations: dict[int, float]) -> None:
        """`action.result` for each call of `rows`, and the observers told (`durations`: of those that ran)."""
        for observer in self.observers:  # first: the step's tool time ends before its events are written
            observer.tool_calls_ended(self.executor.session, rows, started, durations)
        for row in rows:
            self.emitter.emit(EventType.ACTION_RESULT, result_payload(row, durations.get(row.pk, 0.0)))


def assistant_message(text: str, reasoning: str, signature: str, calls: list[ToolCall],
                      model: str = "") -> dict[str, Any]:
    """The step's reply in the neutral shape; `model`: the model that signed its thinking."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning:
        message["reasoning"] = reasoning
    if signature:
        message["reasoningSignature"] = signature
        if model:
            message["reasoningModel"] = model
    if calls:
        # Cleaned like the ToolCall rows (Executor.prepare), so the stored conversation matches them.
        message["toolCalls"] = [{"id": clean_text(c.call_id), "name": clean_text(c.name),
                                 "input": json_safe(c.input)} for c in calls]
    return message
