"""The SDK that agent folders import: `Agent`, `tool`, `Skill`, `Schedule`, `hook`,
the runtimes and filesystems of workspaces (`local_runtime`, `virtual_runtime`,
`memory_fs`, `union_fs`, `skills_fs`), channels and the provider channels.

Only agent folders import it: each name has its home (`agents.definitions`,
`agents.channels`, `agents.workspaces`, `agents.integrations`, ...), which code
inside the apps imports instead, so nothing imports this module back.

    # agent/agent.py
    from agents.sdk import Agent
    agent = Agent(model="scripted:echo", description="Answers questions about orders.")

    # agent/tools/lookup_order.py
    from pydantic import BaseModel
    from agents.sdk import tool

    class Input(BaseModel):
        order_id: str

    @tool(description="Look up an order by id.", effect="read")
    def lookup_order(input: Input, ctx) -> dict:
        return {"id": input.order_id, "status": "shipped"}
"""
from __future__ import annotations

from agents.channels import (
    DELETE, GET, PATCH, POST, PUT, AuthPolicy, Channel, Route, allow_all, bearer_auth, local_dev, local_dev_strict,
    loopback_only, public_endpoint,
)
from agents.definitions import Agent, Effect, Execution, Schedule, SessionInfo, Skill, Tool, ToolContext, tool
from agents.evals.cases import case, define_eval
from agents.evals.gates import GateFailed, Matcher, includes, satisfies
from agents.evals.trial import Trial
from agents.experiments import Sample, SampleEvent, SplitContext, define_ab, split_by_session_hash, split_if
from agents.hooks import Hook, hook
from agents.integrations.bitbucket.channel import bitbucket_channel
from agents.integrations.bitbucket.client import BitbucketConfig
from agents.integrations.events import RepoEvent
from agents.integrations.github.channel import github_channel
from agents.integrations.github.client import GitHubConfig
from agents.integrations.gitlab.channel import gitlab_channel
from agents.integrations.gitlab.client import GitLabConfig
from agents.integrations.outbound import OutboundError, OutboundHTTPError, OutboundRefused, OutboundTimeout
from agents.integrations.repo_channels import default_auth
from agents.integrations.slack.channel import slack_channel
from agents.integrations.webhook import webhook_channel
from agents.mcp import (
    McpApprovalRequired, McpError, McpNotFound, McpServer, McpToolError, McpUnavailable, mcp_http, mcp_stdio,
)
from agents.workspaces.filesystems import WorkspaceError
from agents.workspaces.host_files import host_files_fs
from agents.workspaces.memoryfs import memory_fs, skills_fs
from agents.workspaces.runtimes import SessionContext, local_runtime, virtual_runtime
from agents.workspaces.unionfs import union_fs

__all__ = [
    "Agent", "tool", "Tool", "Skill", "Schedule", "hook", "Hook", "ToolContext", "SessionInfo", "SessionContext",
    "local_runtime", "virtual_runtime", "memory_fs", "union_fs", "skills_fs", "WorkspaceError",
    "McpServer", "mcp_stdio", "mcp_http", "host_files_fs",
    "McpError", "McpUnavailable", "McpToolError", "McpNotFound", "McpApprovalRequired",
    "Channel", "Route", "GET", "POST", "PUT", "PATCH", "DELETE", "AuthPolicy",
    "local_dev_strict", "local_dev", "loopback_only", "bearer_auth", "allow_all", "public_endpoint",
    "slack_channel", "webhook_channel", "github_channel", "gitlab_channel", "bitbucket_channel", "default_auth", "RepoEvent",
    "GitHubConfig", "GitLabConfig", "BitbucketConfig",
    "OutboundError", "OutboundHTTPError", "OutboundRefused", "OutboundTimeout",
    "define_eval", "case", "includes", "satisfies", "Matcher", "GateFailed", "Trial",
    "define_ab", "split_by_session_hash", "split_if", "Sample", "SampleEvent", "SplitContext",
]
