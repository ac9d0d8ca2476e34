from __future__ import annotations

import copy
import json
from urllib.parse import urlencode

import pytest

from agents.integrations.events import PayloadError
from agents.integrations.slack import (
    APPROVE,
    DENY,
    ApprovalAction,
    Engagement,
    SlackMessage,
    approval_blocks,
    approver_allowed,
    check_sender,
    parse_approval_action,
    parse_body,
    parse_event,
    parse_interaction,
    should_engage,
    url_verification_challenge,
)

from .conftest import fixture_bytes, fixture_json

BOT = "U0LAN0Z89"


def test_the_url_verification_challenge_is_answered():
    payload = parse_body(fixture_bytes("slack/url_verification.json"))
    assert url_verification_challenge(payload) == "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    assert url_verification_challenge(fixture_json("slack/app_mention.json")) is None


def test_an_app_mention_is_read_with_the_bots_mention_removed():
    message = parse_event(fixture_json("slack/app_mention.json"))
    assert message is not None
    assert (message.kind, message.team_id, message.channel, message.user) == ("app_mention", "T061EG9R6",
                                                                              "C0LAN2Q65", "U061F7AUR")
    assert message.text == "is the deploy for billing safe to retry?"
    assert message.raw_text.startswith(f"<@{BOT}>")
    assert (message.ts, message.thread_ts, message.in_thread) == ("1712345678.123459", None, False)
    assert (message.bot_user_id, message.event_id, message.mentions_bot) == (BOT, "Ev0LAN670R", True)
    assert message.continuation_key == "C0LAN2Q65:1712345678.123459"


def test_a_thread_reply_continues_its_thread():
    message = parse_event(fixture_json("slack/thread_reply.json"))
    assert message is not None
    assert (message.kind, message.channel_type, message.in_thread) == ("message", "channel", True)
    assert message.text == "and what about the invoices that already went out?"
    assert message.thread_ts == "1712345678.123459"
    assert message.continuation_key == "C0LAN2Q65:1712345678.123459"
    assert not message.mentions_bot


def test_a_mention_inside_a_thread_continues_that_thread():
    payload = fixture_json("slack/app_mention.json")
    payload["event"].update(thread_ts="1712345600.000100", text=f"thanks <@{BOT}|agent>, and  now?")
    message = parse_event(payload)
    assert message.text == "thanks , and now?"
    assert message.continuation_key == "C0LAN2Q65:1712345600.000100"


def with_event(fixture: str, **changes) -> dict:
    payload = copy.deepcopy(fixture_json(fixture))
    payload["event"].update(changes)
    return payload


@pytest.mark.parametrize("changes", [
    {"subtype": "message_changed"},
    {"subtype": "message_deleted"},
    {"subtype": "channel_join"},
    {"subtype": "bot_message", "bot_id": "B999"},
    {"user": BOT},                                  # the bot's own message
    {"bot_id": "B0LAN1Z7R"},                        # any bot, by default
    {"type": "reaction_added"},
    {"user": None},
])
def test_events_to_ignore_give_no_message(changes):
    assert parse_event(with_event("slack/thread_reply.json", **changes)) is None


def test_other_bots_can_be_let_in_but_never_the_bot_itself():
    other_bot = with_event("slack/thread_reply.json", bot_id="B0OTHER", user="U0OTHERBOT")
    assert parse_event(other_bot, allow_bots=True) is not None
    own = with_event("slack/thread_reply.json", bot_id="B0LAN1Z7R", user="U0SOMEONE")
    assert parse_event(own, allow_bots=True, bot_id="B0LAN1Z7R") is None


def test_payloads_other_than_event_callbacks_give_no_message():
    assert parse_event(fixture_json("slack/url_verification.json")) is None


def test_the_bot_user_can_be_named_when_the_payload_has_no_authorizations():
    payload = fixture_json("slack/app_mention.json")
    del payload["authorizations"]
    assert parse_event(payload, bot_user_id=BOT).text == "is the deploy for billing safe to retry?"


def message(**changes) -> SlackMessage:
    return parse_event(with_event("slack/thread_reply.json", **changes))


def test_mentions_engage_and_so_do_direct_messages():
    assert should_engage(parse_event(fixture_json("slack/app_mention.json")))
    assert should_engage(message(channel_type="im", thread_ts=None, channel="D0123"))


def test_by_default_thread_replies_without_a_mention_do_not_engage():
    assert not should_engage(message(), bot_in_thread=True)


def test_in_threads_mode_replies_engage_only_in_threads_the_bot_is_in():
    assert should_engage(message(), engagement=Engagement.THREADS, bot_in_thread=True)
    assert not should_engage(message(), engagement=Engagement.THREADS, bot_in_thread=False)
    top_level = message(thread_ts=None)
    assert not should_engage(top_level, engagement=Engagement.THREADS, bot_in_thread=True)


def test_a_channel_message_that_mentions_the_bot_leaves_it_to_the_app_mention():
    doubled = message(text=f"<@{BOT}> also this")
    assert doubled.mentions_bot
    assert not should_engage(doubled, engagement=Engagement.THREADS, bot_in_thread=True)


class Users:
    """Stands in for SlackClient.user_info."""

    def __init__(self, **users: dict):
        self.users = users
        self.asked: list[str] = []

    def user_info(self, user_id: str) -> dict:
        self.asked.append(user_id)
        return self.users[user_id]


def test_a_member_of_the_workspace_is_allowed():
    users = Users(U061F7AUR={"id": "U061F7AUR", "team_id": "T061EG9R6"})
    assert check_sender(message(), client=users).allowed
    assert users.asked == ["U061F7AUR"]


def test_senders_from_another_workspace_are_blocked_without_asking_slack():
    users = Users()
    result = check_sender(message(user_team="T0OTHERORG"), client=users)
    assert not result.allowed and "another workspace (T0OTHERORG)" in result.reason
    assert users.asked == []


@pytest.mark.parametrize("user, reason", [
    ({"team_id": "T061EG9R6", "is_restricted": True}, "guest"),
    ({"team_id": "T061EG9R6", "is_ultra_restricted": True}, "guest"),
    ({"team_id": "T0OTHERORG"}, "another workspace"),
    ({"team_id": "T061EG9R6", "is_stranger": True}, "another workspace"),
    ({"team_id": "T061EG9R6", "deleted": True}, "deactivated"),
])
def test_guests_strangers_and_deactivated_users_are_blocked(user, reason):
    result = check_sender(message(), client=Users(U061F7AUR=user))
    assert not result.allowed and reason in result.reason


def test_blocks_can_be_lifted_one_by_one():
    guest = Users(U061F7AUR={"team_id": "T061EG9R6", "is_restricted": True})
    assert check_sender(message(), client=guest, allow_guests=True).allowed
    external = message(user_team="T0OTHERORG")
    assert check_sender(external, client=Users(U061F7AUR={"team_id": "T0OTHERORG"}), allow_external=True).allowed
    assert check_sender(external, client=None, allow_external=True, allow_guests=True).allowed


def test_another_workspace_of_the_same_enterprise_is_not_external():
    grid = with_event("slack/thread_reply.json")
    grid["enterprise_id"] = "E0ACME"
    user = {"team_id": "T0SISTER", "enterprise_user": {"enterprise_id": "E0ACME"}}
    assert check_sender(parse_event(grid), client=Users(U061F7AUR=user)).allowed


def test_without_a_client_the_sender_check_fails_closed():
    result = check_sender(message(), client=None)
    assert not result.allowed and "without a Slack client" in result.reason


def test_approval_cards_carry_the_session_and_call_in_both_buttons():
    blocks = approval_blocks(session_id="ses_6d1f0c2a9b8e4f7a", call_id="call_1_0", tool="refund_order",
                             summary='{"order_id": "A101", "note": "<b>&```"}')
    section, actions = blocks
    assert section["text"]["text"].startswith("*refund_order* is waiting for approval:")
    assert "&lt;b&gt;&amp;'''" in section["text"]["text"]
    approve, deny = actions["elements"]
    assert (approve["action_id"], deny["action_id"]) == (APPROVE, DENY)
    assert json.loads(approve["value"]) == json.loads(deny["value"]) == {"session": "ses_6d1f0c2a9b8e4f7a",
                                                                          "call": "call_1_0"}
    long = approval_blocks(session_id="s", call_id="c", tool="t", summary="x" * 10_000)
    assert len(long[0]["text"]["text"]) <= 3000


def interaction_body(payload: dict) -> bytes:
    return urlencode({"payload": json.dumps(payload)}).encode()


def test_a_block_actions_click_is_read_as_an_approval():
    payload = parse_interaction(interaction_body(fixture_json("slack/block_actions.json")))
    action = parse_approval_action(payload)
    assert action == ApprovalAction(
        session_id="ses_6d1f0c2a9b8e4f7a", call_id="call_1_0", decision="approve", user_id="U061F7AUR",
        user_team="T061EG9R6", team_id="T061EG9R6", channel="C0LAN2Q65", message_ts="1712345710.000200",
        thread_ts="1712345678.123459",
    )
    assert action.response_url.startswith("https://hooks.slack.com/actions/")


def test_a_deny_click_is_a_deny():
    payload = fixture_json("slack/block_actions.json")
    payload["actions"][0]["action_id"] = DENY
    assert parse_approval_action(payload).decision == "deny"


def test_clicks_on_other_buttons_are_not_approvals_and_a_forged_value_is_refused():
    payload = fixture_json("slack/block_actions.json")
    payload["actions"][0]["action_id"] = "something_else"
    assert parse_approval_action(payload) is None
    payload["actions"][0].update(action_id=APPROVE, value="call_1_0")
    with pytest.raises(PayloadError, match="session and call ids"):
        parse_approval_action(payload)
    assert parse_approval_action({"type": "view_submission"}) is None


def test_an_interaction_without_a_payload_field_is_refused():
    with pytest.raises(PayloadError, match="without a payload"):
        parse_interaction(b"foo=bar")
    with pytest.raises(PayloadError, match="not JSON"):
        parse_interaction(b"payload=%7Bnope")


def test_only_allowed_approvers_of_the_workspace_may_decide():
    action = parse_approval_action(fixture_json("slack/block_actions.json"))
    assert approver_allowed(action, {"U061F7AUR"})
    assert approver_allowed(action, {"*"})
    assert not approver_allowed(action, {"U0SOMEONEELSE"})
    assert not approver_allowed(action, set())
    outsider = ApprovalAction(**{**action.__dict__, "user_team": "T0OTHERORG"})
    assert not approver_allowed(outsider, {"*", "U061F7AUR"})
