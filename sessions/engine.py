"""The turn engine: one run of the model loop for one input.

`run_turn` is the django-q task. It claims the turn, streams the model,
runs tool calls, loops until a final reply or the step limit, and settles
the session. A turn whose tool calls need approval parks instead: its
messages and step are stored on the Turn, and approving the calls queues it
again, so the rest of the turn runs in whichever worker claims it.

Events are buffered and written in small batches: text deltas are coalesced
for a few tens of ms, and a batch is written before every model call and
tool run so readers see progress live.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.utils import timezone
from pydantic import ValidationError

from agents.discovery import LoadedAgent, load_deployment
from agents.providers import get_provider
from agents.providers.base import (
    ModelRequest,
    ProviderError,
    ReasoningDelta,
    ReasoningSignature,
    TextDelta,
    ToolCall,
    Usage,
)
from agents.sdk import SessionInfo, ToolContext
from sessions import tools as calls_
from sessions.admission import dispatch_next
from sessions.direct import resume_call
from sessions.events import SessionGone, append_event, append_events
from sessions.models import Session, Turn
from sessions.storable import clean_text, find_problem
from sessions.timers import Host
from sessions.models import ToolCall as ToolCallRow

log = logging.getLogger(__name__)

INTERRUPT_CHECK_SECONDS = 0.05
USAGE_KEYS = ("inputTokens", "outputTokens", "cacheReadTokens", "cacheWriteTokens")


class Interrupted(Exception):
    pass


class Parked(Exception):
    """The turn waits for approvals; it resumes in a new task once they are decided."""


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def lease_seconds() -> float:
    return float(settings.AGENTSITE_TURN_LEASE_SECONDS)


def drop_broken_connection() -> None:
    """After a database error: give back this thread's connection if it no longer works.

    The next query then opens (or takes from the pool) a fresh one instead of
    failing on the dead one again.
    """
    if not connection.in_atomic_block:
        connection.close_if_unusable_or_obsolete()


@dataclass
class Emitter:
    """Buffers a turn's events and writes them in batches through append_events."""

    session_id: str
    turn_id: str
    flush_seconds: float
    hooks: list = field(default_factory=list)
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
            append_events(self.session_id, batch, self.turn_id, hooks=self.hooks)

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        batch, self.buffer = self.buffer, []
        return batch


def usage_dict(usage: Usage | None = None) -> dict[str, int]:
    usage = usage or Usage()
    return {
        "inputTokens": usage.input_tokens,
        "outputTokens": usage.output_tokens,
        "cacheReadTokens": usage.cache_read_tokens,
        "cacheWriteTokens": usage.cache_write_tokens,
    }


def add_usage(total: dict[str, int], more: dict[str, int]) -> dict[str, int]:
    return {k: total.get(k, 0) + more.get(k, 0) for k in USAGE_KEYS}


class Heartbeat:
    """Keeps a turn's lease while it runs, so a long model call or tool keeps it.

    One thread per process renews the leases of every turn the process runs;
    a turn only registers and unregisters (a thread per turn cost more than a
    scripted turn takes).
    """

    _lock = threading.Lock()
    _turns: dict[str, Turn] = {}
    _pid: int | None = None

    def __init__(self, turn: Turn):
        self.turn = turn

    def __enter__(self) -> "Heartbeat":
        cls = type(self)
        with cls._lock:
            cls._turns[self.turn.id] = self.turn
            if cls._pid != os.getpid():  # a forked worker needs its own thread
                cls._pid = os.getpid()
                threading.Thread(target=cls._beat, name="heartbeat", daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        with type(self)._lock:
            type(self)._turns.pop(self.turn.id, None)

    @classmethod
    def _beat(cls) -> None:
        while True:
            time.sleep(max(0.5, lease_seconds() / 3))
            with cls._lock:
                turns = list(cls._turns.values())
            for turn in turns:
                try:
                    turn.renew_lease(lease_seconds())
                except Exception:  # a missed beat only shortens the lease
                    log.exception("heartbeat of %s failed", turn.id)
                    drop_broken_connection()
            if not turns:
                connection.close()


def run_turn(turn_id: str) -> None:
    """The django-q task: claim the turn and run it; a turn already claimed is left alone."""
    try:
        turn = Turn.objects.select_related("session__deployment__agent").filter(pk=turn_id).first()
    except DatabaseError:  # a connection that died while the worker was idle: once more on a fresh one
        drop_broken_connection()
        turn = Turn.objects.select_related("session__deployment__agent").filter(pk=turn_id).first()
    if turn is None or not turn.claim(worker_name(), lease_seconds()):
        return
    try:
        with Heartbeat(turn):
            if turn.trigger == Turn.Trigger.TOOL:  # a parked direct tool call, now decided or stopped
                resume_call(turn)
            else:
                TurnRunner(turn).run()
    except SessionGone:
        log.info("session of turn %s was deleted mid-turn", turn_id)


class TurnRunner:
    def __init__(self, turn: Turn):
        self.turn = turn
        self.session: Session = turn.session
        self.emitter = Emitter(self.session.id, turn.id, settings.AGENTSITE_DELTA_FLUSH_SECONDS)
        self.usage: dict[str, int] = add_usage({}, turn.state.get("usage", {}))
        self.started = time.monotonic() - turn.state.get("elapsedMs", 0) / 1000
        self._next_interrupt_check = 0.0
        self._interrupted = False
        # Whether ToolCall rows may exist for this turn (saves a query on plain turns).
        self.called_tools = bool(turn.state.get("messages"))

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

    def as_of(self) -> datetime | None:
        raw = self.session.options.get("asOf")
        return datetime.fromisoformat(raw) if raw else None

    # -- the loop --------------------------------------------------------
    def run(self) -> None:
        resuming = bool(self.turn.state.get("messages"))
        if resuming:
            messages = list(self.turn.state["messages"])
        else:
            messages = list(self.session.conversation) + [{"role": "user", "content": self.turn.message}]
        try:
            loaded = load_deployment(self.session.deployment)
            self.emitter.hooks = loaded.hooks
            # The session is already `running`: activating a turn sets that (admission.dispatch_next).
            if not resuming:
                received = {"source": self.turn.trigger, "text": self.turn.message}
                if self.turn.source_ref:
                    received[f"{self.turn.trigger}Id"] = self.turn.source_ref  # reminderId, scheduleId
                self.emitter.emit("message.received", received)
                self.emitter.emit("turn.started", {"trigger": self.turn.trigger, "admission": self.turn.admission})
            self.tools = {**calls_.builtin_tools(loaded, self.delegate), **loaded.tools}
            self.loaded = loaded
            self.check_interrupt()
            first_step = 1
            if resuming:
                messages.extend(self.resume_calls())
                first_step = self.turn.state["step"] + 1
                self.check_interrupt()
            self.loop(loaded, messages, first_step)
        except Parked:
            return
        except Interrupted:
            ending = {"status": Turn.Status.INTERRUPTED, "error": "turn interrupted"}
        except ProviderError as exc:
            ending = {"status": Turn.Status.FAILED, "error": str(exc), "code": exc.code}
        except SessionGone:
            raise
        except DatabaseError as exc:
            log.exception("turn %s hit a database error", self.turn.id)
            drop_broken_connection()
            ending = {"status": Turn.Status.FAILED, "error": f"database error: {type(exc).__name__}: {exc}",
                      "code": "database_error"}
        except Exception as exc:  # a bug must not leave the session stuck in running
            log.exception("turn %s crashed", self.turn.id)
            ending = {"status": Turn.Status.FAILED, "error": f"internal error: {type(exc).__name__}: {exc}",
                      "code": "internal_error"}
        else:
            ending = {"status": Turn.Status.COMPLETED}
        self.settle(messages, ending)

    def settle(self, messages: list[dict[str, Any]], ending: dict[str, str]) -> None:
        """finish(), and if the database refuses that, end the turn with only what is known to be storable.

        The connection may have died, or what the turn produced (its buffered
        events, its messages) may be what the database refused. Either way
        the turn must end now with turn.failed, not 30 s later as worker_lost.
        """
        unsaved = list(self.emitter.buffer)
        try:
            self.finish(messages, **ending)
            return
        except SessionGone:
            raise
        except DatabaseError as exc:
            log.exception("turn %s could not be settled; ending it without its unsaved events", self.turn.id)
            drop_broken_connection()
            error = f"database error: {type(exc).__name__}: {exc}"
        # The turn's own output is dropped (it may be what was refused); its input was stored already.
        self.emitter.buffer = [e for e in unsaved if e[0] in ("message.received", "turn.started")]
        kept = list(Session.objects.filter(pk=self.session.pk).values_list("conversation", flat=True).first() or [])
        if not self.turn.state.get("messages"):
            kept.append({"role": "user", "content": self.turn.message})
        self.finish(kept, status=Turn.Status.FAILED, error=error, code="database_error")

    def system_prompt(self, loaded: LoadedAgent) -> str:
        system = loaded.instructions
        if loaded.skills:
            catalog = "\n".join(f"- {s.name}: {s.description}" for s in loaded.skills.values())
            system += f"\n\nSkills (load one with the load_skill tool when the task calls for it):\n{catalog}"
        if loaded.subagents:
            roster = "\n".join(f"- {a.id}: {a.description}" for a in loaded.subagents.values())
            system += f"\n\nSubagents (hand work to one with the delegate tool):\n{roster}"
        if (as_of := self.as_of()) is not None:
            system += (
                f"\n\nThis session is frozen at {as_of.isoformat()} (asOf): treat that instant as now, "
                "and bound every time range at or before it with absolute ISO-8601 instants."
            )
        return system

    def loop(self, loaded: LoadedAgent, messages: list[dict[str, Any]], first_step: int) -> None:
        provider, model = get_provider(loaded.model)
        max_steps = loaded.config.max_steps or settings.AGENTSITE_MAX_STEPS
        specs = calls_.tool_specs(self.tools)
        system = self.system_prompt(loaded)
        for step in range(first_step, max_steps + 1):
            step_started = time.monotonic()
            self.emitter.emit("step.started", {"step": step})
            self.emitter.flush()
            request = ModelRequest(
                model=model, system=system, messages=messages, tools=specs,
                params=dict(loaded.config.params), should_stop=self.should_stop,
            )
            text, reasoning, signature, calls, step_usage = self.stream_step(provider, request)
            self.usage = add_usage(self.usage, step_usage)
            if reasoning:
                self.emitter.emit("reasoning.completed", {"text": reasoning})
            if text:
                self.emitter.emit("message.completed", {"text": text})
            messages.append(assistant_message(text, reasoning, signature, calls))
            self.emitter.emit("step.completed", {
                "step": step, "durationMs": round((time.monotonic() - step_started) * 1000, 1), "usage": step_usage,
            })
            if not calls:
                return
            messages.extend(self.run_tools(calls, messages, step))
            self.check_interrupt()
        raise ProviderError(f"step limit reached ({max_steps} steps) without a final reply", code="step_limit")

    def stream_step(self, provider, request: ModelRequest):
        text: list[str] = []
        reasoning: list[str] = []
        signature: list[str] = []
        calls: list[ToolCall] = []
        usage = usage_dict()
        for event in provider.stream(request):
            if self.should_stop():
                raise Interrupted()
            if isinstance(event, TextDelta):
                delta = clean_text(event.text)  # a model's NUL or lone surrogate would not store
                text.append(delta)
                self.emitter.emit("message.appended", {"delta": delta})
            elif isinstance(event, ReasoningDelta):
                delta = clean_text(event.text)
                reasoning.append(delta)
                self.emitter.emit("reasoning.appended", {"delta": delta})
            elif isinstance(event, ReasoningSignature):
                signature.append(event.signature)
            elif isinstance(event, ToolCall):
                calls.append(event)
            elif isinstance(event, Usage):
                usage = add_usage(usage, usage_dict(event))
        if self.should_stop():
            raise Interrupted()
        return "".join(text), "".join(reasoning), "".join(signature), calls, usage

    # -- tools -----------------------------------------------------------
    def context(self, call_id: str) -> ToolContext:
        info = SessionInfo(
            id=self.session.id, agent=self.session.agent.slug, mode=self.session.mode,
            principal_id=self.session.principal_id, dry_run=bool(self.session.options.get("dryRun")),
        )
        return ToolContext(session=info, call_id=call_id, as_of=self.as_of(),
                           host=Host(session=self.session, agent=self.session.agent))

    def run_tools(self, calls: list[ToolCall], messages: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
        """Run one step's calls. Parks the turn if any call needs approval."""
        self.called_tools = True
        prepared = calls_.prepare(self.turn, self.tools, calls, self.as_of())
        self.emitter.emit("actions.requested", {"calls": [p.requested() for p in prepared]})
        dry_run = bool(self.session.options.get("dryRun"))
        parked, jobs = [], []
        for p in prepared:
            if p.error is not None:
                continue
            if dry_run and p.tool.effect == "write":
                calls_.stub(p.row, p.tool)  # a stub has no effect, so it needs no approval
            elif p.tool.needs_approval:
                p.row.status = ToolCallRow.Status.AWAITING_APPROVAL
                p.row.save(update_fields=["status"])
                parked.append(p)
                self.emitter.emit("action.approval_requested", {
                    **p.requested(), "description": p.tool.description, "effect": p.tool.effect,
                })
            else:
                jobs.append(p)
        self.emitter.flush()
        durations = dict(zip((p.row.pk for p in jobs), calls_.execute_many(
            [(p.row, p.tool, p.validated, self.context(p.call.call_id)) for p in jobs])))
        for p in prepared:
            if p.row.status not in (ToolCallRow.Status.AWAITING_APPROVAL,):
                self.emitter.emit("action.result", calls_.result_payload(p.row, durations.get(p.row.pk, 0.0)))
        self.emitter.flush()
        if parked:
            self.park(messages, step)
        return [calls_.tool_message(p.row) for p in prepared]

    def park(self, messages: list[dict[str, Any]], step: int) -> None:
        """Store where the turn is and end this run; approvals queue it again."""
        state = {"messages": messages, "step": step, "usage": self.usage,
                 "elapsedMs": round((time.monotonic() - self.started) * 1000, 1)}
        with transaction.atomic():
            Turn.objects.filter(pk=self.turn.pk, status=Turn.Status.RUNNING).update(
                status=Turn.Status.AWAITING_APPROVAL, state=state, lease_until=None,
            )
            still_waiting = ToolCallRow.objects.filter(turn=self.turn, status=ToolCallRow.Status.AWAITING_APPROVAL).exists()
            if not still_waiting:  # every call was decided while we were parking: resume at once
                Turn.objects.filter(pk=self.turn.pk, status=Turn.Status.AWAITING_APPROVAL).update(status=Turn.Status.QUEUED)
                from sessions.admission import enqueue_turn

                transaction.on_commit(lambda: enqueue_turn(self.turn.id))
        raise Parked()

    def resume_calls(self) -> list[dict[str, Any]]:
        """Finish the parked step: run approved calls once, report denied ones."""
        rows = list(ToolCallRow.objects.filter(turn=self.turn).order_by("id"))
        last_step_calls = {c["id"] for c in self.turn.state["messages"][-1].get("toolCalls", [])}
        rows = [r for r in rows if r.call_id in last_step_calls]
        approved = [r for r in rows if r.status == ToolCallRow.Status.APPROVED]
        for row in rows:
            if row.status == ToolCallRow.Status.DENIED:
                who = (row.decided_by or {}).get("principalId", "someone")
                row.error = f"denied by {who}" + (f": {row.reason}" if row.reason else "") + "; do not retry this call"
                row.save(update_fields=["error"])
        self.check_interrupt()
        jobs = []
        for row in approved:
            tool = self.tools.get(row.tool)
            jobs.append((row, tool, tool.input_model.model_validate(row.input), self.context(row.call_id)))
        durations = dict(zip((r.pk for r, *_ in jobs), calls_.execute_many(jobs)))
        for row in rows:
            if row.status in (ToolCallRow.Status.DENIED, ToolCallRow.Status.DONE, ToolCallRow.Status.FAILED) and (
                row.pk in durations or row.status == ToolCallRow.Status.DENIED
            ):
                self.emitter.emit("action.result", calls_.result_payload(row, durations.get(row.pk, 0.0)))
        self.emitter.flush()
        return [calls_.tool_message(r) for r in rows]

    def delegate(self, subagent_id: str, task: str) -> str:
        """Run a subagent's own model loop on `task` with the parent's tools (no delegation)."""
        sub = self.loaded.subagents[subagent_id]
        hooks = self.emitter.hooks
        append_event(self.session.id, "subagent.called", {"subagent": subagent_id, "task": task}, self.turn.id, hooks)
        started = time.monotonic()
        provider, model = get_provider(sub.model)
        tools = {k: v for k, v in self.tools.items() if k != "delegate"}
        specs = calls_.tool_specs(tools)
        messages: list[dict[str, Any]] = [{"role": "user", "content": task}]
        usage = usage_dict()
        reply, error = "", None
        try:
            for _ in range(settings.AGENTSITE_MAX_STEPS):
                request = ModelRequest(model=model, system=sub.instructions, messages=messages, tools=specs,
                                       params=dict(sub.params), should_stop=self.should_stop)
                text, calls, step_usage = _collect(provider.stream(request))
                usage = add_usage(usage, step_usage)
                messages.append(assistant_message(text, "", "", calls))
                if not calls:
                    reply = text
                    break
                for call in calls:  # the subagent's calls run inline, under the session's dryRun and asOf
                    content, is_error = self.run_inline(tools.get(call.name), call)
                    messages.append({"role": "tool", "callId": call.call_id, "name": call.name,
                                     "content": content, "isError": is_error})
            else:
                error = "subagent reached its step limit without an answer"
        except ProviderError as exc:
            error = str(exc)
        self.usage = add_usage(self.usage, usage)
        append_event(self.session.id, "subagent.completed", {
            "subagent": subagent_id, "reply": reply, "error": error, "usage": usage,
            "durationMs": round((time.monotonic() - started) * 1000, 1),
        }, self.turn.id, hooks)
        if error:
            raise RuntimeError(f"subagent {subagent_id} failed: {error}")
        return reply

    def run_inline(self, tool, call: ToolCall) -> tuple[str, bool]:
        """A subagent's tool call: validated and bounded like the parent's, never approval-gated."""
        if tool is None:
            return f"unknown tool {clean_text(call.name)!r}", True
        if unstorable := find_problem(call.input, "input"):
            path, problem = unstorable
            return f"invalid input: {path} {problem}; retry with valid Unicode text and finite numbers", True
        if tool.needs_approval:
            return "this tool needs approval, which a subagent cannot ask for: leave it to the parent", True
        try:
            validated = tool.input_model.model_validate(call.input)
        except ValidationError as exc:
            return calls_.validation_message(exc), True
        if (as_of := self.as_of()) is not None and tool.time_args:
            if refusal := calls_.check_time_args(tool.time_args, validated, as_of):
                return refusal, True
        if self.session.options.get("dryRun") and tool.effect == "write":
            output = calls_.json_safe(tool.dry_run_result) if tool.dry_run_result is not None else calls_.DRY_RUN_ACK
        else:
            try:
                output = calls_.json_safe(tool(validated, self.context(call.call_id)))
            except Exception as exc:
                return f"{type(exc).__name__}: {exc}", True
        return output if isinstance(output, str) else json.dumps(output), False

    # -- settling --------------------------------------------------------
    def finish(self, messages: list[dict[str, Any]], *, status: str, error: str = "", code: str = "") -> None:
        """Record the outcome, release the session and dispatch its next queued turn, atomically."""
        duration_ms = round((time.monotonic() - self.started) * 1000, 1)
        session = self.session
        task = session.mode == Session.Mode.TASK
        pending = self.emitter.take()
        # Calls still parked when the turn ends never run.
        leftovers = ToolCallRow.objects.filter(turn=self.turn, status__in=[
            ToolCallRow.Status.AWAITING_APPROVAL, ToolCallRow.Status.APPROVED, ToolCallRow.Status.REQUESTED,
        ]) if self.called_tools else []
        for row in leftovers:
            row.status, row.error = ToolCallRow.Status.INTERRUPTED, f"not run: {error or 'the turn ended'}"
            row.save(update_fields=["status", "error"])
            pending.append(("action.result", calls_.result_payload(row, 0.0)))
        messages = answer_last_step(messages, self.turn)
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
        settle(session, self.turn, pending, messages=messages, usage=self.usage, status=status, error=error,
               session_status=session_status, hooks=self.emitter.hooks)


def settle(session: Session, turn: Turn, pending, *, messages, usage, status, error, session_status, hooks=()) -> None:
    """End a turn: its last events, the conversation, the session released and its next turn dispatched."""
    with transaction.atomic():
        append_events(session.id, pending, turn.id, hooks=hooks)
        update: dict[str, Any] = {"status": session_status, "active_turn": None, "updated_at": timezone.now()}
        if messages is not None:
            # A failed turn's input stays in the conversation: the next turn's model sees what was asked.
            update["conversation"] = messages
        if usage:
            current = Session.objects.filter(pk=session.pk).values_list("usage", flat=True).first() or {}
            update["usage"] = add_usage(current, usage)
        Session.objects.filter(pk=session.pk, active_turn=turn.pk).update(**update)
        Turn.objects.filter(pk=turn.pk).update(
            status=status, error=error, usage=usage or {}, ended_at=timezone.now(), lease_until=None, state={},
        )
        if session.mode != Session.Mode.TASK:
            dispatch_next(session.id)


def answer_last_step(messages: list[dict[str, Any]], turn: Turn) -> list[dict[str, Any]]:
    """Add the results of a last step that never got them (a turn ended while parked).

    The stored conversation must answer every tool call: providers refuse a
    conversation with an unanswered call, so the session's next turn would fail.
    """
    last = messages[-1] if messages else None
    if not last or last.get("role") != "assistant" or not last.get("toolCalls"):
        return messages
    ids = [c["id"] for c in last["toolCalls"]]
    rows = {r.call_id: r for r in ToolCallRow.objects.filter(turn=turn, call_id__in=ids)}
    return messages + [calls_.tool_message(rows[i]) for i in ids if i in rows]


def assistant_message(text: str, reasoning: str, signature: str, calls: list[ToolCall]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning:
        message["reasoning"] = reasoning
    if signature:
        message["reasoningSignature"] = signature
    if calls:
        # Cleaned like the ToolCall rows (tools.prepare), so the stored conversation matches them.
        message["toolCalls"] = [{"id": calls_.clean_text(c.call_id), "name": calls_.clean_text(c.name),
                                 "input": calls_.json_safe(c.input)} for c in calls]
    return message


def _collect(stream) -> tuple[str, list[ToolCall], dict[str, int]]:
    text, calls, usage = [], [], usage_dict()
    for event in stream:
        if isinstance(event, TextDelta):
            text.append(clean_text(event.text))
        elif isinstance(event, ToolCall):
            calls.append(event)
        elif isinstance(event, Usage):
            usage = add_usage(usage, usage_dict(event))
    return "".join(text), calls, usage


