"""Model ids whose turns run on another agent runtime than the own loop, and whether it is installed.

Light on purpose: deploy validation and the engine ask this of every model
id, and the runtimes' SDKs are large (looked for on the path, never imported here).
"""
from __future__ import annotations

import importlib.util
from functools import lru_cache

# By provider name: the module of the runtime's SDK, and how to install it.
RUNTIMES = {"claude-agent": ("claude_agent_sdk", "pip install -r requirements-claude-agent.txt")}


OWN = "agentsite"
# How pages name each runtime.
LABELS = {OWN: "agentsite's loop", "claude-agent": "Claude Agent SDK"}


def runtime_of(model_id: str) -> str:
    """The agent runtime a session on `model_id` runs on: "" for the own loop."""
    provider = (model_id or "").partition(":")[0]
    return provider if provider in RUNTIMES else ""


def runtime_name(model_id: str) -> str:
    """The runtime of `model_id` as the model directory and pages name it: "agentsite" for the own loop."""
    return runtime_of(model_id) or OWN


@lru_cache(maxsize=None)
def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_runtime(model_id: str) -> str:
    """Why `model_id` cannot run on this server, in one line; "" when it can."""
    runtime = runtime_of(model_id)
    if not runtime or installed(RUNTIMES[runtime][0]):
        return ""
    return (f"model {model_id!r} runs on the Claude Agent SDK, which this server does not have: "
            f"install it with `{RUNTIMES[runtime][1]}`")


def needs_runtime(problem: str) -> bool:
    """Whether a deploy's problem is only that an optional runtime is not installed (missing_runtime's)."""
    return any(install in problem for _, install in RUNTIMES.values())
