"""The folder one run of the official runtime reads its configuration from, and what it is given.

Each run gets a new folder under the state root, removed when the run ends:
the runtime's configuration directory and home (so nothing of the server
user's own home is read), and a launcher. The runtime is told to read no
settings file at all, so nothing a workspace holds (a CLAUDE.md, a
`.claude/` folder, a `.mcp.json`) configures it.

The launcher starts the SDK's bundled runtime with an environment of named
variables only: the SDK passes its child the server's whole environment
(database URLs, keys of other providers), and the launcher drops all but
what the runtime needs.
"""
from __future__ import annotations

import os
import shutil
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from agents.secrets.lookup import credential

# What the runtime's process keeps of its environment (the SDK's own variables are named by prefix).
KEPT = ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "CLAUDE_CONFIG_DIR", "HOME", "PATH", "LANG", "TZ",
        "CLAUDE_CODE_ENTRYPOINT", "CLAUDE_AGENT_SDK_VERSION", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "DISABLE_AUTOUPDATER", "DISABLE_TELEMETRY", "DISABLE_ERROR_REPORTING", "CLAUDE_CODE_SDK_READS_SESSION_STATE",
        "PWD")

# Variables that are set pass on; all others are dropped (`env -i`).
LAUNCHER = """#!/bin/bash
kept=()
for name in {names}; do
  [[ -v $name ]] && kept+=("$name=${{!name}}")
done
exec /usr/bin/env -i "${{kept[@]}}" '{runtime}' "$@"
"""


@dataclass
class RunHome:
    root: Path
    config: Path
    launcher: Path
    scratch: Path  # the working directory of a session without a local workspace

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


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
    launcher = root / "claude"
    launcher.write_text(LAUNCHER.format(names=" ".join(KEPT), runtime=bundled_runtime()))
    launcher.chmod(stat.S_IRWXU)
    return RunHome(root, config, launcher, scratch)


def environment(home: RunHome, params: dict[str, Any], key_env: str, base_url_env: str) -> dict[str, str]:
    """What the runtime's process is given: the model's key and address, and its own folders."""
    env = {
        "CLAUDE_CONFIG_DIR": str(home.config),
        "HOME": str(home.config),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        # No title requests, update checks, telemetry or error reports: only the turn's model calls leave.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }
    key = credential(params.get("api_key_env", key_env))
    if key:
        env["ANTHROPIC_API_KEY"] = key
    base_url = params.get("base_url") or credential(base_url_env)
    if base_url:
        env["ANTHROPIC_BASE_URL"] = base_url
    return env
