"""Loading one agent folder: `agent/instructions.md` (required), `agent/agent.py` (optional
`agent = Agent(...)`), `agent/tools/<name>.py` (one tool per file), skills, subagents, hooks,
schedules, channels, MCP servers and the runtime. Validation collects every problem.
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Callable

from django.conf import settings
from django.core.exceptions import ValidationError

from agents import providers
from agents.channels import load_channels
from agents.definitions import BUILTIN_TOOLS as DECLARABLE
from agents.definitions import BUILTINS, Agent, Tool
from agents.discovery.checks import check_runtime, load_mcp, seed_folder, tool_problems
from agents.discovery.experiments import load_experiments
from agents.discovery.modelset import resolve as resolve_models
from agents.discovery.loaded import AgentFolderError, LoadedAgent, LoadedSubagent, Problem
from agents.hooks import Hook
from agents.models import validate_slug
from agents.modules import find_in_file, release_namespace
from agents.providers.runtimes import runtime_of
from agents.schedules import load_schedules
from agents.skills import load_skills
from agents.workspaces.runtimes import VirtualRuntime
from agents.workspaces.unionfs import bind_skills

TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
SUBAGENT_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
# Built-in tools the engine offers when the agent has skills, subagents or reminders.
BUILTIN_TOOLS = frozenset({"load_skill", "read_skill_file", "delegate", "remind_me", "cancel_reminder"})
# Reserved only for an agent with peers: a release from before they existed may have a tool of that name.
MESSAGING_TOOLS = frozenset({"list_agents", "send_message", "read_notifications"})
IGNORED_PARTS = {"__pycache__", ".DS_Store"}
# The longest retention an agent may ask for (AGENTSITE_RETENTION_DAYS has the same bound):
# beyond it a cutoff date would not compute.
MAX_RETENTION_DAYS = 36500


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


def load_agent_folder(root: Path | str, slug: str | None = None, *, resolved_default: str | None = None) -> LoadedAgent:
    """Load and validate one agent folder; raise AgentFolderError listing every problem.

    `resolved_default`: the model of an agent that names none (a release's, resolved
    when it was deployed); None: the server's default now.
    """
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
    namespace = release_namespace(slug, digest)

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

    modelset, model_problems = resolve_models(config, slug, resolved_default or default_model())
    problems.extend(Problem("agent/agent.py", p) for p in model_problems)
    model = modelset.default
    if config.max_steps is not None and not (isinstance(config.max_steps, int) and 1 <= config.max_steps <= 100):
        problems.append(Problem("agent/agent.py", "max_steps must be an integer between 1 and 100"))
    if (problem := retention_problem(config.retention_days)) is not None:
        problems.append(Problem("agent/agent.py", problem))
    if (problem := budget_problem(config.budget)) is not None:
        problems.append(Problem("agent/agent.py", problem))
    if (problem := builtins_problem(config.builtins)) is not None:
        problems.append(Problem("agent/agent.py", problem))

    tools: dict[str, Tool] = {}
    tools_dir = base / "tools"
    # The tools of the built-ins it declares (Agent(builtins=[...])): its own tools may not take their names.
    declared = config.builtins if isinstance(config.builtins, (list, tuple)) else ()
    opted_into = {tool for builtin in declared if isinstance(builtin, str) for tool in DECLARABLE.get(builtin, ())}
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
            if name in BUILTIN_TOOLS or ((modelset.peers or modelset.remote_peers) and name in MESSAGING_TOOLS) or \
                    name in opted_into:
                problems.append(Problem(rel, f"{name!r} is a built-in tool name: rename the file"))
                continue
            if len(found_tools) != 1:
                problems.append(Problem(rel, f"define exactly one tool with @tool(...) (found {len(found_tools)})"))
                continue
            problems.extend(Problem(rel, message) for message in tool_problems(found_tools[0]))
            tools[name] = found_tools[0]

    if (problem := shared_problem(config.share_tools, tools)) is not None:
        problems.append(Problem("agent/agent.py", problem))

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
    mcp_servers = load_mcp(base, config, problems)
    runtime = check_runtime(config, tools, problems)
    experiments = load_experiments(base, namespace, problems)
    seed_dir = seed_folder(base, runtime, problems)
    if isinstance(runtime, VirtualRuntime) and not runtime.per_session:
        bind_skills(runtime.fs, skills)  # a skills_fs() in the tree serves this agent's skills

    if problems:
        raise AgentFolderError(root, problems)
    return LoadedAgent(
        slug=slug, root=root, config=config, model=model, instructions=instructions,
        tools=tools, content_hash=digest, warnings=warnings, skills=skills, subagents=subagents, hooks=hooks,
        schedules=schedules, runtime=runtime, seed_dir=seed_dir, mcp=mcp_servers, channels=channels,
        experiments=experiments, models=modelset.models, fallback=modelset.fallback, peers=modelset.peers,
        remote_peers=modelset.remote_peers,
    )


def retention_problem(days: object) -> str | None:
    if days is None or (isinstance(days, int) and not isinstance(days, bool) and 0 <= days <= MAX_RETENTION_DAYS):
        return None
    return (f"retention_days must be a whole number of days between 0 and {MAX_RETENTION_DAYS}, not {days!r}: "
            "Agent(retention_days=90) deletes sessions idle for 90 days, 0 keeps them forever, and None "
            "(the default) follows the server's AGENTSITE_RETENTION_DAYS")


def shared_problem(shared: object, tools: dict[str, Tool]) -> str | None:
    if not isinstance(shared, (list, tuple)) or not all(isinstance(name, str) for name in shared):
        return f"share_tools must be a list of this agent's tool names, not {shared!r}"
    own = sorted(name for name, t in tools.items() if t.execution == "server")
    if unknown := [name for name in shared if name not in own]:
        return (f"share_tools: {', '.join(map(repr, unknown))} is not one of this agent's server tools "
                f"({', '.join(own) or 'none'}): name a file of agent/tools/")
    return None


def builtins_problem(builtins: object) -> str | None:
    choose = f"choose from {', '.join(BUILTINS)}, e.g. builtins=[{BUILTINS[0]!r}]"
    if not isinstance(builtins, (list, tuple)) or not all(isinstance(name, str) for name in builtins):
        return f"builtins must be a list of names, not {builtins!r}: {choose}"
    if unknown := [name for name in builtins if name not in BUILTINS]:
        return f"builtins: {', '.join(map(repr, unknown))} is not a built-in tool this server offers: {choose}"
    return None


def budget_problem(budget: object) -> str | None:
    fix = 'write budget={"daily": 5, "monthly": 100} (US dollars, either or both), or leave it out'
    if budget is None:
        return None
    if not isinstance(budget, dict) or not budget or set(budget) - {"daily", "monthly"}:
        return f"budget must name a daily and/or monthly amount, not {budget!r}: {fix}"
    for window, amount in budget.items():
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 < amount < 10**9:
            return f"budget[{window!r}] must be a number of dollars above 0, not {amount!r}: {fix}"
    return None


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
        if not config.model and runtime_of(model):
            # Subagents run on the own loop: one under a claude-agent parent calls the same model over the Messages API.
            model = f"anthropic:{model.partition(':')[2]}"
        try:
            providers.parse_model_id(model)
        except ValueError as exc:
            problems.append(Problem(f"{rel}/agent.py", str(exc)))
            continue
        if runtime_of(model):
            problems.append(Problem(f"{rel}/agent.py", f"a subagent runs on the agent's own loop, not on {model!r}: "
                                    "give it a model of another provider (model='anthropic:...')"))
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
