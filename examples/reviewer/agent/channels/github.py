"""Pull requests and mentions from GitHub: served at POST /reviewer/v1/channels/github.

Set GITHUB_WEBHOOK_SECRET to the webhook's secret and GITHUB_TOKEN (or a GitHub
App's GITHUB_APP_ID and GITHUB_APP_PRIVATE_KEY) for the replies. REVIEWER_BOT_LOGIN
is the account the replies are posted as: a comment mentioning it starts a turn,
and its own comments are ignored.
"""
import os

from agents.sdk import default_auth, github_channel


def bot_login() -> str:
    return os.environ.get("REVIEWER_BOT_LOGIN", "reviewer-bot")


def review(ctx, event):
    """A pull request opened, or new commits pushed to it: review it."""
    if event.action in ("opened", "reopened", "synchronize", "ready_for_review"):
        return {"auth": default_auth(event)}
    return None


def answer(ctx, event):
    """A comment on a pull request that mentions the bot: answer it in the same conversation."""
    login = bot_login().lower()
    if event.sender_login.lower() == login:  # its own reply, posted with a personal token
        return None
    if event.action == "created" and f"@{login}" in event.comment.lower():
        return {"auth": default_auth(event)}
    return None


channel = github_channel(
    on_pull_request=review,
    on_comment=answer,
    description="Reviews pull requests and answers mentions in their comments.",
)
