"""The MCP project's reference servers as a user installs them: from PyPI into a virtual environment.

One environment per version set, built once for every run and worker under
~/.cache/agentsite-tests (outside the repository, so a clean clone builds it
once), under a file lock so parallel workers do not race; it holds the
servers `mcp-server-time`, `mcp-server-git` and `mcp-server-fetch`. Tests that
use it, or `uvx`/`npx`, need PyPI and the npm registry: they are marked
`network`.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

PYPI = ("mcp-server-time==2026.10.19", "mcp-server-git==2026.10.19", "mcp-server-fetch==2026.10.24")
UVX_TIME = "mcp-server-time==2026.10.19"
NPM_FILESYSTEM = "@modelcontextprotocol/server-filesystem@2026.8.31"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentsite-tests"


def reference_servers() -> Path:
    """The prefix of a virtual environment holding the reference servers (its bin/ has their scripts)."""
    key = hashlib.sha256(json.dumps([sys.version, PYPI]).encode()).hexdigest()[:12]
    venv = CACHE / f"mcp-venv-{key}"
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"mcp-venv-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / "complete").exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *PYPI], check=True,
                           timeout=600)
            (venv / "complete").write_text("")
    return venv
