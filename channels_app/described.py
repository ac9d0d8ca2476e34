"""The parts of response bodies that are data another layer wrote: typed dicts, camelCase as stored.

An agent's manifest (`agents.discovery.LoadedAgent.manifest`), a session's
usage and options, a principal: these are stored as JSON and sent as they
are. The typed dicts here give them a schema in the OpenAPI document
without reshaping them: every key is optional (a release deployed by an
older version may lack one) and keys not named here still go out, as before.
Where a value is free-form, its type says `JSONValue` or `JSONObject`.
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

# Free-form JSON: a tool's input or output, a JSON Schema, a model's parameters, an event's data.
JSONValue = Any
JSONObject = dict[str, Any]


def optional_keys(schema: dict[str, Any]) -> None:
    # Pydantic marks a total=False key required in a serialization schema whose model asks for
    # defaults to be required (every `Reply` does): these keys may be absent.
    schema.pop("required", None)


OPEN = ConfigDict(extra="allow", json_schema_extra=optional_keys)


@with_config(OPEN)
class ToolSource(TypedDict, total=False):
    """Where a tool comes from: `file` (`path`, relative to the agent folder), `mcp` (`server`, its
    name) or `builtin` (`feature`: workspace, skills, subagents, reminders, messaging, ...)."""

    kind: str
    path: str
    server: str
    feature: str


@with_config(OPEN)
class ToolDescription(TypedDict, total=False):
    """A tool: as the release declares it (`tools`) or as the model is offered it (`offeredTools`)."""

    name: str
    description: str
    effect: str
    needsApproval: bool
    directCall: bool
    timeArgs: list[str]
    execution: str
    family: str
    source: ToolSource
    inputSchema: JSONObject
    file: str


@with_config(OPEN)
class SkillDescription(TypedDict, total=False):
    name: str
    description: str
    files: list[str]
    source: str


@with_config(OPEN)
class SubagentDescription(TypedDict, total=False):
    id: str
    description: str
    model: str


@with_config(OPEN)
class ScheduleDescription(TypedDict, total=False):
    """A declared schedule, with its timer's state when it is active."""

    id: str
    kind: str
    cron: str | None
    title: str
    file: str
    nextFireAt: str | None
    lastFiredAt: str | None
    fireCount: int


@with_config(OPEN)
class SandboxLimits(TypedDict):
    """What one sandboxed command may use: processes, address space per process, CPU, workspace size."""

    processes: int
    memoryBytes: int
    cpuSeconds: int
    diskBytes: int


@with_config(OPEN)
class SandboxDescription(TypedDict, total=False):
    """Whether this host runs an agent's processes in the sandbox (mode on), and what they may do;
    `reason` says why an active mode could not start it (then no shell is offered)."""

    active: bool
    mode: Literal["on", "off"]
    network: bool
    limits: SandboxLimits
    reason: str


@with_config(OPEN)
class RuntimeDescription(TypedDict, total=False):
    """Where file and shell tools act: kind (local | virtual), its limits, the workspace tools."""

    kind: Literal["local", "virtual"]
    shell: bool
    shellTimeoutSeconds: int | float
    outputLimitBytes: int
    env: list[str]
    perSession: bool
    filesystem: str | None
    needsApproval: list[str]
    toolsAllowlist: list[str] | None
    workspaceTools: list[str] | None
    seedFiles: bool
    network: bool
    limits: SandboxLimits
    sandbox: SandboxDescription


@with_config(OPEN)
class McpAuthorization(TypedDict, total=False):
    """A server declared with oauth: whether the agent holds tokens for it (never the tokens)."""

    authorized: bool
    expiresAt: str | None
    refreshable: bool
    command: str


@with_config(OPEN)
class McpServerDescription(TypedDict, total=False):
    """An MCP server the agent declares: only the names of its env and headers (values may be secrets)."""

    name: str
    transport: str
    command: str
    args: list[str]
    url: str
    envKeys: list[str]
    headerKeys: list[str]
    needsApproval: bool | list[str]
    timeout: int | float
    # False: the model is not offered its tools; only the agent's tools reach it (ctx.host.mcp).
    advertise: bool
    oauth: bool
    authorization: McpAuthorization
    # A command (stdio) server's: sandboxed, with the network, and the host paths it may read besides its folder.
    sandbox: bool
    network: bool
    paths: list[str]
    # Why this process could not start or reach the server (with the first lines of its stderr), until it can.
    error: str


@with_config(OPEN)
class AuthPolicyDescription(TypedDict, total=False):
    """An auth policy by kind (a custom one by name), never with a token."""

    kind: str
    verifier: bool
    name: str


@with_config(OPEN)
class Usage(TypedDict, total=False):
    """Token counts, null where the provider reported none; what they cost in US dollars, null when
    none of the calls' models has a known price, and how many calls had none."""

    inputTokens: int | None
    outputTokens: int | None
    cacheReadTokens: int | None
    cacheWriteTokens: int | None
    costUsd: float | None
    unpricedCalls: int


@with_config(OPEN)
class SessionOptions(TypedDict, total=False):
    """What every tool call of the session runs under."""

    dryRun: bool
    asOf: str
    runtime: Literal["local"]


@with_config(OPEN)
class PrincipalDescription(TypedDict, total=False):
    authenticator: str
    principalId: str
    principalType: str
    attributes: JSONObject


@with_config(OPEN)
class TimingStep(TypedDict, total=False):
    """One bar of a turn's waterfall: `kind` queue | load | workspace | runtime | model | tool | approval |
    settle, `name` the model, the tool, the tools waited on, or how another runtime's child was had (`new`,
    `kept`); ms from the turn's creation."""

    kind: Literal["queue", "load", "workspace", "runtime", "model", "tool", "approval", "settle"]
    name: str
    startMs: float
    durationMs: float
    firstTokenMs: float | None  # a model call's time to its first output
    callId: str  # a tool call's


@with_config(OPEN)
class TurnTimings(TypedDict, total=False):
    """Where an ended turn's time went (ms): stage totals and the steps of its waterfall.

    `toolsMs` counts a step's parallel calls once; `firstTokenMs` is the first
    model call's time to its first output; `totalMs` runs from the turn's
    creation to its settle, parked time included. A stage is null when
    unknown (a turn whose worker was lost).
    """

    queueMs: float | None
    loadMs: float | None
    workspaceMs: float | None
    runtimeMs: float | None  # only on turns of another agent runtime (`claude-agent:`)
    modelMs: float | None
    firstTokenMs: float | None
    toolsMs: float | None
    approvalMs: float | None
    settleMs: float | None
    totalMs: float | None
    steps: list[TimingStep]
