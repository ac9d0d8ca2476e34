"""`bitbucket_channel(...)`: a Bitbucket webhook channel, on the code-host channel of
`agents.integrations.repo_channels` (see there what a delivery goes through)."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from agents.channels import Channel
from agents.integrations.bitbucket.client import BitbucketConfig
from agents.integrations.repo_channels import Declared, Hook, build_channel, config_from


def bitbucket_channel(*, config: BitbucketConfig | None = None, on_pull_request: Hook | None = None,
                      on_comment: Hook | None = None, on_push: Hook | None = None, on_event: Hook | None = None,
                      skip_bots: bool = True, ignore_senders: tuple[str, ...] | list[str] = (),
                      auth: Any = None, events: Mapping[str, Any] | None = None,
                      state: Mapping[str, Any] | None = None, on_start: Callable[[Any], Any] | None = None,
                      on_stop: Callable[[], Any] | None = None, description: str = "",
                      **config_fields: Any) -> Channel:
    """A Bitbucket Cloud or Data Center (`edition="datacenter"`, `api_url=...`) repository hook channel.

    Pull requests reach `on_pull_request`, their comments `on_comment`, pushes
    `on_push`; the rest `on_event`. Replies are pull request comments.
    """
    hooks = dict(on_pull_request=on_pull_request, on_comment=on_comment, on_push=on_push, on_event=on_event)
    config = config_from(BitbucketConfig, "bitbucket_channel", config, config_fields, hooks)
    return build_channel("bitbucket", config, Declared(hooks, skip_bots, tuple(ignore_senders), False, auth,
                                                       events, state, on_start, on_stop, description))
