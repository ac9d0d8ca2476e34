"""An agent defined by data: what `POST /v1/agents` and the console's editor take.

Its fields are the manifest's (a release of the agent shows them back as its manifest), plus
what a manifest only names: the skills' text and files, the subagents' instructions and the
schedules' prompts. Typed Python tools stay in folders: a console agent has none of its own.
Checked here for shape (each problem names its field); then the folder it is written as
(`agents.console.folder`) is validated as any deploy is.
"""
from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

from agents.definitions import BUILTINS
from agents.discovery.loaded import Problem
from agents.discovery.folder import TOOL_NAME
from agents.models import RESERVED_SLUGS, SLUG_PATTERN

SLUG = SLUG_PATTERN.pattern  # agents.models.validate_slug's (at most 64 characters), and not RESERVED_SLUGS
NAME = r"^[a-z0-9][a-z0-9_-]{0,63}$"
MAX_SKILL_FILES = 100
WORKSPACE_TOOLS = ("read", "ls", "glob", "grep", "write", "edit", "delete", "shell")


class Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, strict=True)


class SkillSpec(Spec):
    name: str = Field(pattern=NAME, description="The skill's name, as the model loads it")
    description: str = Field(min_length=1, max_length=500, description="When the model should load it")
    body: str = Field(min_length=1, max_length=200_000, description="The skill's instructions (Markdown)")
    files: dict[str, str] = Field(default_factory=dict, description="Files beside it, by relative path: "
                                                                    "the model reads them with read_skill_file")

    @field_validator("files")
    @classmethod
    def relative_paths(cls, files: dict[str, str]) -> dict[str, str]:
        if len(files) > MAX_SKILL_FILES:
            raise ValueError(f"at most {MAX_SKILL_FILES} files beside a skill")
        for path in files:
            parts = path.split("/")
            if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\\" in path:
                raise ValueError(f"{path!r} is not a relative path inside the skill (e.g. references/notes.md)")
            if any(len(p.encode()) > 200 for p in parts) or len(parts) > 10:
                raise ValueError(f"{path!r}: at most 10 folders deep, each name at most 200 bytes")
            if parts[0] == "SKILL.md":
                raise ValueError("SKILL.md is the skill's body: put its text in `body`")
            if any("/".join(parts[:i]) in files for i in range(1, len(parts))):
                raise ValueError(f"{path!r} is inside {'/'.join(parts[:-1])!r}, which is a file too")
        return files


def whole_numbers(value: Any) -> Any:
    """Free-form parameters with 1.0 as 1: a page's JSON (JavaScript) writes 1.0 back as 1, and the same
    agent saved again must be the same release."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [whole_numbers(item) for item in value]
    return value


class SubagentSpec(Spec):
    id: str = Field(pattern=NAME, description="How the agent names it when it delegates")
    description: str = Field(min_length=1, max_length=500, description="What it is for, as the agent sees it")
    instructions: str = Field(min_length=1, max_length=200_000, description="Its system prompt (Markdown)")
    model: str = Field(default="", max_length=200, description="Its model; blank: the agent's")
    params: dict[str, Any] = Field(default_factory=dict, description="Its model's parameters")

    @field_validator("params")
    @classmethod
    def params_as_saved(cls, params: dict[str, Any]) -> dict[str, Any]:
        return whole_numbers(params)


class ScheduleSpec(Spec):
    id: str = Field(pattern=NAME, description="The schedule's id")
    cron: str = Field(min_length=1, max_length=200, description="When, as a 5-field UTC cron expression")
    prompt: str = Field(min_length=1, max_length=100_000, description="The message the agent gets each time")
    title: str = Field(default="", max_length=200)


class VariantSpec(Spec):
    label: str = Field(default="", max_length=200)
    instructions: str | None = Field(default=None, max_length=200_000, description="In place of the agent's")
    model: str | None = Field(default=None, max_length=200)
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("params")
    @classmethod
    def params_as_saved(cls, params: dict[str, Any]) -> dict[str, Any]:
        return whole_numbers(params)


class ExperimentSpec(Spec):
    """An A/B experiment: sessions split by a hash of their id among the variants ("control" is the agent
    as it is), `holdout` of them kept out on control."""

    name: str = Field(pattern=NAME)
    variants: dict[str, VariantSpec] = Field(min_length=1, max_length=10)
    holdout: float = Field(default=0.0, ge=0.0, lt=1.0)

    @field_validator("variants")
    @classmethod
    def variant_ids(cls, variants: dict[str, VariantSpec]) -> dict[str, VariantSpec]:
        if bad := [v for v in variants if not re.fullmatch(NAME, v)]:
            raise ValueError(f"{', '.join(map(repr, bad))}: a variant id is lowercase letters, digits, '-' and '_'")
        return variants


class SlackSpec(Spec):
    """A Slack app's channel (`slack_channel`): its secrets by the names of the agent's secrets (or the
    server's environment) that hold them."""

    engagement: str = Field(default="mentions", pattern="^(mentions|threads)$",
                            description="mentions: mentions and direct messages; threads: also every reply in a "
                                        "thread the agent is in")
    approvers: list[str] | None = Field(default=None, description="Slack user ids who decide approvals and "
                                                                  "answer questions ([\"*\"]: anyone); none: the "
                                                                  "thread's starter")
    streaming: bool = True
    allow_external: bool = False
    allow_guests: bool = False
    socket_mode: bool = False
    signing_secret_env: str = Field(default="SLACK_SIGNING_SECRET", pattern=r"^[A-Z][A-Z0-9_]{0,127}$")
    bot_token_env: str = Field(default="SLACK_BOT_TOKEN", pattern=r"^[A-Z][A-Z0-9_]{0,127}$")
    app_token_env: str = Field(default="SLACK_APP_TOKEN", pattern=r"^[A-Z][A-Z0-9_]{0,127}$")


class WebhookSpec(Spec):
    """A JSON webhook's channel (`webhook_channel`): `POST /<slug>/v1/channels/<id>/deliveries`."""

    id: str = Field(pattern=NAME, description="The channel's id, in its route")
    message: str = Field(default="text", pattern=r"^[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){0,9}$",
                         description="The dotted path of the message in a delivery's JSON")
    thread: str = Field(default="", pattern=r"^([A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){0,9})?$",
                        description="The dotted path of the conversation's id; blank: each delivery a session")
    secret_env: str = Field(default="", pattern=r"^([A-Z][A-Z0-9_]{0,127})?$",
                            description="The agent's secret that signs deliveries (HMAC-SHA256 of the body); "
                                        "blank: the server's chain admits callers")
    signature_header: str = Field(default="X-Signature-256", pattern=r"^[A-Za-z0-9-]{1,100}$")
    description: str = Field(default="", max_length=500)


class AgentSpec(Spec):
    name: str = Field(default="", max_length=200)
    description: str = Field(default="", max_length=2000)
    instructions: str = Field(min_length=1, max_length=200_000, description="The system prompt (Markdown)")
    models: list[str] = Field(default_factory=list, max_length=20,
                              description="provider:model pairs a session may be bound to, the default first; "
                                          "none: the server's default")
    fallback: list[str] = Field(default_factory=list, max_length=10)
    params: dict[str, Any] = Field(default_factory=dict, description="The model's parameters")
    max_steps: int | None = Field(default=None, ge=1, le=100)
    retention_days: int | None = Field(default=None, ge=0, le=36500)
    budget: dict[str, float] | None = Field(default=None, description='{"daily": 5, "monthly": 100}, in US dollars')
    builtins: list[str] = Field(default_factory=list, description=f"Built-in tools it offers: {', '.join(BUILTINS)}")
    reminders_tool: bool = False
    peers: list[str] = Field(default_factory=list, description="Agents on this server it may message")
    workspace_tools: list[str] | None = Field(default=None, description="The workspace tools offered (shell among "
                                                                       "them); none given: all; []: none")
    sandbox_network: bool = Field(default=False, description="Whether the workspace's shell may reach the network")
    tools_from: dict[str, list[str]] = Field(
        default_factory=dict, description="Tools of folder agents on this server, by slug, that they share "
                                          "(their share_tools): each save copies the tool's file into the release")
    mcp_servers: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="MCP servers by name, as agent/mcp.json's mcpServers: stdio "
                                          "(command, args, env) or URL (url, headers), ${SECRET} for the agent's "
                                          "secrets")
    skills: list[SkillSpec] = Field(default_factory=list, max_length=100)
    subagents: list[SubagentSpec] = Field(default_factory=list, max_length=50)
    schedules: list[ScheduleSpec] = Field(default_factory=list, max_length=50)
    experiments: list[ExperimentSpec] = Field(default_factory=list, max_length=10)
    slack: SlackSpec | None = Field(default=None, description="Answer a Slack app's events in threads")
    webhooks: list[WebhookSpec] = Field(default_factory=list, max_length=20)

    @field_validator("params")
    @classmethod
    def params_as_saved(cls, params: dict[str, Any]) -> dict[str, Any]:
        return whole_numbers(params)

    @field_validator("tools_from")
    @classmethod
    def agents_and_tool_names(cls, taken: dict[str, list[str]]) -> dict[str, list[str]]:
        for slug, names in taken.items():
            if not SLUG_PATTERN.fullmatch(slug) or len(slug) > 64:
                raise ValueError(f"{slug!r} is not an agent's slug")
            if bad := [name for name in names if not TOOL_NAME.fullmatch(name)]:
                raise ValueError(f"{', '.join(map(repr, bad))} is no tool name (lowercase letters, digits and '_')")
        return taken

    @field_validator("workspace_tools")
    @classmethod
    def known_workspace_tools(cls, tools: list[str] | None) -> list[str] | None:
        if tools is not None and (unknown := [t for t in tools if t not in WORKSPACE_TOOLS]):
            raise ValueError(f"{', '.join(map(repr, unknown))}: choose from {', '.join(WORKSPACE_TOOLS)}")
        return tools

    @field_validator("webhooks")
    @classmethod
    def not_slacks_id(cls, hooks: list[WebhookSpec]) -> list[WebhookSpec]:
        if any(hook.id == "slack" for hook in hooks):
            raise ValueError("'slack' is the Slack channel's id: give the webhook another")
        return hooks

    @field_validator("skills", "subagents", "schedules", "experiments", "webhooks")
    @classmethod
    def distinct(cls, items: list[Any]) -> list[Any]:
        keys = [item.id if hasattr(item, "id") else item.name for item in items]
        if repeated := sorted({key for key in keys if keys.count(key) > 1}):
            raise ValueError(f"{', '.join(map(repr, repeated))} appears more than once: each must be unique")
        return items


class NewAgentSpec(AgentSpec):
    """What `POST /v1/agents` takes: the agent's slug, and its spec."""

    slug: str = Field(pattern=SLUG, max_length=64, description="The agent's slug: its routes are /<slug>/v1/...")

    @field_validator("slug")
    @classmethod
    def not_reserved(cls, slug: str) -> str:
        if slug in RESERVED_SLUGS:
            raise ValueError(f"{slug!r} is reserved: pick another slug")
        return slug


def parse(data: Any, model: type[AgentSpec] = AgentSpec) -> AgentSpec:
    """`data` as a spec, else SpecError naming each field and what is wrong with it."""
    if not isinstance(data, dict):
        raise SpecError([Problem("", "the agent is a JSON object")])
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpecError([Problem(".".join(str(p) for p in e["loc"]), e["msg"]) for e in exc.errors()]) from None


class SpecError(Exception):
    """What is wrong with an agent defined by data: each problem names its field."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(f"{p.path or 'agent'}: {p.message}" for p in problems))
