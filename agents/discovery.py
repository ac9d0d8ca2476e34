"""Discovery and validation of agent folders.

An agent folder holds `agent/instructions.md` (required), `agent/agent.py`
(optional `agent = Agent(...)`) and `agent/tools/<name>.py` (one tool per
file). Validation collects every problem, each naming the file and the fix.

The runtime is checked here too: `Agent(tools=[...])` may only narrow the
workspace tools the runtime's filesystem implements, `execution="agent"`
tools need a workspace with `shell`, and seed files (`agent/workspace/` or
`agent/sandbox/workspace/`) need a local runtime.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction

from agents import providers
from agents.filesystems import VERBS, bind_skills
from agents.runtimes import (
    DEFAULT_RUNTIME,
    LocalRuntime,
    Runtime,
    VirtualRuntime,
    allowlist_problems,
    could_offer,
    offered_at_discovery,
)
from agents.models import Agent as AgentRow
from agents.models import Deployment, validate_slug
from agents.mcp import McpServer, load_mcp_json, server_problems
from agents.modules import find_in_file
from agents.channels import ChannelHook, LoadedChannel, load_channels
from agents.schedules import LoadedSchedule, load_schedules
from agents.sdk import Agent, Hook, Tool
from agents.signals import deployment_activated
from agents.skills import LoadedSkill, load_skills

TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
SUBAGENT_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# Built-in tools the engine offers when the agent has skills or subagents.
BUILTIN_TOOLS = frozenset({"load_skill", "read_skill_file", "delegate", "remind_me", "cancel_reminder"})
IGNORED_PARTS = {"__pycache__", ".DS_Store"}
# Seed files copied into each local session workspace (the second spelling is the reference's).
SEED_FOLDERS = ("workspace", "sandbox/workspace")
MAX_SEED_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class AgentFolderError(Exception):
    def __init__(self, root: Path, problems: list[Problem]):
        self.root = root
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


@dataclass(frozen=True)
class LoadedSubagent:
    id: str
    description: str
    model: str
    params: dict[str, Any]
    instructions: str


@dataclass
class LoadedAgent:
    slug: str
    root: Path
    config: Agent
    model: str
    instructions: str
    tools: dict[str, Tool]
    content_hash: str
    warnings: list[Problem] = field(default_factory=list)
    skills: dict[str, LoadedSkill] = field(default_factory=dict)
    subagents: dict[str, LoadedSubagent] = field(default_factory=dict)
    hooks: list[Hook] = field(default_factory=list)
    schedules: dict[str, LoadedSchedule] = field(default_factory=dict)
    mcp: list[McpServer] = field(default_factory=list)
    runtime: Runtime = DEFAULT_RUNTIME
    seed_dir: Path | None = None
    channels: dict[str, LoadedChannel] = field(default_factory=dict)

    @property
    def allowlist(self) -> tuple[str, ...] | None:
        return None if self.config.tools is None else tuple(self.config.tools)

    def workspace_tools(self) -> frozenset[str] | None:
        """The workspace tools every session is offered; None when a per-session factory decides."""
        return offered_at_discovery(self.runtime, self.allowlist)

    def agent_tools(self) -> dict[str, Tool]:
        """Tools the model runs as scripts in its workspace (execution="agent")."""
        return {name: t for name, t in self.tools.items() if t.execution == "agent"}

    def server_tools(self) -> dict[str, Tool]:
        return {name: t for name, t in self.tools.items() if t.execution == "server"}

    def manifest(self) -> dict[str, Any]:
        return {
            "slug": self.slug,
            "name": self.config.name or self.slug,
            "description": self.config.description,
            "model": self.model,
            "params": self.config.params,
            "maxSteps": self.config.max_steps,
            "instructions": self.instructions,
            "tools": [
                {
                    "name": name,
                    "description": t.description,
                    "effect": t.effect,
                    "needsApproval": t.needs_approval,
                    "directCall": t.direct_call,
                    "timeArgs": list(t.time_args),
                    "execution": t.execution,
                    "family": "server" if t.execution == "server" else "agent",
                    "inputSchema": t.input_schema(),
                    "file": f"agent/tools/{name}.py",
                }
                for name, t in sorted(self.tools.items())
            ],
            "skills": [
                {"name": k.name, "description": k.description, "files": sorted(k.files), "source": k.source}
                for k in self.skills.values()
            ],
            "subagents": [
                {"id": a.id, "description": a.description, "model": a.model} for a in self.subagents.values()
            ],
            "hooks": sorted({e for h in self.hooks if not isinstance(h, ChannelHook) for e in h.events}),
            "channels": [c.describe(self.slug) for c in self.channels.values()],
            "schedules": [
                {"id": k.id, "kind": k.kind, "cron": k.cron, "title": k.title, "file": f"agent/schedules/{k.id}.{'md' if k.kind == 'markdown' else 'py'}"}
                for k in self.schedules.values()
            ],
            "remindersTool": self.config.reminders_tool,
            "mcp": [server.describe() for server in self.mcp],
            "runtime": self.runtime_manifest(),
        }

    def runtime_manifest(self) -> dict[str, Any]:
        offered = self.workspace_tools()
        return {**self.runtime.describe(), "toolsAllowlist": None if self.allowlist is None else list(self.allowlist),
                "workspaceTools": None if offered is None else [v for v in VERBS if v in offered],
                "seedFiles": self.seed_dir is not None}


def agent_dir(root: Path) -> Path:
    return root / "agent"


def default_model() -> str:
    """The model of agents that name none: configured, else the first provider with a key, else scripted."""
    if settings.AGENTSITE_DEFAULT_MODEL:
        return settings.AGENTSITE_DEFAULT_MODEL
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic:claude-sonnet-4-5"
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4.1-mini"
    return "scripted:echo"


def content_hash(root: Path) -> str:
    """sha256 over every file of `agent/` (path and bytes), in a stable order."""
    digest = hashlib.sha256()
    base = agent_dir(root)
    for path in sorted(p for p in base.rglob("*") if p.is_file() and not IGNORED_PARTS & set(p.parts)):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def load_agent_folder(root: Path | str, slug: str | None = None) -> LoadedAgent:
    """Load and validate one agent folder; raise AgentFolderError listing every problem."""
    root = Path(root).resolve()
    slug = slug or root.name.lower()
    problems: list[Problem] = []
    warnings: list[Problem] = []
    base = agent_dir(root)

    try:
        validate_slug(slug)
    except ValidationError as exc:
        problems.append(Problem(str(root), f"{exc.messages[0]} (rename the folder)"))

    if not base.is_dir():
        raise AgentFolderError(root, problems + [Problem("agent/", "missing: create an agent/ folder with instructions.md")])

    digest = content_hash(root)
    namespace = f"agentsite_agents.{re.sub(r'[^a-z0-9_]', '_', slug)}_{digest[:12]}"

    instructions = ""
    instructions_path = base / "instructions.md"
    if not instructions_path.is_file():
        problems.append(Problem("agent/instructions.md", "missing: write the agent's system prompt in this file"))
    else:
        try:
            instructions = instructions_path.read_text(encoding="utf-8").strip()
        except UnicodeDecodeError:
            problems.append(Problem("agent/instructions.md", "not UTF-8 text: save it as UTF-8"))
        else:
            if not instructions:
                problems.append(Problem("agent/instructions.md", "empty: write the agent's system prompt"))

    config = Agent()
    agent_py = base / "agent.py"
    if agent_py.is_file():
        found = find_in_file(agent_py, f"{namespace}.agent", Agent, _reporter(problems, "agent/agent.py"), name="agent")
        if found == []:
            problems.append(Problem("agent/agent.py", "define `agent = Agent(...)` (from agents.sdk import Agent)"))
        elif found:
            config = found[0]

    model = config.model or default_model()
    try:
        providers.parse_model_id(model)
    except ValueError as exc:
        problems.append(Problem("agent/agent.py", str(exc)))
    if config.max_steps is not None and not (isinstance(config.max_steps, int) and 1 <= config.max_steps <= 100):
        problems.append(Problem("agent/agent.py", "max_steps must be an integer between 1 and 100"))

    tools: dict[str, Tool] = {}
    tools_dir = base / "tools"
    if tools_dir.is_dir():
        for path in sorted(tools_dir.iterdir()):
            if path.name in IGNORED_PARTS or path.name == "__init__.py" or path.name.startswith("_"):
                continue
            rel = f"agent/tools/{path.name}"
            if path.is_dir() or path.suffix != ".py":
                problems.append(Problem(rel, "only <name>.py files belong in agent/tools/ (move helpers to agent/lib/)"))
                continue
            name = path.stem
            if not TOOL_NAME.match(name):
                problems.append(Problem(rel, "rename the file: tool names are lowercase letters, digits and '_', starting with a letter"))
                continue
            found_tools = find_in_file(path, f"{namespace}.tools.{name}", Tool, _reporter(problems, rel))
            if found_tools is None:
                continue
            if name in BUILTIN_TOOLS:
                problems.append(Problem(rel, f"{name!r} is a built-in tool name: rename the file"))
                continue
            if len(found_tools) != 1:
                problems.append(Problem(rel, f"define exactly one tool with @tool(...) (found {len(found_tools)})"))
                continue
            problems.extend(Problem(rel, message) for message in _tool_problems(found_tools[0]))
            tools[name] = found_tools[0]

    skill_problems: list[tuple[str, str]] = []
    skills = load_skills(base / "skills", namespace, skill_problems)
    problems.extend(Problem(path, message) for path, message in skill_problems)
    subagents = _load_subagents(base / "subagents", model, namespace, problems, warnings)
    hooks = _load_hooks(base / "hooks", namespace, problems)
    schedule_problems: list[tuple[str, str]] = []
    schedules = load_schedules(base / "schedules", namespace, schedule_problems)
    problems.extend(Problem(path, message) for path, message in schedule_problems)
    channel_problems: list[tuple[str, str]] = []
    channels = load_channels(base / "channels", namespace, channel_problems)
    problems.extend(Problem(path, message) for path, message in channel_problems)
    # A channel's events map rides the hooks' path: every append hands it the batch after commit.
    hooks += [hook for c in channels.values() if (hook := c.hook()) is not None]
    mcp_servers = _load_mcp(base, config, problems)
    runtime = _check_runtime(config, tools, problems)
    seed_dir = _seed_dir(base, runtime, problems)
    if isinstance(runtime, VirtualRuntime) and not runtime.per_session:
        bind_skills(runtime.fs, skills)  # a skills_fs() in the tree serves this agent's skills

    if problems:
        raise AgentFolderError(root, problems)
    return LoadedAgent(
        slug=slug, root=root, config=config, model=model, instructions=instructions,
        tools=tools, content_hash=digest, warnings=warnings, skills=skills, subagents=subagents, hooks=hooks,
        schedules=schedules, runtime=runtime, seed_dir=seed_dir, mcp=mcp_servers, channels=channels,
    )


def _load_mcp(base: Path, config: Agent, problems: list[Problem]) -> list[McpServer]:
    """Servers from agent/mcp.json and `Agent(mcp=[...])`; a name used twice is a problem."""
    servers: list[McpServer] = []
    path = base / "mcp.json"
    if path.is_file():
        found, found_problems = load_mcp_json(path)
        problems.extend(Problem("agent/mcp.json", message) for message in found_problems)
        servers += found
    declared = list(config.mcp or ())
    for server in declared:
        if not isinstance(server, McpServer):
            problems.append(Problem("agent/agent.py", "mcp= takes servers made with mcp_stdio(...) or mcp_http(...)"))
            continue
        problems.extend(Problem("agent/agent.py", message) for message in server_problems(server))
        servers.append(server)
    names = [s.name for s in servers]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(Problem("agent/mcp.json", f"MCP server {name!r} is declared twice: rename one"))
    return servers


def _check_runtime(config: Agent, tools: dict[str, Tool], problems: list[Problem]) -> Runtime:
    """The agent's runtime, with every incoherent pairing reported (fail closed)."""
    runtime = config.runtime if config.runtime is not None else DEFAULT_RUNTIME
    if not isinstance(runtime, LocalRuntime | VirtualRuntime):
        problems.append(Problem("agent/agent.py", f"runtime must be local_runtime(...) or virtual_runtime(...) "
                                                  f"(from agents.sdk), not {runtime!r}"))
        return DEFAULT_RUNTIME
    found = runtime.problems() + allowlist_problems(runtime, config.tools)
    problems.extend(Problem("agent/agent.py", message) for message in found)
    if found:
        return runtime
    allowlist = None if config.tools is None else tuple(config.tools)
    possible = could_offer(runtime, allowlist)
    for name in runtime.needs_approval:
        if name not in possible:
            problems.append(Problem("agent/agent.py", f"needs_approval names {name!r}, which this agent's workspace "
                                                      f"does not offer ({', '.join(sorted(possible)) or 'no tools'})"))
    offered = offered_at_discovery(runtime, allowlist)
    for name in sorted(tools):
        rel = f"agent/tools/{name}.py"
        if name in possible:
            problems.append(Problem(rel, f"{name!r} is a workspace tool of this agent's runtime: rename the file "
                                         "(or narrow the workspace with Agent(tools=[...]))"))
        elif tools[name].execution == "agent" and not (isinstance(runtime, LocalRuntime) and offered
                                                           and "shell" in offered):
            problems.append(Problem(rel, "execution='agent' runs the tool as a script the model starts with the "
                                         "workspace's shell, and this agent's workspace offers no shell: use "
                                         "local_runtime() with 'shell' allowed, or remove execution='agent' to run "
                                         "the tool on the server"))
    return runtime


def _seed_dir(base: Path, runtime: Runtime, problems: list[Problem]) -> Path | None:
    """The folder of files copied into each local session workspace, checked."""
    found = [base / name for name in SEED_FOLDERS if (base / name).exists()]
    if not found:
        return None
    rels = [f"agent/{f.relative_to(base).as_posix()}/" for f in found]
    if len(found) > 1:
        problems.append(Problem(rels[1], f"seed files are in {rels[0]} already: keep one folder"))
        return None
    folder, rel = found[0], rels[0]
    if not folder.is_dir() or folder.is_symlink():
        problems.append(Problem(rel, "must be a folder of files to copy into each session's workspace"))
        return None
    if not isinstance(runtime, LocalRuntime):
        problems.append(Problem(rel, "a virtual runtime has no directory to copy seed files into: put them in its "
                                     "filesystem (memory_fs({...})) or use local_runtime()"))
        return None
    total = 0
    for path in folder.rglob("*"):
        if path.is_symlink():
            problems.append(Problem(f"{rel}{path.relative_to(folder).as_posix()}",
                                    "symbolic links are not copied into workspaces: copy the file instead"))
        elif path.is_file():
            total += path.stat().st_size
    if total > MAX_SEED_BYTES:
        problems.append(Problem(rel, f"seed files add up to {total} bytes, more than {MAX_SEED_BYTES}"))
    return folder


def _load_subagents(
    folder: Path, parent_model: str, namespace: str, problems: list[Problem], warnings: list[Problem]
) -> dict[str, LoadedSubagent]:
    """`subagents/<id>/agent.py` (description required, model optional) + instructions.md."""
    found: dict[str, LoadedSubagent] = {}
    if not folder.is_dir():
        return found
    for path in sorted(p for p in folder.iterdir() if p.name not in IGNORED_PARTS and not p.name.startswith((".", "_"))):
        rel = f"agent/subagents/{path.name}"
        if not path.is_dir():
            problems.append(Problem(rel, "a subagent is a folder: agent/subagents/<id>/ with agent.py and instructions.md"))
            continue
        if not SUBAGENT_ID.match(path.name):
            problems.append(Problem(rel, "rename it: subagent ids are lowercase letters, digits, '-' and '_'"))
            continue
        for ignored in ("tools", "skills", "mcp-connections"):
            if (path / ignored).exists():
                warnings.append(Problem(f"{rel}/{ignored}", "ignored: subagents use the parent's tools and skills"))
        if (path / "subagents").exists():
            problems.append(Problem(f"{rel}/subagents", "nested subagents are not supported: move them up to agent/subagents/"))
        instructions_path = path / "instructions.md"
        instructions = instructions_path.read_text(encoding="utf-8").strip() if instructions_path.is_file() else ""
        if not instructions:
            problems.append(Problem(f"{rel}/instructions.md", "missing or empty: write the subagent's system prompt"))
        config = None
        if not (path / "agent.py").is_file():
            problems.append(Problem(f"{rel}/agent.py", "missing: define `agent = Agent(description=...)`"))
        else:
            configs = find_in_file(path / "agent.py", f"{namespace}.subagents.{path.name.replace('-', '_')}", Agent,
                                   _reporter(problems, f"{rel}/agent.py"), name="agent")
            if configs == []:
                problems.append(Problem(f"{rel}/agent.py", "define `agent = Agent(description=...)`"))
            elif configs and not configs[0].description.strip():
                problems.append(Problem(f"{rel}/agent.py", "add a description: the parent reads it to decide when to delegate"))
            elif configs:
                config = configs[0]
        if config is None or not instructions:
            continue
        model = config.model or parent_model
        try:
            providers.parse_model_id(model)
        except ValueError as exc:
            problems.append(Problem(f"{rel}/agent.py", str(exc)))
            continue
        found[path.name] = LoadedSubagent(path.name, config.description.strip(), model, dict(config.params), instructions)
    return found


def _load_hooks(folder: Path, namespace: str, problems: list[Problem]) -> list[Hook]:
    hooks: list[Hook] = []
    if not folder.is_dir():
        return hooks
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        rel = f"agent/hooks/{path.name}"
        found = find_in_file(path, f"{namespace}.hooks.{path.stem}", Hook, _reporter(problems, rel))
        if found is None:
            continue
        if not found:
            problems.append(Problem(rel, "define at least one handler with @hook('<event type>') (from agents.sdk import hook)"))
        hooks.extend(found)
    return hooks


def _reporter(problems: list[Problem], rel: str) -> Callable[[str], None]:
    return lambda message: problems.append(Problem(rel, message))


def _tool_problems(t: Tool) -> list[str]:
    problems = []
    if not t.description or not t.description.strip():
        problems.append("give the tool a description: @tool(description=...)")
    if t.effect not in ("read", "write"):
        problems.append(f"effect must be 'read' or 'write', not {t.effect!r}")
    if t.execution not in ("server", "agent"):
        problems.append(f"execution must be 'server' or 'agent', not {t.execution!r}")
    not_bool = [o for o in ("needs_approval", "direct_call") if not isinstance(getattr(t, o), bool)]
    problems.extend(f"{o} must be True or False, not {getattr(t, o)!r}" for o in not_bool)
    if not not_bool and t.direct_call and not t.needs_approval:
        problems.append("direct_call=True only lifts the approval of a needs_approval=True tool; "
                        "remove it (tools without approval can be called directly already)")
    try:
        properties = t.input_schema().get("properties", {})
    except Exception as exc:
        return problems + [f"its input model has no JSON schema: {exc}"]
    for name in t.time_args:
        if name not in properties:
            problems.append(f"time_args names {name!r}, which the input model does not have: fix the name or add the field")
    return problems


def deploy_agent_folder(root: Path | str, slug: str | None = None) -> Deployment:
    """Validate a folder and make it the agent's active release.

    A folder whose content hash matches the active deployment records nothing
    new. Each new release is copied under the state root so that workers run
    exactly what was validated, whatever happens to the source folder later.
    """
    loaded = load_agent_folder(root, slug)
    manifest = loaded.manifest()
    agent, _ = AgentRow.objects.get_or_create(slug=loaded.slug)
    active = agent.active_deployment
    # The manifest counts too: the default model can change with the environment.
    if active and active.content_hash == loaded.content_hash and active.manifest == manifest and Path(active.snapshot_path).is_dir():
        deployment_activated.send(sender=Deployment, agent=agent, deployment=active, loaded=loaded)
        return active

    snapshot = Path(settings.STATE_ROOT) / "deployments" / loaded.slug / loaded.content_hash[:16]
    if not snapshot.is_dir():
        tmp = snapshot.with_name(snapshot.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(agent_dir(loaded.root), tmp / "agent", ignore=shutil.ignore_patterns("__pycache__"))
        tmp.rename(snapshot)

    with transaction.atomic():
        agent = AgentRow.objects.select_for_update().get(pk=agent.pk)
        version = (agent.deployments.order_by("-version").values_list("version", flat=True).first() or 0) + 1
        deployment = Deployment.objects.create(
            agent=agent,
            version=version,
            source=str(loaded.root),
            snapshot_path=str(snapshot),
            content_hash=loaded.content_hash,
            manifest=manifest,
            status=Deployment.Status.VALIDATING,
        )
        AgentRow.objects.filter(pk=agent.pk).update(name=manifest["name"], description=manifest["description"])
        deployment.activate()
        deployment_activated.send(sender=Deployment, agent=agent, deployment=deployment, loaded=loaded)
    return deployment


_cache: dict[tuple[int, str], LoadedAgent] = {}
_cache_lock = threading.Lock()


def load_deployment(deployment: Deployment) -> LoadedAgent:
    """The loaded agent of a release, imported once per process."""
    key = (deployment.pk, deployment.content_hash)  # a release never changes: no query on a hit
    with _cache_lock:
        loaded = _cache.get(key)
        if loaded is None:
            path = deployment.snapshot_path or deployment.source
            loaded = load_agent_folder(path, deployment.agent.slug)
            _cache[key] = loaded
        return loaded


_releases: dict[tuple[int, str], Deployment] = {}


def release(pk: int, content_hash: str) -> Deployment:
    """A release row with its agent, read once per process: the fields a turn needs never change.

    Shared between threads and turns, so read-only; the agent's name or active
    release on it may be stale (its slug and id are not).
    """
    key = (pk, content_hash)
    found = _releases.get(key)
    if found is None:
        found = Deployment.objects.select_related("agent").get(pk=pk)
        if found.content_hash == content_hash:
            _releases[key] = found
    return found


def find_agent_folders(paths: list[Path]) -> list[Path]:
    """Each path is an agent folder (holding agent/) or a folder of them."""
    found: list[Path] = []
    for path in paths:
        path = path.resolve()
        if agent_dir(path).is_dir():
            found.append(path)
        elif path.is_dir():
            found.extend(sorted(p for p in path.iterdir() if agent_dir(p).is_dir()))
        else:
            raise AgentFolderError(path, [Problem(str(path), "not a folder: pass an agent folder or a folder of them")])
    return found
