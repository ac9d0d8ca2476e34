"""What one MCP declaration comes to now: the values it is opened with, read from the agent's
credentials when a connection opens, and whether the release's allowed domains admit it."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from agents.integrations.outbound import domain_admits
from agents.mcp import VARIABLE, McpServer, McpUnavailable, expand
from agents.mcpauth import NotAuthorized, bearer_token
from agents.redaction import without_credentials


@dataclass(frozen=True)
class Resolved:
    """A declaration with its `${VAR}`s (and OAuth token) filled in: what one connection was opened with."""
    env: dict[str, str]
    args: tuple[str, ...]
    url: str
    headers: dict[str, str]
    secrets: tuple[str, ...] = ()  # the values its ${VAR}s stood for: masked wherever the server's words are shown

    def fingerprint(self) -> str:
        """A digest that changes when any value does: a connection opened with other credentials is replaced."""
        blob = json.dumps([self.env, self.args, self.url, self.headers], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()


def resolve(server: McpServer) -> Resolved:
    """The values `server` is opened with, read now from the agent's credentials (this thread's scope).

    Raises McpUnavailable naming what is missing; a value never appears in the message.
    """
    try:
        names = {name for text in (*server.env.values(), *server.args, server.url, *server.headers.values())
                 for name in VARIABLE.findall(text)}
        resolved = Resolved(env={k: expand(v) for k, v in server.env.items()},
                            args=tuple(expand(a) for a in server.args), url=expand(server.url),
                            headers={k: expand(v) for k, v in server.headers.items()},
                            secrets=tuple(expand(f"${{{name}}}") for name in sorted(names)))
        if server.oauth:
            token = bearer_token(server)
            resolved.headers["Authorization"] = f"Bearer {token}"
            resolved = replace(resolved, secrets=(*resolved.secrets, token))
    except KeyError as exc:  # expand(): "X is not set: ..."
        raise McpUnavailable(f"MCP server {server.name!r} cannot be reached: {exc.args[0]}") from None
    except NotAuthorized as exc:
        raise McpUnavailable(str(exc)) from None
    return resolved


def refused_by_domains(server: McpServer, domains: tuple[str, ...]) -> str:
    """Why a server is out of the release's allowed domains, or "" when it is not: an HTTP server on
    another host, or a command whose network the domains cannot hold (a release deployed before
    `uvx` and `npx` servers were given the network)."""
    if not domains:
        return ""
    if server.command:
        if server.uses_network or not server.sandbox:
            return (f"MCP server {server.name!r} is refused: the agent's allowed domains cannot be enforced on "
                    "its network (deploy without --allow-domain, or declare it sandboxed without network)")
        return ""
    try:
        host = urlsplit(expand(server.url)).hostname or ""
    except KeyError as exc:  # an unset variable in the URL: connecting would say so
        return str(exc.args[0]) if exc.args else ""
    if domain_admits(domains, host):
        return ""
    return (f"MCP server {server.name!r} is refused: {host or without_credentials(server.url)} is not one of the "
            "agent's allowed domains")
