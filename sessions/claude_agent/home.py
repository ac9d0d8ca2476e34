"""The folder one run of the official runtime reads its configuration from, and what it is given.

Each child of the runtime gets a new folder under the state root, removed when
the child closes (a kept child keeps it between its session's turns; what a
killed worker left is removed by the next worker that starts a child):
the runtime's configuration directory and home (so nothing of the server
user's own home is read), the release's skills in it, and a launcher. The
runtime reads settings of the user tier only, which is that folder, so
nothing a workspace holds (a CLAUDE.md, a `.claude/` folder, a `.mcp.json`)
configures it.

The launcher starts the SDK's bundled runtime with an environment of named
variables only: the SDK passes its child the server's whole environment
(database URLs, keys of other providers), and the launcher drops all but
what the runtime needs.
"""
from __future__ import annotations

import os
import shlex
import shutil
import stat
import tempfile
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import Any

import frontmatter
from django.conf import settings

from agents.providers.base import max_retries
from agents.secrets.lookup import credential
from agents.workspaces import sandbox
from agents.workspaces.runtimes import LocalRuntime
from sessions.claude_agent.proxy import PLACEHOLDER_KEY

# What the runtime's process keeps of its environment besides what `environment` gives it: what the SDK
# itself sets when it starts the runtime.
SDK_SETS = ("TZ", "PWD", "CLAUDE_CODE_ENTRYPOINT", "CLAUDE_AGENT_SDK_VERSION", "CLAUDE_CODE_SDK_READS_SESSION_STATE")

# Variables that are set pass on; all others are dropped (`env -i`). `command`: the runtime, in its sandbox.
LAUNCHER = """#!/bin/bash
kept=()
for name in {names}; do
  [[ -v $name ]] && kept+=("$name=${{!name}}")
done
exec /usr/bin/env -i "${{kept[@]}}" {command} "$@"
"""


@dataclass
class RunHome:
    root: Path
    config: Path
    launcher: Path
    scratch: Path  # the working directory of a session without a local workspace
    # Where the runtime reaches its model (sessions.claude_agent.proxy): in a folder of its own under the
    # system's temporary folder, as a unix socket's path must be short (about 100 bytes).
    socket: Path

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(self.socket.parent, ignore_errors=True)


RUNTIME_CPU_SECONDS = 3600
# A run home older than this is no live child's (a kept one is closed within minutes): a killed worker's.
STALE_SECONDS = 6 * 3600
_swept = False


def sweep_once() -> None:
    """Once per process: remove the run homes and sockets folders of children no process holds any more."""
    global _swept
    if _swept:
        return
    _swept = True
    cutoff = time.time() - STALE_SECONDS
    base = Path(settings.STATE_ROOT) / "run-homes"
    stale = [*(base.iterdir() if base.is_dir() else ()), *Path(tempfile.gettempdir()).glob("agentsite-run-*")]
    for folder in stale:
        try:
            if folder.stat().st_mtime < cutoff:
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:  # another process removed it meanwhile
            continue


def bundled_runtime() -> Path:
    import claude_agent_sdk

    return Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"


def build() -> RunHome:
    base = Path(settings.STATE_ROOT) / "run-homes"
    base.mkdir(mode=0o700, exist_ok=True)
    root = base / uuid.uuid4().hex
    root.mkdir(mode=0o700)
    config, scratch = root / "config", root / "work"
    config.mkdir(mode=0o700)
    scratch.mkdir(mode=0o700)
    sockets = Path(tempfile.mkdtemp(prefix="agentsite-run-"))
    return RunHome(root, config, root / "claude", scratch, sockets / "model.sock")


def write_skills(home: RunHome, loaded: Any) -> None:
    """The release's skills where the runtime reads its user-tier skills: `<config>/skills/<name>/`."""
    for skill in loaded.skills.values():
        folder = home.config / "skills" / skill.name
        folder.mkdir(parents=True)
        (folder / "SKILL.md").write_text(frontmatter.dumps(frontmatter.Post(
            skill.markdown, name=skill.name, description=skill.description)) + "\n")
        for relative, content in skill.files.items():
            path = PurePosixPath(relative)
            if path.is_absolute() or ".." in path.parts or path.name == "SKILL.md":
                continue  # a skill's files stay in its folder
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            (folder / path).write_text(content)


def agent_definitions(loaded: Any) -> dict[str, Any]:
    """The release's subagents as the runtime's own (run in the foreground: CLAUDE_CODE_DISABLE_BACKGROUND_TASKS)."""
    from claude_agent_sdk import AgentDefinition

    return {sub.id: AgentDefinition(description=sub.description, prompt=sub.instructions,
                                    model=sub.model.partition(":")[2])
            for sub in loaded.subagents.values()}


def sandbox_mounts(runtime: Any) -> sandbox.Mounts | None:
    """The sandbox the runtime runs in, from the agent's runtime declaration (its network and limits);
    None: unsandboxed (AGENTSITE_SANDBOX=off, or a host that cannot build one: then no tool of the
    runtime's own is offered)."""
    if not sandbox.status().active:
        return None
    if isinstance(runtime, LocalRuntime):
        limits = runtime.limits()
        # The CPU limit is each process's: the runtime's own, over a kept child's turns, may reach more than
        # a command's (which its Bash tool bounds by the clock, as `shell` does).
        return sandbox.Mounts(network=runtime.network,
                              limits=replace(limits, cpu_seconds=max(limits.cpu_seconds, RUNTIME_CPU_SECONDS)))
    return sandbox.Mounts(limits=sandbox.Limits(cpu_seconds=RUNTIME_CPU_SECONDS))


def write_launcher(home: RunHome, cwd: str, mounts: sandbox.Mounts | None, given: dict[str, str]) -> None:
    """The command the SDK starts: the runtime in the sandbox `mounts` describes (None: unsandboxed), with
    the environment `given` (`environment`'s) and the SDK's own variables, and nothing else.

    In the sandbox the runtime sees the system, its own program, its run home
    and the working directory `cwd` (the session's workspace), and nothing
    else: no state root, no other workspace, no network unless the agent
    declared one (its model is reached through the run's socket). When
    the server is root it runs as the workspace's own uid, which is given
    the run home and the workspace first.
    """
    runtime = bundled_runtime()
    argv = [str(runtime)]
    if mounts is not None:
        mounts = replace(mounts, writable=(cwd, str(home.root), str(home.socket.parent)),
                         readable=(str(runtime.parent),), user=sandbox.runs_as(cwd))
        if os.geteuid() == 0:
            sandbox.hand_over(Path(cwd))
            for top in (home.root, home.socket.parent):
                for folder, _, files in os.walk(top):
                    for path in (folder, *(os.path.join(folder, name) for name in files)):
                        os.lchown(path, *mounts.user)
        argv = sandbox.command(argv, cwd=cwd, mounts=mounts)  # bubblewrap dies with its parent, and the rest with it
    elif shutil.which("setpriv"):
        argv = ["setpriv", "--pdeathsig", "KILL", "--", *argv]  # unsandboxed: it dies with the worker all the same
    names = " ".join((*SDK_SETS, *given))
    home.launcher.write_text(LAUNCHER.format(names=names, command=" ".join(shlex.quote(a) for a in argv)))
    home.launcher.chmod(stat.S_IRWXU)


def environment(home: RunHome, runtime: Any, params: dict[str, Any]) -> dict[str, str]:
    """What the runtime's process is given: its folders, the socket it reaches its model through
    (sessions.claude_agent.proxy) with a placeholder for the key it never holds, as many retries of a
    failed model call as the own loop makes (the agent's `params`), and, for its Bash tool, the time
    and output limits the agent's runtime gives `shell`."""
    limits = {}
    if isinstance(runtime, LocalRuntime):
        timeout_ms = str(int(runtime.shell_timeout * 1000))
        limits = {"BASH_DEFAULT_TIMEOUT_MS": timeout_ms, "BASH_MAX_TIMEOUT_MS": timeout_ms,
                  "BASH_MAX_OUTPUT_LENGTH": str(runtime.output_limit)}
    return {
        **limits,
        "CLAUDE_CONFIG_DIR": str(home.config),
        "HOME": str(home.config),
        "PATH": sandbox.base_environment()["PATH"],  # the system's programs, as a sandboxed command's
        "LANG": "C.UTF-8",
        "ANTHROPIC_UNIX_SOCKET": str(home.socket),
        "ANTHROPIC_BASE_URL": "http://localhost",
        "ANTHROPIC_API_KEY": PLACEHOLDER_KEY,
        "CLAUDE_CODE_MAX_RETRIES": str(max_retries(params)),
        # No title requests, update checks, telemetry or error reports: only the turn's model calls leave.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        # A subagent (the Agent tool) runs to its end within the call, as `delegate` does on the own loop.
        "CLAUDE_CODE_DISABLE_BACKGROUND_TASKS": "1",
    }


def model_server(params: dict[str, Any], key_env: str, base_url_env: str) -> tuple[str | None, str | None]:
    """Where the proxy forwards the runtime's calls, and the key it adds: as for `anthropic:` models."""
    return params.get("base_url") or credential(base_url_env), credential(params.get("api_key_env", key_env))
