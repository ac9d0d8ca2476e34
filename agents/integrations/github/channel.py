"""`github_channel(...)`: a GitHub webhook channel, on the code-host channel of
`agents.integrations.repo_channels` (see there what a delivery goes through)."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from agents.channels import Channel
from agents.integrations.github.client import GitHubConfig
from agents.integrations.repo_channels import Declared, Hook, build_channel, config_from


def github_channel(*, config: GitHubConfig | None = None, on_pull_request: Hook | None = None,
                   on_comment: Hook | None = None, on_issue: Hook | None = None,
                   on_check_suite: Hook | None = None, on_check_run: Hook | None = None,
                   on_workflow_run: Hook | None = None, on_status: Hook | None = None,
                   on_push: Hook | None = None, on_event: Hook | None = None, skip_bots: bool = True,
                   ignore_senders: tuple[str, ...] | list[str] = (), commit_status: bool | str = False,
                   auth: Any = None, events: Mapping[str, Any] | None = None,
                   state: Mapping[str, Any] | None = None, on_start: Callable[[Any], Any] | None = None,
                   on_stop: Callable[[], Any] | None = None, description: str = "",
                   **config_fields: Any) -> Channel:
    """A GitHub (GitHub.com or Enterprise Server) webhook channel.

    `config` (or its fields as keywords: `api_url="https://ghe.example.com/api/v3"`,
    `token_env=...`) names the variables holding the secrets. `skip_bots`: ignore bot
    senders on pull requests, comments, issues and pushes; `ignore_senders`:
    logins to ignore (the account the agent comments as). `commit_status=True` (or a
    context name, `{slug}` standing for the agent's) sets a commit status on the head
    commit: pending while a turn runs, then success or failure.
    """
    hooks = dict(on_pull_request=on_pull_request, on_comment=on_comment, on_issue=on_issue,
                 on_check_suite=on_check_suite, on_check_run=on_check_run, on_workflow_run=on_workflow_run,
                 on_status=on_status, on_push=on_push, on_event=on_event)
    config = config_from(GitHubConfig, "github_channel", config, config_fields, hooks)
    return build_channel("github", config, Declared(hooks, skip_bots, tuple(ignore_senders), commit_status, auth,
                                                    events, state, on_start, on_stop, description))
