"""Checks across what a folder declares: its MCP servers, its runtime against its tools and
workspace allowlist, its seed files, and each tool's declaration.

`Agent(tools=[...])` may only narrow the workspace tools the runtime's
filesystem implements, `execution="agent"` tools need a workspace with
`shell`, and seed files (`agent/workspace/` or `agent/sandbox/workspace/`)
need a local runtime.
"""
from __future__ import annotations

from pathlib import Path

from agents.definitions import Agent, Tool
from agents.discovery.loaded import Problem
from agents.mcp import McpServer, load_mcp_json, server_problems
from agents.workspaces.runtimes import (
    DEFAULT_RUNTIME,
    LocalRuntime,
    Runtime,
    VirtualRuntime,
    allowlist_problems,
    could_offer,
    offered_at_discovery,
)

# Seed files copied into each local session workspace (the second spelling is the reference's).
SEED_FOLDERS = ("workspace", "sandbox/workspace")
MAX_SEED_BYTES = 64 * 1024 * 1024


def load_mcp(base: Path, config: Agent, problems: list[Problem]) -> list[McpServer]:
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


def check_runtime(config: Agent, tools: dict[str, Tool], problems: list[Problem]) -> Runtime:
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


def seed_folder(base: Path, runtime: Runtime, problems: list[Problem]) -> Path | None:
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


def tool_problems(t: Tool) -> list[str]:
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
