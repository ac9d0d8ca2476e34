"""Discovery of agent folders: loading and validating one (`folder`, `checks`, what it gives in
`loaded`) and deploying it as a release (`releases`).

The names below are the package's interface; the modules inside import each other directly.
"""
from __future__ import annotations

from agents.discovery.bundles import ReleaseTooLarge, ReleaseUnavailable, release_folder
from agents.discovery.folder import agent_dir, content_hash, default_model, load_agent_folder
from agents.discovery.loaded import AgentFolderError, LoadedAgent, LoadedSubagent, Problem, tool_file
from agents.discovery.releases import (
    Deployed,
    KindConflict,
    Source,
    deploy_agent_folder,
    deploy_release,
    find_agent_folders,
    load_deployment,
    release,
    scratch_release,
)

__all__ = [
    "AgentFolderError", "LoadedAgent", "ReleaseTooLarge", "ReleaseUnavailable", "release_folder", "LoadedSubagent", "Problem", "tool_file", "agent_dir", "content_hash", "default_model",
    "Deployed", "KindConflict", "Source", "deploy_agent_folder", "deploy_release", "find_agent_folders", "load_agent_folder", "load_deployment", "release",
    "scratch_release",
]
