"""How a code-host channel answers: the events map `repo_channels` gives each channel.

A turn's reply is its last `message.completed` (earlier ones narrate steps
that called tools): it is kept in the session's channel state and posted when
`turn.completed` arrives, as a comment on the pull request, merge request or
issue (a commit comment for a commit's conversation). A message a host task
appends (`emit_assistant_message`, source `channel`) is posted at once. With a
status context, `turn.started` sets a pending commit status on the head commit
and the turn's end sets success or failure.

These handlers run in the events-map task, outside the turn; a failing one is
logged by it (a missing credential says which variable to set).
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from django.conf import settings

from agents.integrations.github.client import repo_path
from agents.integrations.gitlab.client import project_path

log = logging.getLogger(__name__)

# Below every provider's limit on a comment (GitHub's is 65,536 characters).
MAX_COMMENT = 60_000
STATUS_STATES = {
    "github": {"turn.started": "pending", "turn.completed": "success", "turn.failed": "failure"},
    "gitlab": {"turn.started": "running", "turn.completed": "success", "turn.failed": "failed"},
}
DESCRIPTIONS = {"turn.started": "The agent is working on it", "turn.completed": "The agent answered",
                "turn.failed": "The agent's turn failed"}

Handler = Callable[[dict[str, Any], Any, Any], None]


def reply_events(provider: str, config: Any, status_context: str = "") -> dict[str, Handler]:
    """The events map of a `provider` channel answering with `config`'s credentials."""

    def completed_message(event: dict[str, Any], channel: Any, ctx: Any) -> None:
        text = (event.get("data") or {}).get("text") or ""
        if (event.get("data") or {}).get("source") == "channel":
            post_reply(provider, config, channel, text)
        else:
            channel.state.update({"pending_reply": text})

    def turn_ended(event: dict[str, Any], channel: Any, ctx: Any) -> None:
        taken: dict[str, Any] = {}

        def take(state: dict[str, Any]) -> dict[str, Any]:
            taken["text"] = state.get("pending_reply")
            return {k: v for k, v in state.items() if k != "pending_reply"}

        channel.state.modify(take)
        try:
            if event["type"] == "turn.completed" and taken["text"]:
                post_reply(provider, config, channel, taken["text"])
        finally:
            if status_context:
                set_status(provider, config, channel, ctx, event, status_context)

    events: dict[str, Handler] = {"message.completed": completed_message, "turn.completed": turn_ended,
                                  "turn.failed": turn_ended}
    if status_context:
        events["turn.started"] = lambda event, channel, ctx: set_status(provider, config, channel, ctx, event,
                                                                        status_context)
    return events


def post_reply(provider: str, config: Any, channel: Any, text: str) -> None:
    """`text` as a comment where the session's conversation lives on the provider."""
    state = channel.state.get()
    repo, number, subject, sha = state.get("repo"), state.get("number"), state.get("subject"), state.get("head_sha")
    body = text if len(text) <= MAX_COMMENT else text[:MAX_COMMENT] + "\n\n(truncated)"
    if not repo or not body.strip():
        return
    if provider == "github":
        client = config.client(installation_id=state.get("installation_id"))
        if subject in ("pull_request", "issue") and number is not None:
            posted = client.create_comment(repo, number, body)
        elif sha:
            posted = client.call("POST", f"/repos/{repo_path(repo)}/commits/{sha}/comments", repo=repo,
                                 json={"body": body})
        else:
            return
    elif provider == "gitlab":
        client = config.client()
        if subject == "pull_request" and number is not None:
            posted = client.create_merge_request_note(repo, number, body)
        elif subject == "issue" and number is not None:
            posted = client.create_issue_note(repo, number, body)
        elif sha:
            posted = client.call("POST", f"/projects/{project_path(repo)}/repository/commits/{sha}/comments",
                                 json={"note": body})
        else:
            return
    elif provider == "bitbucket" and subject == "pull_request" and number is not None:
        posted = config.client().create_pull_request_comment(repo, number, body)
    else:
        log.info("a %s reply about %s has nowhere to go (no pull request)", provider, repo)
        return
    if isinstance(posted, dict) and posted.get("id") is not None:
        channel.state.update({"last_comment_id": posted["id"]})


def set_status(provider: str, config: Any, channel: Any, ctx: Any, event: dict[str, Any], context: str) -> None:
    """The commit status of the session's head commit for a turn's start or end."""
    state_name = STATUS_STATES.get(provider, {}).get(event["type"])
    state = channel.state.get()
    repo, sha = state.get("repo"), state.get("head_sha")
    if not (state_name and repo and sha):
        return
    name = context.replace("{slug}", ctx.agent.slug)
    origin = settings.AGENTSITE_PUBLIC_URL.rstrip("/")
    url = f"{origin}/playground/{ctx.agent.slug}?sessionId={channel.session_id}" if origin else ""
    description = DESCRIPTIONS[event["type"]]
    if provider == "github":
        config.client(installation_id=state.get("installation_id")).set_commit_status(
            repo, sha, state_name, context=name, description=description, target_url=url)
    else:
        config.client().set_commit_status(repo, sha, state_name, name=name, description=description,
                                          target_url=url)
