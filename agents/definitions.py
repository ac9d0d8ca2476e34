"""What agent folders declare: `Agent`, `tool` and `Tool`, `Skill`, `Schedule`, and what a
tool function receives (`ToolContext`, `SessionInfo`).

Agent code imports these through `agents.sdk`; code inside the apps imports them from here.
"""
from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Literal

from pydantic import BaseModel

from agents.mcp import McpServer


Effect = Literal["read", "write"]
Execution = Literal["server", "agent"]


@dataclass(frozen=True)
class Agent:
    """What `agent/agent.py` declares. Every field is optional."""

    # `model=X` means `models=[X]`; with both, `model` must be one of `models`.
    model: str = ""
    description: str = ""
    # The provider:model pairs a session may be bound to; the first is the default.
    models: list[str] | tuple[str, ...] = ()
    # Models a failed call (429, 5xx, overloaded, timeout) may fall over to, in order; none: it fails.
    fallback: list[str] | tuple[str, ...] = ()
    # Agents this agent may message with the built-in messaging tools: slugs on this server, and agents on
    # A2A servers by URL (or {"url": URL, "token": "${SECRET}"}); none: it messages no one.
    peers: list[Any] | tuple[Any, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    max_steps: int | None = None
    name: str = ""
    # Opt in to the built-in `remind_me` tool (reminders the model sets itself).
    reminders_tool: bool = False
    # MCP servers whose tools the model gets (`mcp_stdio(...)`, `mcp_http(...)`), besides agent/mcp.json.
    mcp: tuple[McpServer, ...] | list[McpServer] = ()
    # Where file and shell tools act: local_runtime() (the default) or virtual_runtime(fs).
    runtime: Any = None
    # Narrows the workspace tools offered (read, ls, glob, grep, write, edit, delete, shell);
    # None: every tool the workspace implements; []: none.
    tools: list[str] | tuple[str, ...] | None = None
    # Delete this agent's sessions once idle for this many days; None: the server's
    # AGENTSITE_RETENTION_DAYS; 0: keep them forever, whatever the server's setting.
    retention_days: int | None = None
    # US dollars this agent's model calls may cost in a UTC day and month, all people together:
    # {"daily": 5, "monthly": 100} (either); None: no budget of its own.
    budget: dict[str, float] | None = None
    # Built-in tools the agent opts into (BUILTINS), offered under those names on every model.
    builtins: list[str] | tuple[str, ...] = ()
    # Its own tools that an agent made in the console may take by name (that agent's `toolsFrom`): the
    # tool's file is copied into each of its saves, so it runs as the copy its release holds.
    share_tools: list[str] | tuple[str, ...] = ()


# What `Agent(builtins=[...])` may name, and the tools each brings (sessions.harness).
BUILTIN_TOOLS = {"web_fetch": ("web_fetch",), "web_search": ("web_search",), "todos": ("update_todos", "read_todos"),
                 "ask_question": ("ask_question",)}
BUILTINS = tuple(BUILTIN_TOOLS)


@dataclass(frozen=True)
class Tool:
    """A typed server tool. The file name under `agent/tools/` is its name."""

    description: str
    input_model: type[BaseModel]
    function: Callable[..., Any]
    effect: Effect = "read"
    needs_approval: bool = False
    dry_run_result: Any = None
    time_args: tuple[str, ...] = ()
    execution: Execution = "server"
    # A needs_approval tool may run without approval when called directly
    # (the tool-call route, `manage.py call`, schedule handlers) only if it opts in.
    direct_call: bool = False
    # A question to the person (the built-in ask_question): its call waits, like one for approval, and the
    # person's answer is its result; the function never runs.
    question: bool = False

    def input_schema(self) -> dict[str, Any]:
        return _schema_of(self.input_model)

    def __call__(self, input: BaseModel, ctx: "ToolContext") -> Any:
        return self.function(input, ctx)


@functools.lru_cache(maxsize=1024)
def _schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """JSON schemas are built once per model: every model call sends them."""
    return model.model_json_schema()


def tool(
    *,
    description: str,
    effect: Effect = "read",
    input: type[BaseModel] | None = None,
    needs_approval: bool = False,
    dry_run_result: Any = None,
    time_args: list[str] | tuple[str, ...] = (),
    execution: Execution = "server",
    direct_call: bool = False,
) -> Callable[[Callable[..., Any]], Tool]:
    """Declare a tool. The input model is `input=` or the first parameter's annotation."""

    def decorate(function: Callable[..., Any]) -> Tool:
        model = input or _first_parameter_model(function)
        return Tool(
            description=description,
            input_model=model,
            function=function,
            effect=effect,
            needs_approval=needs_approval,
            dry_run_result=dry_run_result,
            time_args=tuple(time_args),
            execution=execution,
            direct_call=direct_call,
        )

    return decorate


def _first_parameter_model(function: Callable[..., Any]) -> type[BaseModel]:
    try:
        hints = inspect.get_annotations(function, eval_str=True)
    except Exception as exc:  # an unresolvable annotation is the author's to fix
        raise TypeError(f"cannot read the annotations of {function.__name__}: {exc}") from exc
    params = list(inspect.signature(function).parameters)
    annotation = hints.get(params[0]) if params else None
    if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        raise TypeError(
            f"{function.__name__}: annotate the first parameter with a pydantic model "
            "(def my_tool(input: Input, ctx)) or pass input=Input to @tool"
        )
    return annotation


@dataclass(frozen=True)
class Skill:
    """A generated skill (`agent/skills/<name>.py`: `skill = Skill(...)`)."""

    description: str
    markdown: str
    files: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Schedule:
    """A cron schedule with a handler (`agent/schedules/<id>.py`: `schedule = Schedule(...)`).

    `run(ctx)` gets `ctx.receive(message, ...)` (start a conversation on the
    HTTP channel), `ctx.call_tool(name, input)`, `ctx.host` (`kv`, `files`,
    `artifacts` with `session_id=`, `reminders`) and `ctx.principal` (the
    schedule's app principal). Cron is 5 fields, UTC.
    """

    cron: str
    run: Callable[[Any], Any]
    title: str = ""


@dataclass
class SessionInfo:
    id: str
    agent: str
    mode: str
    principal_id: str
    dry_run: bool = False
    # The A/B experiments the session is enrolled in: {experiment name: variant id}, fixed at its creation.
    abs: dict[str, str] = field(default_factory=dict)


@dataclass
class ToolContext:
    """What a tool function receives besides its validated input.

    `host`: the server's services (`kv`, `files`, `artifacts`, `reminders`), see `sessions.host`.
    """

    session: SessionInfo | None
    call_id: str
    as_of: datetime | None = None
    host: Any = None
    # Whether the turn was asked to stop (polled by long-running tools such as `shell`).
    should_stop: Callable[[], bool] = lambda: False

    def now(self) -> datetime:
        """The session's frozen instant under `asOf`, else the current time (UTC)."""
        return self.as_of or datetime.now(timezone.utc)
