"""The reviewer in Slack: mention it (or write in a thread it is in) and it answers in the thread.

Point the Slack app's Event Subscriptions at /reviewer/v1/channels/slack/events and
its Interactivity at /reviewer/v1/channels/slack/interactivity; set
SLACK_SIGNING_SECRET and SLACK_BOT_TOKEN (see docs/channels-and-providers.md, "Slack channel").
With no public URL, add socket_mode=True and set SLACK_APP_TOKEN instead of the signing secret
(docs/slack-socket-mode.md).
"""
from agents.sdk import slack_channel

channel = slack_channel(
    engagement="threads",   # once in a thread, every reply there is for the reviewer
    approvers=None,         # approval cards: only the person who started the thread decides
)
