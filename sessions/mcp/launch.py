"""How a stdio MCP server is started: its command in the sandbox, and the first lines of its stderr.

In the sandbox a server sees the agent folder and the server's Python, and
besides them only what its declaration needs: the installation of a program
given by its absolute path (agents.workspaces.installs), the declared
`paths`, and for `uvx` and `npx` the network and a package cache of the
agent's own (`<state root>/mcp-cache/agent-<slug>/uv|npm`, shared by its
releases, writable by its servers alone). Its stderr goes to the server log as before, and its
first lines are kept (StderrTail): a server that cannot start says why.
"""
from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, AsyncIterator

from django.conf import settings

from agents.mcp import McpServer, path_problems
from agents.redaction import scrub
from agents.workspaces import sandbox
from agents.workspaces.installs import Installation, InstallError, installation

if TYPE_CHECKING:  # the SDK is imported when a server starts (tests/agentsite/test_startup_imports.py)
    from mcp.client.stdio import StdioServerParameters

SYSTEM_CERTIFICATES = "/etc/ssl/certs/ca-certificates.crt"  # Debian's bundle (the sandbox shows /etc/ssl)
KEPT_LINES = 12      # of a server's stderr, for its error
KEPT_CHARACTERS = 1500


class LaunchError(Exception):
    """The server's command cannot be built: its message says why and what to do."""


def stdio_parameters(server: McpServer, cwd: Path, env: dict[str, str], args: tuple[str, ...]) -> StdioServerParameters:
    """The process `server` runs as: sandboxed unless declared `sandbox: false`. Raises LaunchError."""
    from mcp.client.stdio import StdioServerParameters

    command = sys.executable if server.command in ("python", "python3") else server.command
    if not server.sandbox:
        return StdioServerParameters(command=command, args=list(args), env=dict(env), cwd=str(cwd))
    state = sandbox.status()
    if not state.active:
        if state.mode == "on":
            raise LaunchError(f"{state.reason}: the server is not started (declare \"sandbox\": false to run it "
                              "unsandboxed, as the server's user)")
        return StdioServerParameters(command=command, args=list(args), env=dict(env), cwd=str(cwd))
    found, inside_env, writable = Installation(), {}, ()
    try:
        if server.runner:
            command, inside_env, writable = _runner(server, cwd, found)
        elif command != sys.executable:  # the server's own Python: python_paths() shows it
            found = installation(command)
        for raw in server.paths:  # checked at deploy; checked again, the host may have changed since
            if problems := path_problems([raw]):
                raise LaunchError(problems[0])
            found.add(Path(raw))
    except InstallError as exc:
        raise LaunchError(str(exc)) from None
    # A server with a package cache writes it as the cache's uid, shared by the agent's releases.
    user = sandbox.runs_as(Path(writable[0]).parent if writable else cwd)
    mounts = sandbox.Mounts(readable=(*sandbox.python_paths(), str(cwd), *found.readable), aliases=tuple(found.aliases),
                            writable=writable, network=server.uses_network, user=user)
    argv = sandbox.command([command, *args], cwd=str(cwd), mounts=mounts)
    env = {**sandbox.base_environment(), "HOME": "/tmp", "TMPDIR": "/tmp", **inside_env, **env}
    return StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=str(cwd))


def _runner(server: McpServer, cwd: Path, found: Installation) -> tuple[str, dict[str, str], tuple[str, ...]]:
    """`uvx` or `npx` (by name, or the absolute path of one): the program, its environment and its cache."""
    name, declared = server.runner, Path(server.command)
    cache = package_cache(cwd, "uv" if name == "uvx" else "npm")
    if name == "npx":
        program = str(declared) if declared.is_absolute() else shutil.which("npx", path=sandbox.base_environment()["PATH"])
        if program is None:
            raise LaunchError("npx is not installed on this host: install Node.js (Debian's nodejs and npm)")
        installation(program, found)
        # The host's trust store, as uv's below: a registry reached through the operator's TLS proxy is trusted.
        trust = {"NODE_EXTRA_CA_CERTS": SYSTEM_CERTIFICATES} if os.path.isfile(SYSTEM_CERTIFICATES) else {}
        return program, {"npm_config_cache": str(cache), "npm_config_update_notifier": "false",
                         "npm_config_fund": "false", "npm_config_audit": "false", **trust}, (str(cache),)
    uvx = declared if declared.is_absolute() else _beside_python("uvx")
    uv = uvx.resolve().parent / "uv" if uvx is not None else None  # what uvx runs: uv beside its real path
    if uvx is None or uv is None or not uv.is_file():
        raise LaunchError("uv is not installed on this host: pip install uv (into the server's environment) or "
                          "put uv and uvx on the PATH")
    for program in (uvx, uv):  # single binaries: the files alone
        found.add(program)
    # uv runs the server's own interpreter (python_paths shows it) and never downloads one.
    return str(uvx), {"UV_CACHE_DIR": str(cache), "UV_PYTHON": sys.executable, "UV_PYTHON_DOWNLOADS": "never",
                      "UV_NO_CONFIG": "1", "UV_SYSTEM_CERTS": "1"}, (str(cache),)


def _beside_python(name: str) -> Path | None:
    """`name` beside the server's interpreter (uv installed into its environment), else on the PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if os.access(beside, os.X_OK) else shutil.which(name)
    return Path(found) if found else None


def package_cache(cwd: Path, kind: str) -> Path:
    """The package cache of one agent's servers: every release of the agent shares it (a save under
    `serve --dev` does not download the packages again), another agent's servers never see it. A
    folder that is no release (`validate --check-mcp DIR`) has one of its own.

    When the server runs as root the sandbox writes as the cache's own uid (sandbox.runs_as), so the
    cache is that uid's; the folders above it stay root's and are never shown inside.
    """
    releases = (Path(settings.STATE_ROOT) / "deployments").resolve()
    place = cwd.resolve()
    if place.parent.parent == releases:  # <state root>/deployments/<slug>/<content>: a release of <slug>
        owner = f"agent-{place.parent.name}"
    else:
        owner = f"folder-{hashlib.sha256(str(place).encode()).hexdigest()[:16]}"
    cache = Path(settings.STATE_ROOT) / "mcp-cache" / owner / kind
    cache.mkdir(parents=True, exist_ok=True, mode=0o700)
    if os.geteuid() == 0:
        uid, gid = sandbox.runs_as(cache.parent)
        if cache.stat().st_uid != uid:
            os.chown(cache, uid, gid)
    return cache


class StderrTail:
    """A server's stderr: passed on to the server log, its first lines kept for the server's error."""

    def __init__(self, secrets: tuple[str, ...] = ()):
        self.kept = bytearray()
        self.secrets = secrets
        self.ended = asyncio.Event()
        self.reader: Any = None
        self.writer: Any = None

    async def open(self) -> Any:
        """The file the server's stderr is written to; what is written is read on the running loop."""
        read_fd, write_fd = os.pipe()
        tail = self

        class Reader(asyncio.Protocol):
            def data_received(self, data: bytes) -> None:
                _pass_on(data)
                if len(tail.kept) < KEPT_CHARACTERS * 4:
                    tail.kept.extend(data)

            def connection_lost(self, exc: Exception | None) -> None:
                tail.ended.set()

        self.reader, _ = await asyncio.get_running_loop().connect_read_pipe(Reader, os.fdopen(read_fd, "rb"))
        self.writer = os.fdopen(write_fd, "w")
        return self.writer

    def close_writer(self) -> None:
        """Our copy of the write end: closed once the server holds its own, so the reader sees the end."""
        if self.writer is not None and not self.writer.closed:
            self.writer.close()

    async def finish(self, wait: float) -> str:
        """The kept lines, once the server's stderr ends (or `wait` seconds pass); secrets masked."""
        self.close_writer()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.ended.wait(), wait)
        if self.reader is not None:
            self.reader.close()
        return self.text()

    def text(self) -> str:
        lines = masked(self.kept.decode(errors="replace"), self.secrets).strip().splitlines()[:KEPT_LINES]
        return "\n".join(lines)[:KEPT_CHARACTERS]  # cut once masked: no secret shows its first characters


def masked(text: str, secrets: tuple[str, ...]) -> str:
    """`text` with the values of a server's ${VAR}s and any URL's credentials replaced."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 6:
            text = text.replace(secret, "***")
    return scrub(text)


def _pass_on(data: bytes) -> None:
    """To the server's own stderr, where a server's output went before it was kept."""
    with contextlib.suppress(OSError, ValueError):
        buffer = getattr(sys.stderr, "buffer", None)
        if buffer is not None:
            buffer.write(data)
        else:
            sys.stderr.write(data.decode(errors="replace"))
        sys.stderr.flush()


@contextlib.asynccontextmanager
async def stdio_transport(parameters: StdioServerParameters, tail: StderrTail) -> AsyncIterator[Any]:
    """The SDK's stdio client with the server's stderr going to `tail`."""
    from mcp.client.stdio import stdio_client

    errlog = await tail.open()
    try:
        async with stdio_client(parameters, errlog=errlog) as streams:
            tail.close_writer()
            yield streams
    finally:
        tail.close_writer()
