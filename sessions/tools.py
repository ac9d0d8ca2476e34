"""Running tool calls: validation, asOf bounds, dry runs, approvals, built-ins.

Every call is stored as a ToolCall row before it runs and moved to
`running` with a conditional update, so a call is never executed twice
(after a crash it is reported as interrupted, never retried). Calls that
need approval are parked as `awaiting_approval`; the turn then ends its run
and a new task resumes it once every parked call is decided.
"""
from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable

from django.db import close_old_connections, connection
from django.utils import timezone
from pydantic import BaseModel, Field, ValidationError

from agents.discovery import LoadedAgent
from agents.providers.base import ToolCall as ModelToolCall
from agents.providers.base import ToolSpec
from agents.sdk import Tool, ToolContext
from agents.skills import safe_relative
from sessions.models import ToolCall
from sessions.storable import clean, clean_text, find_problem

DRY_RUN_ACK = "Operation acknowledged."

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


# --- built-in tools ------------------------------------------------------------


class LoadSkillInput(BaseModel):
    name: str = Field(description="The skill to load")


class ReadSkillFileInput(BaseModel):
    skill: str = Field(description="The skill the file belongs to")
    path: str = Field(description="The file's path inside the skill, e.g. references/checklist.md")


class DelegateInput(BaseModel):
    subagent: str = Field(description="The subagent's id")
    task: str = Field(description="What the subagent should do, with everything it needs to know")


class RemindMeInput(BaseModel):
    delay: str | None = Field(default=None, description="Fire once after this long, e.g. '20m', '2h'")
    every: str | None = Field(default=None, description="Fire repeatedly at this interval, e.g. '30m'")
    cron: str | None = Field(default=None, description="Fire on this 5-field UTC cron schedule")
    prompt: str = Field(description="The message you will receive when it fires")
    until: str = Field(default="", description="For repeating reminders: when to stop (stated back to you)")


def remind_me(input: RemindMeInput, ctx) -> dict[str, Any]:
    reminder = ctx.host.reminders.create(delay=input.delay, every=input.every, cron=input.cron, prompt=input.prompt,
                                         until=input.until, created_by={"tool": "remind_me"})
    return {"reminderId": reminder.id, "nextFireAt": reminder.next_fire_at.isoformat()}


class CancelReminderInput(BaseModel):
    reminder_id: str = Field(description="The reminderId that remind_me returned")


def cancel_reminder_tool(input: CancelReminderInput, ctx) -> dict[str, Any]:
    """Only this conversation's reminders: the model acts on its own `until`."""
    mine = {r.id for r in ctx.host.reminders.list()}
    if input.reminder_id not in mine:
        raise LookupError(f"no armed reminder {input.reminder_id!r} in this conversation; armed: {', '.join(sorted(mine)) or 'none'}")
    return {"reminderId": input.reminder_id, "cancelled": ctx.host.reminders.cancel(input.reminder_id)}


def builtin_tools(loaded: LoadedAgent, delegate: Callable[[str, str], str] | None) -> dict[str, Tool]:
    """The built-ins this agent gets: skill loading with skills, delegation with subagents,
    `remind_me` and `cancel_reminder` when the agent opts in."""
    tools: dict[str, Tool] = {}
    if loaded.config.reminders_tool:
        tools["remind_me"] = Tool("Set a reminder that wakes this conversation later with a prompt: exactly one of "
                                  "delay, every or cron.", RemindMeInput, remind_me, effect="write")
        tools["cancel_reminder"] = Tool("Cancel one of this conversation's reminders, e.g. when its `until` "
                                        "condition is met.", CancelReminderInput, cancel_reminder_tool, effect="write")
    if loaded.skills:
        catalog = "; ".join(f"{s.name}: {s.description}" for s in loaded.skills.values())

        def load_skill(input: LoadSkillInput, ctx) -> str:
            skill = loaded.skills.get(input.name)
            if skill is None:
                raise LookupError(f"no skill {input.name!r}; skills: {', '.join(loaded.skills)}")
            listing = "".join(f"\n- {f}" for f in sorted(skill.files))
            return skill.markdown + (f"\n\nFiles (read with read_skill_file):{listing}" if listing else "")

        tools["load_skill"] = Tool(f"Load a skill's full instructions by name. Skills: {catalog}",
                                   LoadSkillInput, load_skill)
        if any(s.files for s in loaded.skills.values()):
            def read_skill_file(input: ReadSkillFileInput, ctx) -> str:
                skill = loaded.skills.get(input.skill)
                path = safe_relative(input.path)
                if skill is None:
                    raise LookupError(f"no skill {input.skill!r}")
                if path is None or path not in skill.files:
                    raise LookupError(f"skill {input.skill!r} has no file {input.path!r}; files: {', '.join(sorted(skill.files))}")
                return skill.files[path]

            tools["read_skill_file"] = Tool("Read a file that ships with a skill.", ReadSkillFileInput, read_skill_file)
    if loaded.subagents and delegate is not None:
        roster = "; ".join(f"{a.id}: {a.description}" for a in loaded.subagents.values())

        def delegate_tool(input: DelegateInput, ctx) -> str:
            if input.subagent not in loaded.subagents:
                raise LookupError(f"no subagent {input.subagent!r}; subagents: {', '.join(loaded.subagents)}")
            return delegate(input.subagent, input.task)

        tools["delegate"] = Tool(f"Delegate a task to a specialist subagent and get its answer. Subagents: {roster}",
                                 DelegateInput, delegate_tool)
    return tools


def tool_specs(tools: dict[str, Tool]) -> list[ToolSpec]:
    return [ToolSpec(name, t.description, t.input_schema()) for name, t in sorted(tools.items())]


# --- preparing and running calls ----------------------------------------------


@dataclass
class Prepared:
    call: ModelToolCall
    row: ToolCall
    tool: Tool | None
    validated: BaseModel | None
    error: str | None

    def requested(self) -> dict[str, Any]:
        shown = json_safe(self.validated if self.validated is not None else self.call.input)
        return {"callId": self.row.call_id, "toolName": self.row.tool, "input": shown}


def prepare(turn, tools: dict[str, Tool], calls: list[ModelToolCall], as_of: datetime | None) -> list[Prepared]:
    """Validate each call and store it as a ToolCall row.

    Input holding text or numbers the databases cannot store is refused like
    any invalid input (the model sees why and can retry); what is stored and
    shown of it is a cleaned copy.
    """
    prepared = []
    for call in calls:
        tool = tools.get(call.name)
        validated, error = None, None
        if tool is None:
            error = f"unknown tool {call.name!r}; available tools: {', '.join(sorted(tools)) or 'none'}"
        elif unstorable := find_problem(call.input, "input"):
            path, problem = unstorable
            error = f"invalid input: {path} {problem}; retry with valid Unicode text and finite numbers"
        else:
            try:
                validated = tool.input_model.model_validate(call.input)
            except ValidationError as exc:
                error = validation_message(exc)
        if error is None and as_of is not None and tool.time_args:
            error = check_time_args(tool.time_args, validated, as_of)
        shown = json_safe(validated if validated is not None else call.input)
        row = ToolCall.objects.create(
            session_id=turn.session_id, turn=turn, call_id=clean_text(call.call_id), tool=clean_text(call.name),
            input=shown if isinstance(shown, dict) else {"raw": shown},
            status=ToolCall.Status.FAILED if error else ToolCall.Status.REQUESTED, error=error or "",
        )
        prepared.append(Prepared(call, row, tool, validated, error))
    return prepared


def result_payload(row: ToolCall, duration_ms: float) -> dict[str, Any]:
    payload: dict[str, Any] = {"callId": row.call_id, "toolName": row.tool, "durationMs": round(duration_ms, 1),
                               "stubbed": row.stubbed}
    if row.status == ToolCall.Status.DONE:
        payload["output"] = row.output
    else:
        payload["error"] = row.error
    return payload


def tool_message(row: ToolCall) -> dict[str, Any]:
    """The neutral `tool` message the model sees for a finished call."""
    ok = row.status == ToolCall.Status.DONE
    content = row.output if ok else row.error
    return {"role": "tool", "callId": row.call_id, "name": row.tool,
            "content": content if isinstance(content, str) else json.dumps(content), "isError": not ok}


def stub(row: ToolCall, tool: Tool) -> None:
    row.stubbed = True
    row.status = ToolCall.Status.DONE
    row.output = json_safe(tool.dry_run_result) if tool.dry_run_result is not None else DRY_RUN_ACK
    row.ended_at = timezone.now()
    row.save(update_fields=["stubbed", "status", "output", "ended_at"])


def execute(row: ToolCall, tool: Tool, validated: BaseModel, ctx: ToolContext) -> float:
    """Run one call exactly once; returns its duration in ms. Errors become the call's error."""
    started = time.monotonic()
    won = ToolCall.objects.filter(
        pk=row.pk, status__in=[ToolCall.Status.REQUESTED, ToolCall.Status.APPROVED]
    ).update(status=ToolCall.Status.RUNNING, started_at=timezone.now())
    if not won:  # already run (or being run) elsewhere: never twice
        row.refresh_from_db()
        return 0.0
    try:
        row.output = json_safe(tool(validated, ctx))
        row.status = ToolCall.Status.DONE
    except Exception as exc:  # the model sees tool errors and can act on them
        row.error = clean_text(f"{type(exc).__name__}: {exc}")
        row.status = ToolCall.Status.FAILED
    row.ended_at = timezone.now()
    row.save(update_fields=["output", "status", "error", "ended_at"])
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

    with ThreadPoolExecutor(max_workers=min(8, len(jobs)), thread_name_prefix="tool") as pool:
        durations = list(pool.map(run, jobs))
    close_old_connections()
    return durations
