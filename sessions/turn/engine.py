"""The turn engine: the django-q task that runs one turn.

`run_turn` claims the turn and runs it: the agent's loop (sessions.turn.runner),
with the turn's start events, parking when tool calls need approval, and
settling at the end through sessions.turn.lifecycle. A parked turn stores its
messages and step on the Turn; approving its calls queues it again, and the
rest of the turn runs in whichever worker claims it. Subagents run the same
loop, from inside the `delegate` tool. What features add to a turn (a trigger's
own run or reply, variants, observers) comes through sessions.turn.extensions.
"""
from __future__ import annotations

import functools
import logging
import threading
import time
from contextlib import ExitStack
from typing import Any

from django.conf import settings
from django.db import DatabaseError

from agents.discovery import LoadedAgent, load_deployment, release
from agents.providers.base import ProviderError
from agents.providers.claude_agent_names import natives as runtime_natives
from agents.providers.runtimes import runtime_of
from agents.secrets.store import acting_for
from agents.workspaces.filesystems import WorkspaceError
from sessions.plumbing import logcontext
from sessions.turn import affinity, extensions, lifecycle
from sessions.eventlog.events import SessionGone
from sessions.models import EventType, Session, ToolCall, Turn
from sessions.plumbing.processes import process_id
from sessions.plumbing.taskqueue import runs_inline
from sessions.spend.budgets import payer_of
from sessions.spend.meter import Meter
from sessions.turn.runner import Emitter, Interrupted, InterruptWatch, Parked, Profile, Runner
from sessions.sql.turns import read_session, read_turn
from sessions.turn.timings import TurnClock
from sessions.turn.tools import Executor, result_payload, tool_message
from sessions.turn.toolset import Toolset, toolset
from sessions.turn.leases import Heartbeat, drop_broken_connection, lease_seconds
from sessions.turn.usage import zero
from sessions.workspaces.store import Workspace, WorkspaceUnavailable, file_record, open_workspace, write_sent_files

log = logging.getLogger(__name__)

# The turn's own input events: kept even when what the turn produced cannot be stored.
INPUT_EVENTS = (EventType.MESSAGE_RECEIVED, EventType.TURN_STARTED)


def run_turn(turn_id: str) -> None:
    """The django-q task: claim the turn and run it; a turn already claimed is left alone."""
    try:
        won = Turn.claim(turn_id, process_id(), lease_seconds())
    except DatabaseError:  # a connection that died while the worker was idle: once more on a fresh one
        drop_broken_connection()
        won = Turn.claim(turn_id, process_id(), lease_seconds())
    if not won:
        return
    claimed = time.monotonic()
    turn = load_turn(turn_id)
    if turn is None:  # its session was deleted in between
        return
    if runtime_of(turn.session.model) and not runs_inline():  # a worker keeps the runtime's child for the next
        affinity.listen(run_turn)
        if not turn.state and (keeper := affinity.keeper_of(turn, kept_seconds())):
            if affinity.hand_over(turn, keeper):
                return
            claimed, turn = time.monotonic(), load_turn(turn_id)  # read again: a stop meanwhile counts
            if turn is None:
                return
    handler = extensions.triggers.get(turn.trigger)
    try:
        with Heartbeat(turn), logcontext.about(sessionId=turn.session_id, turnId=turn_id), ExitStack() as observed:
            for observer in extensions.observers:  # a trace span, current for the whole run
                observed.enter_context(observer.turn_run(turn))
            observed.enter_context(acting_for(turn.session.deployment.agent.slug))
            if turn.trace_id:
                logcontext.note(traceId=turn.trace_id)
            if handler is not None and handler.run is not None:  # e.g. a parked direct tool call, now decided
                handler.run(turn)
            else:
                TurnRunner(turn, claimed).run()
    except SessionGone:
        log.info("session of turn %s was deleted mid-turn", turn_id)


def kept_seconds() -> float:
    """How long after its turn a runtime child waits for the session's next (0: none waits)."""
    if settings.AGENTSITE_CLAUDE_AGENT_KEPT <= 0:
        return 0.0
    return settings.AGENTSITE_CLAUDE_AGENT_KEEP_SECONDS


def load_turn(turn_id: str) -> Turn | None:
    """The turn with its session and release.

    Two written-out reads (sessions.sql.turns); the release comes from the
    process's cache, keyed by the hash read with the session.
    """
    turn = read_turn(turn_id)
    if turn is None:
        return None
    session = read_session(turn.session_id)
    if session is None:
        return None
    session.deployment = release(session.deployment_id, session.release_hash)
    turn.session = session
    return turn


class TurnRunner:
    """One run of a turn: its start, the agent's loop, parking, and its end."""

    def __init__(self, turn: Turn, claimed: float | None = None):
        """`claimed`: when this worker's claim of the turn won (monotonic)."""
        self.turn = turn
        self.session: Session = turn.session
        self.interrupts = InterruptWatch(turn, fresh=True)  # run_turn read the row after its claim
        self.emitter = Emitter(self.session.id, turn.id, settings.AGENTSITE_DELTA_FLUSH_SECONDS,
                               stop_flag=self.interrupts.observe)
        state = turn.state or {}
        self.usage_so_far = state["usage"] if "usage" in state else zero()  # a resumed turn's steps so far
        self.started = time.monotonic() - state.get("elapsedMs", 0) / 1000
        self.clock = TurnClock(turn.created_at, time.monotonic() if claimed is None else claimed, state.get("timings"))
        self.loop_ended: float | None = None
        # Whether ToolCall rows may exist for this turn (saves a query on plain turns).
        self.called_tools = bool(state.get("messages"))
        self.runner: Runner | None = None
        # The turn's model calls on their way to the ledger (sessions.spend); a parked run's uncharged ones.
        self.meter = Meter(waiting=[tuple(call) for call in state.get("unchargedCalls", [])])
        self.workspace: Workspace | None = None
        self.toolset: Toolset | None = None
        self._usage_lock = threading.Lock()  # delegations may run in parallel tool threads

    @property
    def usage(self):
        return self.runner.usage if self.runner else self.usage_so_far

    @property
    def reported_usage(self):
        """`usage` with `byModel` when more than one model answered (what the turn's end reports and stores)."""
        return self.runner.reported_usage() if self.runner else self.usage_so_far

    def system_prompt(self, loaded: LoadedAgent, instructions: str | None = None,
                      natives: frozenset[str] | None = None) -> str:
        """`instructions`: the session's variant's, when an A/B experiment replaces the agent's;
        `natives`: on another runtime, what it does with tools of its own (`skills`, `subagents`:
        sessions.claude_agent), which it lists itself; its workspace brief is its own too."""
        system = loaded.instructions if instructions is None else instructions
        if loaded.skills and "skills" not in (natives or ()):
            catalog = "\n".join(f"- {s.name}: {s.description}" for s in loaded.skills.values())
            system += f"\n\nSkills (load one with the load_skill tool when the task calls for it):\n{catalog}"
        if loaded.subagents and "subagents" not in (natives or ()):
            roster = "\n".join(f"- {a.id}: {a.description}" for a in loaded.subagents.values())
            system += f"\n\nSubagents (hand work to one with the delegate tool):\n{roster}"
        if (as_of := self.session.run_options.as_of) is not None:
            system += (
                f"\n\nThis session is frozen at {as_of.isoformat()} (asOf): treat that instant as now, "
                "and bound every time range at or before it with absolute ISO-8601 instants."
            )
        return system + (self.workspace_brief() if natives is None else "")

    def workspace_brief(self) -> str:
        brief = self.workspace.brief() if self.workspace else ""
        return f"\n\n{brief}" if brief else ""

    # -- the run ---------------------------------------------------------------
    def run(self) -> None:
        resuming = bool(self.turn.state.get("messages"))
        if resuming:
            messages = list(self.turn.state["messages"])
        else:
            messages = list(self.session.conversation) + [{"role": "user", "content": self.turn.message}]
        try:
            loaded = load_deployment(self.session.deployment)
            self.loaded = loaded
            self.emitter.hooks = loaded.hooks
            # The session is already `running`: activating the turn set that (lifecycle.dispatch_next).
            sent = [] if resuming else list(self.turn.workspace_files or [])
            if not resuming:
                received = {"source": self.turn.trigger, "text": self.turn.message}
                if self.turn.source_ref:
                    received[f"{self.turn.trigger}Id"] = self.turn.source_ref  # reminderId, scheduleId
                handler = extensions.triggers.get(self.turn.trigger)
                if handler is not None and handler.received is not None:  # e.g. who sent an agent's message
                    received.update(handler.received(self.turn))
                if sent:
                    received["workspaceFiles"] = [file_record(f) for f in sent]
                self.emitter.emit(EventType.MESSAGE_RECEIVED, received)
                self.emitter.emit(EventType.TURN_STARTED, {"trigger": self.turn.trigger,
                                                           "admission": self.turn.admission})
            preparing = time.monotonic()
            self.clock.span("load", "", self.clock.claimed, preparing)
            try:
                self.workspace = open_workspace(self.session, loaded, files=bool(sent))
                write_sent_files(self.workspace, sent)
                self.toolset = toolset(loaded, self.workspace, self.delegate)
                self.tools = self.toolset.tools
            finally:  # a workspace that cannot be built is timed too
                self.clock.span("workspace", "", preparing)
            chosen = extensions.variants().choose(loaded, self.session.ab_variants)  # the session's A/B variants
            # The session's selection (chosen at its creation, moved only by a handoff); A/B variants chose it then.
            model = self.session.model or chosen.model
            natives = runtime_natives(loaded) if runtime_of(model) else None
            profile = Profile(model, self.system_prompt(loaded, chosen.instructions, natives),
                              chosen.params,
                              loaded.config.max_steps or settings.AGENTSITE_MAX_STEPS,
                              fallback=tuple(loaded.fallback), declared_for=chosen.model)
            executor = Executor(self.session, self.turn, self.tools, families=self.toolset.families,
                                should_stop=self.interrupts.should_stop)
            # A parked turn resumes on the model its loop was on (a fallback it had fallen over to).
            self.meter = Meter(payer_of(self.session), self.meter.take(),
                               warn=lambda found: self.emitter.emit(EventType.BUDGET_WARNING, found))
            if runtime_of(profile.model):
                self.runner = self.runtime_leg(profile, executor)
            else:
                self.runner = Runner(profile, executor, self.emitter, self.interrupts, usage=self.usage_so_far,
                                     clock=self.clock, model=self.turn.state.get("model"),
                                     usage_by_model=self.turn.state.get("usageByModel"), meter=self.meter)
            self.interrupts.check()
            first_step = 1
            if resuming:
                if "runtime" not in self.turn.state:  # another runtime's leg resumes its own calls
                    messages.extend(self.resume_calls())
                first_step = self.turn.state["step"] + 1
                self.interrupts.check()
            self.runner.run(messages, first_step)
        except Parked as parked:
            self.park(messages, parked.step, parked.tools, parked.resume)
            return
        except Interrupted:
            ending = {"status": Turn.Status.INTERRUPTED, "error": "turn interrupted"}
        except ProviderError as exc:
            ending = {"status": Turn.Status.FAILED, "error": str(exc), "code": exc.code}
        except (WorkspaceUnavailable, WorkspaceError) as exc:
            ending = {"status": Turn.Status.FAILED, "error": f"workspace: {exc}", "code": "workspace_error"}
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

    def runtime_leg(self, profile: Profile, executor: Executor):
        """The loop of a session on another agent runtime (`claude-agent:`), in place of the own loop."""
        # Loaded with the first such turn: a worker that runs none does not carry the leg (its HTTP
        # server, its SDK bridge); the SDK itself loads later still, when the runtime starts.
        from sessions.claude_agent.leg import ClaudeAgentLeg

        self.called_tools = True  # its calls' rows: any left unsettled are ended with the turn
        return ClaudeAgentLeg(profile, executor, self.emitter, self.interrupts, self.usage_so_far, self.meter,
                              self.workspace, parked=self.turn.state.get("runtime"), clock=self.clock)

    def resume_calls(self) -> list[dict[str, Any]]:
        """The parked step's calls, decided: approved ones run once, denied ones report the denial."""
        self.called_tools = True
        last_step_calls = {c["id"] for c in self.turn.state["messages"][-1].get("toolCalls", [])}
        rows = [r for r in ToolCall.objects.filter(turn=self.turn).order_by("id") if r.call_id in last_step_calls]
        self.clock.resumed(max((r.decided_at for r in rows if r.decided_at), default=None))
        return self.runner.resume_tools(rows)

    def park(self, messages: list[dict[str, Any]], step: int, waiting_on: list[str],
             runtime: dict[str, Any] | None = None) -> None:
        """Store where the turn is and end this run; deciding the calls queues it again."""
        state = {"messages": messages, "step": step, "usage": self.usage,
                 "elapsedMs": round((time.monotonic() - self.started) * 1000, 1),
                 "timings": self.clock.park(waiting_on),
                 "model": self.runner.model, "usageByModel": self.runner.usage_by_model,
                 "unchargedCalls": self.meter.take()}
        if runtime is not None:
            state["runtime"] = runtime
        lifecycle.park(self.turn, state, self.emitter.take(), self.emitter.hooks)

    def delegate(self, subagent_id: str, task: str, call_id: str) -> str:
        """Run a subagent's loop on `task` with the parent's tools (no delegation, no approvals).

        Its tool calls are ToolCall rows of this turn (ids prefixed with the
        delegate call's) with their own `action.*` events, tagged with the subagent.
        """
        self.called_tools = True
        sub = self.loaded.subagents[subagent_id]
        emitter = Emitter(self.session.id, self.turn.id, settings.AGENTSITE_DELTA_FLUSH_SECONDS,
                          hooks=self.emitter.hooks, subagent=subagent_id)
        emitter.emit(EventType.SUBAGENT_CALLED, {"subagent": subagent_id, "task": task})
        started = time.monotonic()
        tools = {k: v for k, v in self.tools.items() if k != "delegate"}
        executor = Executor(self.session, self.turn, tools, can_park=False, call_prefix=f"{call_id}/",
                            name_tools=False, families=self.toolset.families, should_stop=self.interrupts.should_stop)
        # A subagent works in the parent's workspace, with the same brief.
        runner = Runner(Profile(sub.model, sub.instructions + self.workspace_brief(), dict(sub.params),
                                settings.AGENTSITE_MAX_STEPS),
                        executor, emitter, self.interrupts, usage=zero(), meter=self.meter)
        reply, error = "", None
        with ExitStack() as observed:
            for observer in extensions.observers:
                observed.enter_context(observer.subagent(subagent_id))
            try:
                reply = runner.run([{"role": "user", "content": task}])
            except ProviderError as exc:
                error = str(exc)
            except Interrupted:
                error = "turn interrupted"
        with self._usage_lock:
            self.runner.add_usage_of(runner)
        emitter.emit(EventType.SUBAGENT_COMPLETED, {
            "subagent": subagent_id, "reply": reply, "error": error, "usage": runner.usage,
            "durationMs": round((time.monotonic() - started) * 1000, 1),
        })
        emitter.flush()
        if error:
            raise RuntimeError(f"subagent {subagent_id} failed: {error}")
        return reply

    # -- the end ---------------------------------------------------------------
    def settle(self, messages: list[dict[str, Any]], ending: dict[str, str]) -> None:
        """finish(), and if the database refuses that, end the turn with only what is known to be storable.

        The connection may have died, or what the turn produced (its buffered
        events, its messages) may be what the database refused. Either way
        the turn must end now with turn.failed, not 30 s later as worker_lost.
        """
        if self.loop_ended is None:
            self.loop_ended = time.monotonic()
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
        self.emitter.buffer = [e for e in unsaved if e[0] in INPUT_EVENTS]
        kept = list(Session.objects.filter(pk=self.session.pk).values_list("conversation", flat=True).first() or [])
        if not self.turn.state.get("messages"):
            kept.append({"role": "user", "content": self.turn.message})
        self.finish(kept, status=Turn.Status.FAILED, error=error, code="database_error")

    def finish(self, messages: list[dict[str, Any]], *, status: str, error: str = "", code: str = "") -> None:
        """Report calls left unrun, then settle: outcome, events, conversation, lock released, next turn."""
        duration_ms = round((time.monotonic() - self.started) * 1000, 1)
        pending = self.emitter.take()
        if self.called_tools:  # calls still parked (or never started) when the turn ends never run
            for row in ToolCall.objects.filter(turn=self.turn, status__in=ToolCall.RUNNABLE):
                if row.abandon(f"not run: {error or 'the turn ended'}"):
                    pending.append((EventType.ACTION_RESULT, result_payload(row, 0.0)))
        messages = answer_last_step(messages, self.turn)
        timings = self.clock.finish(self.loop_ended if self.loop_ended is not None else time.monotonic())
        for observer in extensions.observers:
            observer.turn_ended(status, code, self.usage)
        usage = self.reported_usage
        events, session_status = lifecycle.ending_events(self.session, status, error, code, usage, duration_ms,
                                                         timings, self.turn.trace_id)
        also = None
        handler = extensions.triggers.get(self.turn.trigger)
        if handler is not None and handler.answered is not None:  # e.g. an agent's message: its sender hears back
            also = functools.partial(handler.answered, self.turn, self.session.deployment.agent.slug, messages,
                                     status, error)
        lifecycle.settle(self.session, self.turn, pending + events, status=status, error=error, messages=messages,
                         usage=usage, count_usage=True, session_status=session_status,
                         hooks=self.emitter.hooks, timings=timings, also=also,
                         spend=self.meter.take())


def answer_last_step(messages: list[dict[str, Any]], turn: Turn) -> list[dict[str, Any]]:
    """Add the results of a last step that never got them (a turn ended while parked).

    The stored conversation must answer every tool call: providers refuse a
    conversation with an unanswered call, so the session's next turn would fail.
    """
    last = messages[-1] if messages else None
    if not last or last.get("role") != "assistant" or not last.get("toolCalls"):
        return messages
    ids = [c["id"] for c in last["toolCalls"]]
    rows = {r.call_id: r for r in ToolCall.objects.filter(turn=turn, call_id__in=ids)}
    return messages + [tool_message(rows[i]) for i in ids if i in rows]
