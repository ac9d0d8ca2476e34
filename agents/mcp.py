"""MCP server declarations: `agent/mcp.json` and `Agent(mcp=[...])`.

    {"mcpServers": {
        "notes":  {"command": "python", "args": ["servers/notes.py"], "env": {"TOKEN": "${NOTES_TOKEN}"}},
        "search": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${SEARCH_TOKEN}"},
                   "needsApproval": ["delete_index"], "timeout": 20}
    }}

A server is either a command started over stdio (run in the agent folder)
or a streamable-HTTP URL. A command may be an installed script's absolute
path (its installation is what the sandbox shows it, sessions.mcp.launch),
`uvx NAME` or `npx -y PACKAGE` (network and a package cache of the folder's
own), and `paths` adds host paths it may read. `${VAR}` in `env`, `args`, `headers` and `url` is
read when the connection opens, from the agent's secrets and then the server's
environment (agents.secrets.lookup), so no secret is stored in the folder.
Its tools reach the model as `<server>__<tool>`, unless `"advertise": false`
keeps the server for tools alone (`ctx.host.mcp`). `"oauth": true` on a URL
server takes its bearer token from the OAuth authorization that
`manage.py mcp oauth SLUG NAME` stores as the agent's secrets.
Connections themselves live in sessions.mcp.tools.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from agents.secrets.lookup import credentials
from agents.workspaces.installs import hidden

SERVER_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,31}$")
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
SEPARATOR = "__"  # between the server's name and its tool's in the name the model sees
KNOWN_KEYS = {"command", "args", "env", "url", "headers", "needsApproval", "timeout", "connectTimeout", "sandbox",
              "network", "oauth", "advertise", "paths"}
# A command run through a package runner fetches its package when it starts: it gets the network and a cache.
PACKAGE_RUNNERS = ("uvx", "npx")


# Why this process cannot reach an agent's servers, by name: sessions.mcp.check registers how it finds out
# (it owns the connections, and agents imports nothing above it), so the admin can show it.
_unreachable_readers: list[Callable[[Any], dict[str, str]]] = []


def add_unreachable_reader(reader: Callable[[Any], dict[str, str]]) -> None:
    if reader not in _unreachable_readers:
        _unreachable_readers.append(reader)


def unreachable(agent: Any) -> dict[str, str]:
    """The servers of `agent`'s active release this process cannot start or reach, with why."""
    found: dict[str, str] = {}
    for reader in _unreachable_readers:
        found.update(reader(agent))
    return found


class McpError(Exception):
    """What calling an MCP server from an agent's tool (`ctx.host.mcp`) can raise."""


class McpUnavailable(McpError):
    """The server could not be reached, did not answer in time, or went away."""


class McpToolError(McpError):
    """The server ran the tool and reported an error."""


class McpNotFound(McpError, LookupError):
    """No server of that name is declared, or the server has no tool of that name."""


class McpApprovalRequired(McpError, PermissionError):
    """The tool is declared `needsApproval` and the calling tool's own call was not approved."""


@dataclass(frozen=True)
class McpServer:
    """One MCP server an agent uses. Build it with `mcp_stdio(...)` or `mcp_http(...)`."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    # True: every tool of the server waits for approval; a tuple: only those tools.
    needs_approval: bool | tuple[str, ...] = False
    timeout: float = 30.0           # one call, seconds
    connect_timeout: float = 15.0   # start (or reach) the server and list its tools, seconds
    # A stdio server runs in the workspace sandbox (agents.workspaces.sandbox) unless trusted with
    # sandbox=False; inside it, it reaches the network only with network=True.
    sandbox: bool = True
    network: bool = False
    # A URL server whose bearer token comes from `manage.py mcp oauth` (the agent's MCP_OAUTH_<NAME>_* secrets).
    oauth: bool = False
    # False: the model is not offered its tools; the agent's tools call them through ctx.host.mcp.
    advertise: bool = True
    # Host folders or files a sandboxed server may read besides the agent folder (absolute paths).
    paths: tuple[str, ...] = ()

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    @property
    def runner(self) -> str:
        """`uvx` or `npx` when the command is one of them: the server's package is fetched when it starts."""
        name = Path(self.command).name if isinstance(self.command, str) else ""
        return name if name in PACKAGE_RUNNERS else ""

    @property
    def uses_network(self) -> bool:
        return self.network is True or bool(self.runner)

    def tool_needs_approval(self, tool: str) -> bool:
        return self.needs_approval if isinstance(self.needs_approval, bool) else tool in self.needs_approval

    def describe(self) -> dict[str, Any]:
        """For the manifest and /info: never the values of env or headers (they may hold secrets)."""
        return {"name": self.name, "transport": self.transport,
                **({"command": self.command, "args": list(self.args)} if self.command else {"url": self.url}),
                "envKeys": sorted(self.env), "headerKeys": sorted(self.headers),
                "needsApproval": self.needs_approval if isinstance(self.needs_approval, bool) else list(self.needs_approval),
                "timeout": self.timeout, "oauth": self.oauth, "advertise": self.advertise,
                **({"sandbox": self.sandbox, "network": self.uses_network, "paths": list(self.paths)}
                   if self.command else {})}


def mcp_stdio(name: str, command: str, args: list[str] | tuple[str, ...] = (), *, env: dict[str, str] | None = None,
              needs_approval: bool | list[str] | tuple[str, ...] = False, timeout: float = 30.0,
              connect_timeout: float = 15.0, sandbox: bool = True, network: bool = False,
              advertise: bool = True, paths: list[str] | tuple[str, ...] = ()) -> McpServer:
    """A server the agent starts as a subprocess and talks to over stdin/stdout.

    It runs sandboxed: it sees the agent folder read-only, a private /tmp and
    no network unless `network=True` (`uvx` and `npx` get it, and a package
    cache). `paths`: absolute host paths it may also read. `sandbox=False`
    trusts it with the server's user and filesystem. `advertise=False`: only
    the agent's tools reach it (`ctx.host.mcp.call`), the model is not offered its tools.
    """
    return McpServer(name=name, command=command, args=tuple(args), env=dict(env or {}),
                     needs_approval=_approval(needs_approval), timeout=timeout, connect_timeout=connect_timeout,
                     sandbox=sandbox, network=network, advertise=advertise, paths=tuple(paths))


def mcp_http(name: str, url: str, *, headers: dict[str, str] | None = None,
             needs_approval: bool | list[str] | tuple[str, ...] = False, timeout: float = 30.0,
             connect_timeout: float = 15.0, oauth: bool = False, advertise: bool = True) -> McpServer:
    """A server reached over streamable HTTP.

    `oauth=True`: it wants an OAuth bearer token, which `manage.py mcp oauth SLUG NAME`
    obtains and stores as the agent's secrets; until then its tools are not offered.
    `advertise=False`: only the agent's tools reach it (`ctx.host.mcp.call`).
    """
    return McpServer(name=name, url=url, headers=dict(headers or {}), needs_approval=_approval(needs_approval),
                     timeout=timeout, connect_timeout=connect_timeout, oauth=oauth, advertise=advertise)


def _approval(value: Any) -> bool | tuple[str, ...]:
    return value if isinstance(value, bool) else tuple(value)


def expand(value: str, environ: Mapping[str, str] | None = None) -> str:
    """`${VAR}` replaced from the agent's secrets, then the environment; one set in neither is an error naming it."""
    environ = credentials if environ is None else environ

    def one(match: re.Match) -> str:
        name = match.group(1)
        if name not in environ:
            raise KeyError(f"{name} is not set: set it as a secret of the agent (manage.py secrets set SLUG "
                           f"{name}) or in the server's environment")
        return environ[name]

    return VARIABLE.sub(one, value)


def server_problems(server: McpServer) -> list[str]:
    """What is wrong with one declaration, each message saying the fix."""
    problems = []
    if not isinstance(server.name, str) or not SERVER_NAME.match(server.name) or SEPARATOR in server.name:
        problems.append(f"server name {server.name!r}: use letters, digits, '-' and single '_' (at most 32)")
    if bool(server.command) == bool(server.url):
        problems.append(f"server {server.name!r}: give exactly one of command (stdio) or url (streamable HTTP)")
    if server.url and not re.match(r"^https?://", VARIABLE.sub("x", server.url)):
        problems.append(f"server {server.name!r}: url must start with http:// or https://")
    for label, mapping in (("env", server.env), ("headers", server.headers)):
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
            problems.append(f"server {server.name!r}: {label} maps names to strings")
    if not all(isinstance(a, str) for a in server.args):
        problems.append(f"server {server.name!r}: args is a list of strings")
    for label, value in (("timeout", server.timeout), ("connectTimeout", server.connect_timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 600:
            problems.append(f"server {server.name!r}: {label} is a number of seconds, above 0 and at most 600")
    for label, value in (("sandbox", server.sandbox), ("network", server.network), ("oauth", server.oauth),
                         ("advertise", server.advertise)):
        if not isinstance(value, bool):
            problems.append(f"server {server.name!r}: {label} is true or false")
    if server.url and (server.sandbox is not True or server.network is not False):
        problems.append(f"server {server.name!r}: sandbox and network apply to a command (stdio) server only")
    if server.oauth is True and server.command:
        problems.append(f"server {server.name!r}: oauth applies to a url server only (a command server takes "
                        "its credentials in env)")
    if server.oauth is True and any(k.lower() == "authorization" for k in server.headers):
        problems.append(f"server {server.name!r}: with oauth the Authorization header comes from the stored "
                        "authorization: remove it from headers")
    if not isinstance(server.needs_approval, bool) and not all(isinstance(t, str) for t in server.needs_approval):
        problems.append(f"server {server.name!r}: needsApproval is true, false or a list of tool names")
    if server.paths and server.url:
        problems.append(f"server {server.name!r}: paths apply to a command (stdio) server only")
    problems.extend(f"server {server.name!r}: {problem}" for problem in path_problems(server.paths))
    return problems


def path_problems(paths: Any) -> list[str]:
    """What is wrong with a declaration's `paths`: each an absolute, existing host path that holds nothing
    of the server's state, its workspaces or a home directory (agents.workspaces.installs.hidden)."""
    if not isinstance(paths, (list, tuple)) or not all(isinstance(p, str) for p in paths):
        return ["paths is a list of absolute paths (strings)"]
    problems = []
    for raw in paths:
        path = Path(raw)
        if "\x00" in raw or not path.is_absolute():
            problems.append(f"paths: {raw!r} is not absolute: write the whole path, from /")
            continue
        try:
            real = path.resolve()
            exists = real.exists()
        except OSError as exc:  # a folder on the way the server may not enter
            problems.append(f"paths: {raw} cannot be read by the server ({exc.strerror}): give a path it can read")
            continue
        if reason := hidden(real):
            problems.append(f"paths: {raw} {reason}, which no sandboxed process may see: give a folder of "
                            "its own instead")
        elif not exists:
            problems.append(f"paths: {raw} does not exist on this host: create it or remove it from paths")
    return problems


def load_mcp_json(path: Path) -> tuple[list[McpServer], list[str]]:
    """The servers `agent/mcp.json` declares, and its problems."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return [], [f"not valid JSON ({exc}): fix the syntax"]
    if not isinstance(raw, dict) or not isinstance(raw.get("mcpServers"), dict) or set(raw) - {"mcpServers"}:
        return [], ['write {"mcpServers": {"<name>": {"command": ...} or {"url": ...}}}']
    servers, problems = [], []
    for name, entry in raw["mcpServers"].items():
        if not isinstance(entry, dict):
            problems.append(f"server {name!r}: an object with command or url")
            continue
        if unknown := sorted(set(entry) - KNOWN_KEYS):
            problems.append(f"server {name!r}: unknown key(s) {', '.join(unknown)} (known: {', '.join(sorted(KNOWN_KEYS))})")
            continue
        approval = entry.get("needsApproval", False)
        server = McpServer(
            name=name, command=entry.get("command", ""), args=tuple(entry.get("args", ()) or ()),
            env=dict(entry.get("env", {}) or {}), url=entry.get("url", ""), headers=dict(entry.get("headers", {}) or {}),
            needs_approval=approval if isinstance(approval, bool) else tuple(approval if isinstance(approval, list) else [approval]),
            timeout=entry.get("timeout", 30.0), connect_timeout=entry.get("connectTimeout", 15.0),
            sandbox=entry.get("sandbox", True), network=entry.get("network", False),
            oauth=entry.get("oauth", False), advertise=entry.get("advertise", True),
            paths=tuple(entry["paths"]) if isinstance(entry.get("paths"), list) else entry.get("paths", ()),
        )
        if not isinstance(server.command, str) or not isinstance(server.url, str):
            problems.append(f"server {name!r}: command and url are strings")
            continue
        problems.extend(server_problems(server))
        servers.append(server)
    return servers, problems
