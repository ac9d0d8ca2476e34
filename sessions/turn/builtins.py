"""The built-in tools the engine offers: skills, delegation, reminders, and those features add
(sessions.turn.extensions: messages between agents)."""
from __future__ import annotations

from typing import Any, Callable

from pydantic import BaseModel, Field

from agents.definitions import Tool
from agents.discovery import LoadedAgent
from agents.providers.base import ToolSpec
from agents.skills import safe_relative
from sessions.turn import extensions

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


def builtin_tools(loaded: LoadedAgent, delegate: Callable[[str, str, str], str] | None) -> dict[str, Tool]:
    """The built-ins this agent gets: skill loading with skills, delegation with subagents
    (`delegate(subagent_id, task, call_id)` runs it),
    `remind_me` and `cancel_reminder` when the agent opts in, and first those
    features registered (with peers: `list_agents`, `send_message` and `read_notifications`)."""
    tools: dict[str, Tool] = {}
    for _, source in extensions.builtin_sources:
        tools.update(source(loaded))
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
            return delegate(input.subagent, input.task, ctx.call_id)

        tools["delegate"] = Tool(f"Delegate a task to a specialist subagent and get its answer. Subagents: {roster}",
                                 DelegateInput, delegate_tool)
    return tools


# The part of the agent that brings each of the engine's own built-ins (what /info names as their source).
OWN_FEATURES = {"remind_me": "reminders", "cancel_reminder": "reminders", "load_skill": "skills",
                "read_skill_file": "skills", "delegate": "subagents"}


def builtin_features(loaded: LoadedAgent) -> dict[str, str]:
    """Each built-in's feature, by tool name: the engine's own, then those features registered."""
    features = dict(OWN_FEATURES)
    for feature, source in extensions.builtin_sources:
        features.update(dict.fromkeys(source(loaded), feature))
    return features


def tool_specs(tools: dict[str, Tool]) -> list[ToolSpec]:
    return [ToolSpec(name, t.description, t.input_schema()) for name, t in sorted(tools.items())]

