"""MCP connections of a process, and the tools they give the model.

Each process (a worker, or the web process for direct tool calls) keeps one
connection per declared server, opened on first use and reused by every
turn: for a stdio server that is one subprocess, started in the agent's
folder. The official SDK's client is asynchronous, so the connections live
on one event loop thread per process; turns, which are synchronous, reach
it with run_coroutine_threadsafe and bounded waits.

A server's tools become `agents.sdk.Tool`s named `<server>__<tool>`, so they
pass through the same ToolCall rows, approvals and dry-run rules as server
tools. Nothing here can hang a turn: starting a server and every call are
bounded by the declaration's timeouts, and a server that fails, times out
or dies mid-call ends the call with an error the model sees. A connection
that broke is opened again on the next use; a server that failed to start
is tried again at most every RETRY_SECONDS.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from agents.definitions import Tool
from agents.discovery import LoadedAgent
from agents.mcp import SEPARATOR, McpServer, McpToolError, McpUnavailable
from agents.mcpauth import NotAuthorized, rejected
from sessions.mcp.declared import Resolved, refused_by_domains, resolve
from sessions.mcp.launch import StderrTail, masked, stdio_parameters, stdio_transport
from sessions.plumbing.loopthread import LoopThread, submit
from sessions.turn import extensions

log = logging.getLogger(__name__)

RETRY_SECONDS = 2.0
STDERR_WAIT = 2.0  # for a server that failed to start to finish writing why
MAX_NAME = 64  # providers refuse longer tool names


class McpArguments(BaseModel):
    """Any JSON object: the server validates its own tools' input and says what is wrong."""
    model_config = ConfigDict(extra="allow")


@dataclass(frozen=True)
class McpTool(Tool):
    """A tool of an MCP server; its input schema is the server's."""
    schema: dict[str, Any] = field(default_factory=dict)
    server: str = ""
    remote_name: str = ""
    family: str = "mcp"

    def input_schema(self) -> dict[str, Any]:
        return self.schema

    def source(self) -> dict[str, str]:
        """Where /info says the tool comes from: its server."""
        return {"kind": "mcp", "server": self.server}


_loop = LoopThread("mcp")  # its own: a slow server never delays wake-ups


class Connection:
    """One open client session to one server, owned by a task on the MCP loop.

    The SDK's client must be entered and left in the same task, so that task
    holds it open until `close()` or until the server goes away.
    """

    def __init__(self, server: McpServer, cwd: Path, resolved: Resolved):
        self.server = server
        self.cwd = cwd
        self.resolved = resolved
        self.fingerprint = resolved.fingerprint()
        self.client: Any = None
        self.tools: list[Any] = []
        self.opened = False  # it started and listed its tools once
        self.error: str = ""
        self.refused = False  # the server answered 401: the token sent was not (or no longer) good
        self.closing = False  # asked to close: never handed out again, though its task may not have ended yet
        self.ready = asyncio.Event()
        self.stop = asyncio.Event()
        self.task: Any = None  # the future of run() on the MCP loop
        self.stderr: StderrTail | None = None  # a stdio server's

    def _target(self) -> Any:
        from mcp.client.streamable_http import streamable_http_client

        s, values = self.server, self.resolved
        if s.command:
            parameters = stdio_parameters(s, self.cwd, values.env, values.args)
            self.stderr = StderrTail(secrets=values.secrets)
            return stdio_transport(parameters, self.stderr)
        import httpx2

        http = httpx2.AsyncClient(headers=values.headers, event_hooks={"response": [self._note_refusal]},
                                  timeout=httpx2.Timeout(s.timeout, connect=s.connect_timeout))
        return streamable_http_client(values.url, http_client=http)

    async def _note_refusal(self, response: Any) -> None:
        if response.status_code == 401:
            self.refused = True

    async def run(self) -> None:
        from mcp import Client

        try:
            async with Client(self._target(), read_timeout_seconds=self.server.timeout) as client:
                self.tools = list((await client.list_tools()).tools)
                self.client = client
                self.opened = True
                self.ready.set()
                await self.stop.wait()
        except BaseException as exc:  # noqa: BLE001 (any failure ends this connection; the next use opens another)
            self.error = masked(_describe(exc), self.resolved.secrets)  # an SDK error may quote the URL
            if self.stderr is not None and not self.opened:  # it never started: its own words say why
                said = await self.stderr.finish(STDERR_WAIT)
                self.error += f" — stderr: {said}" if said else ""
            if not isinstance(exc, (Exception, asyncio.CancelledError)):
                raise
        finally:
            self.client = None
            self.ready.set()

    @property
    def alive(self) -> bool:
        return self.task is not None and not self.task.done()


def _describe(exc: BaseException) -> str:
    """The innermost useful message of an exception (the SDK wraps failures in exception groups)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, FileNotFoundError) and exc.filename:
        return f"{exc.filename} not found"
    return str(exc) or type(exc).__name__


class Hub:
    """The process's connections, by (agent folder, server name)."""

    def __init__(self) -> None:
        self.connections: dict[tuple[str, str], Connection] = {}
        self.last_attempt: dict[tuple[str, str], float] = {}
        self.known_tools: dict[tuple[str, str], list[Any]] = {}
        self.errors: dict[tuple[str, str], str] = {}  # why a server could not be reached, until it is
        self.lock = threading.Lock()
        self.pid = os.getpid()

    def _run(self, coro, timeout: float) -> Any:
        future = submit(_loop.get(), coro)  # the MCP SDK's spans nest under the tool call's
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise

    def connect(self, server: McpServer, cwd: Path) -> Connection:
        """An open connection to `server`, opening it if needed; raises McpUnavailable, whose message
        is kept as the server's `error` (shown by /info) until it is reached."""
        key = (str(cwd), server.name)
        try:
            conn = self._connect(server, cwd)
        except McpUnavailable as exc:
            self.errors[key] = str(exc)
            raise
        self.errors.pop(key, None)
        return conn

    def error(self, server_name: str, cwd: Path) -> str:
        return self.errors.get((str(cwd), server_name), "")

    def _connect(self, server: McpServer, cwd: Path, *, retried: bool = False) -> Connection:
        """An open connection to `server`, opening it if needed; raises McpUnavailable.

        The credentials are read on every use: a connection opened with values
        that changed since (a secret set, a token refreshed) is closed and opened anew.
        An OAuth server that refuses a token we believed good (revoked) gets one
        refresh and one more try; then its tokens are forgotten (agents.mcpauth.rejected).
        """
        key = (str(cwd), server.name)
        resolved = resolve(server)
        with self.lock:
            conn = self.connections.get(key)
            if conn is not None and conn.fingerprint != resolved.fingerprint():
                self.close(key)
                conn = None
            if conn is None or conn.closing or (not conn.alive and conn.ready.is_set()):
                since = time.monotonic() - self.last_attempt.get(key, -RETRY_SECONDS)
                if conn is not None and not conn.opened and since < RETRY_SECONDS:  # it failed to start just now
                    raise McpUnavailable(f"MCP server {server.name!r} is unavailable: {conn.error or 'it stopped'}")
                self.last_attempt[key] = time.monotonic()
                conn = Connection(server, cwd, resolved)
                self.connections[key] = conn
                conn.task = asyncio.run_coroutine_threadsafe(conn.run(), _loop.get())
        try:
            self._run(asyncio.wait_for(conn.ready.wait(), server.connect_timeout), server.connect_timeout + 1)
        except (asyncio.TimeoutError, FutureTimeout):
            self.close(key)
            said = conn.stderr.text() if conn.stderr is not None else ""
            raise McpUnavailable(f"MCP server {server.name!r} did not start within {server.connect_timeout:g} s"
                                 + (f" — stderr: {said}" if said else "")) from None
        if conn.client is None:
            if server.oauth and conn.refused and not retried:
                self._refused(server, conn)
                return self._connect(server, cwd, retried=True)
            raise McpUnavailable(f"MCP server {server.name!r} could not be started: {conn.error or 'it stopped'}")
        self.known_tools[key] = conn.tools
        return conn

    def _refused(self, server: McpServer, conn: Connection) -> None:
        try:
            rejected(server, conn.resolved.headers["Authorization"].removeprefix("Bearer "))
        except NotAuthorized as exc:
            raise McpUnavailable(str(exc)) from None

    def close(self, key: tuple[str, str]) -> None:
        conn = self.connections.get(key)
        if conn is not None:
            # Marked here, in the caller's thread: the next use opens a new connection even when the loop
            # has not run the stop yet (a busy machine), never the one that just broke.
            conn.closing = True
            _loop.get().call_soon_threadsafe(conn.stop.set)

    def close_all(self) -> None:
        for key in list(self.connections):
            self.close(key)

    def tools(self, server: McpServer, cwd: Path) -> list[Any]:
        """The server's tools, as last listed (connecting if this process never has)."""
        key = (str(cwd), server.name)
        if server.oauth:
            resolve(server)  # listed before or not, a server no longer authorized offers nothing
        if key in self.known_tools:
            return self.known_tools[key]
        return self.connect(server, cwd).tools

    def call(self, server: McpServer, cwd: Path, tool: str, arguments: dict[str, Any], *,
             retried: bool = False) -> Any:
        """Run one tool; its result as JSON-able data. Raises McpUnavailable or McpToolError."""
        conn = self.connect(server, cwd)
        try:
            result = self._run(asyncio.wait_for(conn.client.call_tool(tool, arguments), server.timeout),
                               server.timeout + 1)
        except (asyncio.TimeoutError, FutureTimeout):
            self.close((str(cwd), server.name))  # a server that stopped answering is not trusted with the next call
            raise McpUnavailable(f"MCP server {server.name!r} did not answer {tool!r} within {server.timeout:g} s") from None
        except Exception as exc:  # the connection broke: the server exited, the HTTP endpoint went away
            self.close((str(cwd), server.name))  # the next use opens a new one
            if server.oauth and conn.refused and not retried:  # refused, so not run: safe to try once more
                self._refused(server, conn)
                return self.call(server, cwd, tool, arguments, retried=True)
            raise McpUnavailable(f"MCP server {server.name!r} failed during {tool!r}: "
                                 f"{masked(_describe(exc), conn.resolved.secrets)}") from None
        return _result(result)


def _result(result: Any) -> Any:
    texts = [block.text for block in result.content if getattr(block, "type", "") == "text"]
    if result.is_error:
        raise McpToolError("\n".join(texts) or "the tool reported an error")
    if result.structured_content is not None:
        return result.structured_content
    others = [{"type": block.type, **({"mimeType": block.mime_type} if getattr(block, "mime_type", None) else {})}
              for block in result.content if getattr(block, "type", "") != "text"]
    if not others and len(texts) == 1:
        return texts[0]
    return {"content": [{"type": "text", "text": t} for t in texts] + others}


_hub: Hub | None = None
_hub_lock = threading.Lock()


def hub() -> Hub:
    global _hub
    with _hub_lock:
        if _hub is None or _hub.pid != os.getpid():  # a forked process opens its own connections
            _hub = Hub()
        return _hub


def mcp_tools(servers: list[McpServer], cwd: Path, domains: tuple[str, ...] = ()) -> dict[str, Tool]:
    """The tools of the agent's MCP servers, by the name the model sees.

    A server this process cannot reach now and never listed contributes
    nothing (logged); one listed before keeps its tools, and their calls say
    why they fail. With allowed `domains` (the release's), a server over
    HTTP on another host is never connected to and contributes nothing. A
    server declared `advertise=False` contributes nothing either: only the
    agent's own tools reach it (sessions.host.mcp).
    """
    tools: dict[str, Tool] = {}
    for server in servers:
        if not server.advertise:
            continue
        refused = refused_by_domains(server, domains)
        if refused:
            log.warning("%s; its tools are not offered", refused)
            continue
        try:
            listed = hub().tools(server, cwd)
        except McpUnavailable as exc:
            log.warning("%s; its tools are not offered", exc)
            continue
        for remote in listed:
            name = f"{server.name}{SEPARATOR}{remote.name}"
            if len(name) > MAX_NAME:
                log.warning("MCP tool %s is not offered: its name is longer than %d characters", name, MAX_NAME)
                continue
            tools[name] = _tool(server, cwd, remote)
    return tools


def find_mcp_tool(servers: list[McpServer], cwd: Path, name: str, domains: tuple[str, ...] = ()) -> Tool | None:
    """The MCP tool `<server>__<tool>`, for a direct call: only that server is reached."""
    server_name, separator, _ = name.partition(SEPARATOR)
    server = next((s for s in servers if s.name == server_name), None) if separator else None
    return mcp_tools([server], cwd, domains).get(name) if server else None


def _tool(server: McpServer, cwd: Path, remote: Any) -> McpTool:
    def run(validated: McpArguments, ctx) -> Any:
        return hub().call(server, cwd, remote.name, validated.model_dump())

    annotations = getattr(remote, "annotations", None)
    read_only = bool(annotations and annotations.read_only_hint)
    return McpTool(
        description=remote.description or remote.title or remote.name,
        input_model=McpArguments,
        function=run,
        effect="read" if read_only else "write",
        needs_approval=server.tool_needs_approval(remote.name),
        schema=dict(remote.input_schema or {"type": "object"}),
        server=server.name,
        remote_name=remote.name,
    )


def agent_mcp_tools(loaded: LoadedAgent) -> dict[str, Tool]:
    """The `mcp` family of a turn's tools (sessions.turn.toolset): none for an agent without servers."""
    return mcp_tools(loaded.mcp, loaded.root, loaded.allowed_domains) if loaded.mcp else {}


def register() -> None:
    extensions.add_tool_family("mcp", agent_mcp_tools)
