"""Running tool calls: validation, asOf bounds, dry runs, approvals, exactly-once execution.

Every call (a subagent's included) is stored as a ToolCall row before it runs
and moved to `running` with a conditional update, so a call is never executed
twice (after a crash it is reported as interrupted, never retried). Calls
that need approval are stored as `awaiting_approval`; the turn then ends its
run and a new task resumes it once every parked call is decided.

The session's options (dryRun, asOf) and a call's ToolContext are built here
only, for turns and direct calls alike.
"""
from __future__ import annotations

import contextvars
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from django.db import close_old_connections, connection
from pydantic import BaseModel, ValidationError

from agents.definitions import SessionInfo, Tool, ToolContext
from agents.providers.base import ToolCall as ModelToolCall
from agents.providers.base import ToolSpec
from sessions.models import Session, ToolCall, Turn
from sessions.eventlog.storable import clean, clean_text, find_problem
from sessions.host import Host
from sessions.turn.extensions import observers

DRY_RUN_ACK = "Operation acknowledged."
SUBAGENT_CANNOT_ANSWER = "a subagent cannot ask the person: leave the question to the parent"
EXECUTION_UNAVAILABLE = "execution_unavailable"

# How NUL, lone surrogates and non-finite numbers look in json.dumps output (a hint: clean() decides).
UNSTORABLE_IN_DUMP = re.compile(r"\\u(?:0000|d[89a-f])|NaN|Infinity")


def json_safe(value: Any) -> Any:
    """`value` as JSON both databases store (tool inputs and outputs, rows and events)."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    try:
        dumped = json.dumps(value)
    except (TypeError, ValueError):
        value = json.loads(json.dumps(value, default=str))
        dumped = None
    if dumped is None or UNSTORABLE_IN_DUMP.search(dumped):
        return clean(value)
    return value


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


def validation_message(exc: ValidationError) -> str:
    return "invalid input: " + "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'input'}: {e['msg']}" for e in exc.errors()
    )


def execution_problem(name: str, tool: Tool) -> str | None:
    """Fail closed: a tool meant to run in the agent's workspace never silently runs on the server."""
    if tool.execution == "server":
        return None
    return (f"{EXECUTION_UNAVAILABLE}: tool {name!r} declares execution={tool.execution!r}: it runs as a script in "
            f"the agent's workspace (`.tools/{name} '<json input>'` with the shell tool), never on the server; "
            "it was not run")


def stub_output(tool: Tool) -> Any:
    """What a write tool returns in a dryRun session instead of running."""
    return json_safe(tool.dry_run_result) if tool.dry_run_result is not None else DRY_RUN_ACK


def tool_context(session: Session | None, call_id: str, agent: Any = None, turn_id: str = "",
                 should_stop: Callable[[], bool] | None = None, origin: dict[str, Any] | None = None) -> ToolContext:
    """The `ctx` a tool function gets: the session, its frozen instant, `ctx.host`, whether to stop.

    The host knows the turn and call, which its artifacts are attributed to.
    """
    stop = should_stop or (lambda: False)
    if session is None:
        return ToolContext(session=None, call_id=call_id,
                           host=Host(session=None, agent=agent, call_id=call_id, origin=origin or None),
                           should_stop=stop)
    options = session.run_options
    info = SessionInfo(id=session.id, agent=session.agent.slug, mode=session.mode,
                       principal_id=session.principal_id, dry_run=options.dry_run,
                       abs=dict(session.ab_variants or {}))
    return ToolContext(session=info, call_id=call_id, as_of=options.as_of,
                       host=Host(session=session, agent=session.agent, turn_id=turn_id, call_id=call_id),
                       should_stop=stop)


def tool_specs(tools: dict[str, Tool]) -> list[ToolSpec]:
    return [ToolSpec(name, t.description, t.input_schema()) for name, t in sorted(tools.items())]


def result_payload(row: ToolCall, duration_ms: float) -> dict[str, Any]:
    payload: dict[str, Any] = {"callId": row.call_id, "toolName": row.tool, "durationMs": round(duration_ms, 1),
                               "stubbed": row.stubbed}
    if row.status == ToolCall.Status.DONE:
        payload["output"] = row.output
    else:
        payload["error"] = row.error
    return payload


def tool_message(row: ToolCall, call_id: str | None = None) -> dict[str, Any]:
    """The neutral `tool` message the model sees for a finished call."""
    ok = row.status == ToolCall.Status.DONE
    content = row.output if ok else row.error
    return {"role": "tool", "callId": call_id or row.call_id, "name": row.tool,
            "content": content if isinstance(content, str) else json.dumps(content), "isError": not ok}


def execute(row: ToolCall, tool: Tool, validated: BaseModel, ctx: ToolContext) -> float:
    """Run one call exactly once; returns its duration in ms. Errors become the call's error."""
    started = time.monotonic()
    if not row.start():  # already run (or being run) elsewhere: never twice
        row.refresh_from_db()
        return 0.0
    with ExitStack() as observed:  # each observer wraps the run (a span is current around it)
        for observer in observers:
            observed.enter_context(observer.tool_call(row))
        try:
            output = json_safe(tool(validated, ctx))
        except Exception as exc:  # the model sees tool errors and can act on them
            row.fail(clean_text(f"{type(exc).__name__}: {exc}"))
        else:
            row.succeed(output)
    return (time.monotonic() - started) * 1000


def execute_many(jobs: list[tuple[ToolCall, Tool, BaseModel, ToolContext]]) -> list[float]:
    """Run independent calls of one step in parallel threads (each with its own DB connection)."""
    if len(jobs) <= 1:
        return [execute(*job) for job in jobs]

    def run(job):
        try:
            return execute(*job)
        finally:
            connection.close()

    # Each thread runs in a copy of the caller's context: the turn's log ids and trace span are its parents.
    contexts = [contextvars.copy_context() for _ in jobs]
    with ThreadPoolExecutor(max_workers=min(8, len(jobs)), thread_name_prefix="tool") as pool:
        durations = list(pool.map(lambda job, context: context.run(run, job), jobs, contexts))
    close_old_connections()
    return durations


@dataclass
class Prepared:
    call: ModelToolCall
    row: ToolCall
    tool: Tool | None
    validated: BaseModel | None  # None unless the call may run
    shown: Any  # the input as events show it
    family: str = ""

    def requested(self) -> dict[str, Any]:
        requested = {"callId": self.row.call_id, "toolName": self.row.tool, "input": self.shown}
        if self.family == "workspace":
            requested["family"] = self.family
        return requested

    def approval_requested(self) -> dict[str, Any]:
        return approval_requested(self.row, self.requested(), self.tool.description if self.tool else "",
                                  self.tool.effect if self.tool else "")


def approval_requested(row: ToolCall, requested: dict[str, Any], description: str, effect: str) -> dict[str, Any]:
    """What `action.approval_requested` says of a parked call; a question's carries its text and options."""
    data = {**requested, "description": description, "effect": effect}
    if row.question:
        data.update(kind="question", question=row.input.get("question", ""), options=row.input.get("options") or [])
    return data


class Executor:
    """Validates, stores and runs the tool calls of one agent loop: a turn's agent or one of its subagents.

    `can_park`: a gated call may wait for approval (a subagent cannot ask: its
    gated calls are refused). `call_prefix` keeps a subagent's call ids apart
    from the parent's within the turn. `families` names each tool's family
    (sessions.turn.toolset); `execution="agent"` tools are callable by name only to
    be refused, and never offered. `should_stop` is the turn's interrupt check,
    handed to long-running tools (`shell`).
    """

    def __init__(self, session: Session, turn: Turn, tools: dict[str, Tool], *, can_park: bool = True,
                 call_prefix: str = "", name_tools: bool = True, families: dict[str, str] | None = None,
                 should_stop: Callable[[], bool] | None = None):
        self.session = session
        self.turn = turn
        self.tools = tools
        self.options = session.run_options
        self.can_park = can_park
        self.call_prefix = call_prefix
        self.name_tools = name_tools
        self.families = families or {}
        self.should_stop = should_stop

    def context(self, call_id: str) -> ToolContext:
        return tool_context(self.session, call_id, turn_id=self.turn.id, should_stop=self.should_stop)

    def specs(self) -> list[ToolSpec]:
        """The tools the model is offered."""
        return tool_specs({name: t for name, t in self.tools.items() if t.execution == "server"})

    def check(self, name: str, raw: Any) -> tuple[Tool | None, BaseModel | None, str | None]:
        """The tool, its validated input, or why the call cannot run."""
        tool = self.tools.get(name)
        if tool is None:
            names = sorted(n for n, t in self.tools.items() if t.execution == "server")
            offered = f"; available tools: {', '.join(names) or 'none'}" if self.name_tools else ""
            return None, None, f"unknown tool {name!r}{offered}"
        if unstorable := find_problem(raw, "input"):
            path, problem = unstorable
            return tool, None, f"invalid input: {path} {problem}; retry with valid Unicode text and finite numbers"
        try:
            validated = tool.input_model.model_validate(raw)
        except ValidationError as exc:
            return tool, None, validation_message(exc)
        if self.options.as_of is not None and tool.time_args:
            if refusal := check_time_args(tool.time_args, validated, self.options.as_of):
                return tool, validated, refusal
        return tool, validated, execution_problem(name, tool)

    def initial_status(self, tool: Tool) -> dict[str, Any]:
        """Where a valid call starts: parked (a question, or gated), stubbed (dryRun write), or ready to run."""
        if tool.question:
            if not self.can_park:
                return {"status": ToolCall.Status.FAILED, "error": SUBAGENT_CANNOT_ANSWER}
            return {"status": ToolCall.Status.AWAITING_APPROVAL, "question": True}
        if self.options.dry_run and tool.effect == "write":
            # A stub has no effect, so it needs no approval.
            return {"status": ToolCall.Status.DONE, "stubbed": True, "output": stub_output(tool)}
        if tool.needs_approval:
            if not self.can_park:
                return {"status": ToolCall.Status.FAILED,
                        "error": "this tool needs approval, which a subagent cannot ask for: leave it to the parent"}
            return {"status": ToolCall.Status.AWAITING_APPROVAL}
        return {"status": ToolCall.Status.REQUESTED}

    def prepare(self, calls: list[ModelToolCall]) -> list[Prepared]:
        """Check each call and store them all as ToolCall rows (one INSERT).

        Input holding text or numbers the databases cannot store is refused like
        any invalid input (the model sees why and can retry); what is stored and
        shown of it is a cleaned copy.
        """
        prepared, rows = [], []
        for call in calls:
            tool, validated, error = self.check(call.name, call.input)
            shown = json_safe(validated if validated is not None else call.input)
            fields = {"status": ToolCall.Status.FAILED, "error": error} if error else self.initial_status(tool)
            row = ToolCall(session_id=self.turn.session_id, turn=self.turn,
                           call_id=self.call_prefix + clean_text(call.call_id), tool=clean_text(call.name),
                           input=shown if isinstance(shown, dict) else {"raw": shown}, **fields)
            rows.append(row)
            prepared.append(Prepared(call, row, tool, None if error else validated, shown,
                                     self.families.get(call.name, "")))
        ToolCall.objects.bulk_create(rows)
        return prepared

    def run(self, prepared: list[Prepared]) -> dict[int, float]:
        """Run the calls ready to run, in parallel; their durations (ms) by row id."""
        jobs = [(p.row, p.tool, p.validated, self.context(p.row.call_id)) for p in prepared
                if p.row.status == ToolCall.Status.REQUESTED]
        return dict(zip((job[0].pk for job in jobs), execute_many(jobs)))

    def explain_denials(self, rows: list[ToolCall]) -> None:
        """A denied call's error is its denial, so the model sees who said no and why."""
        for row in rows:
            if row.status == ToolCall.Status.DENIED:
                row.explain_denial("; do not retry this call")

    def run_approved(self, rows: list[ToolCall]) -> dict[int, float]:
        """Run a parked step's approved calls, once each; their durations (ms) by row id."""
        jobs = []
        for row in rows:
            if row.status == ToolCall.Status.APPROVED:
                tool = self.tools.get(row.tool)
                jobs.append((row, tool, tool.input_model.model_validate(row.input), self.context(row.call_id)))
        return dict(zip((job[0].pk for job in jobs), execute_many(jobs)))
