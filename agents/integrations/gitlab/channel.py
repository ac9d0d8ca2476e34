"""`gitlab_channel(...)`: a GitLab webhook channel, on the code-host channel of
`agents.integrations.repo_channels` (see there what a delivery goes through)."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from agents.channels import Channel
from agents.integrations.gitlab.client import GitLabConfig
from agents.integrations.repo_channels import Declared, Hook, build_channel, config_from


def gitlab_channel(*, config: GitLabConfig | None = None, on_pull_request: Hook | None = None,
                   on_comment: Hook | None = None, on_issue: Hook | None = None,
                   on_pipeline: Hook | None = None, on_push: Hook | None = None, on_event: Hook | None = None,
                   skip_bots: bool = True, ignore_senders: tuple[str, ...] | list[str] = (),
                   commit_status: bool | str = False, auth: Any = None, events: Mapping[str, Any] | None = None,
                   state: Mapping[str, Any] | None = None, on_start: Callable[[Any], Any] | None = None,
                   on_stop: Callable[[], Any] | None = None, description: str = "",
                   **config_fields: Any) -> Channel:
    """A GitLab (GitLab.com or self-managed: `api_url="https://<host>/api/v4"`) project hook channel.

    Merge requests reach `on_pull_request`, notes `on_comment`, issues `on_issue`,
    pipelines `on_pipeline`, pushes `on_push`; the rest `on_event`. Replies are notes.
    """
    hooks = dict(on_pull_request=on_pull_request, on_comment=on_comment, on_issue=on_issue,
                 on_pipeline=on_pipeline, on_push=on_push, on_event=on_event)
    config = config_from(GitLabConfig, "gitlab_channel", config, config_fields, hooks)
    return build_channel("gitlab", config, Declared(hooks, skip_bots, tuple(ignore_senders), commit_status, auth,
                                                    events, state, on_start, on_stop, description))
