"""`slack_channel(...)` in process: signed Events API deliveries start and continue
thread sessions, replies reach a loopback fake of Slack's Web API (through the
real slack_sdk client) in the right thread, approval cards are decided by
allowed users only, and /info shows the channel without secrets."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from django.core.cache import caches
from django.test import Client

from agents.discovery import deploy_agent_folder
from sessions.host import Host
from sessions.models import Session, ToolCall, Turn

from .slack_support import (
    ADA, BOB, CHANNEL, GUEST, OUTSIDER, SECRET, TEAM, TOKEN, FakeSlack, click, message_event, signed_headers,
)
from .test_custom_channels import REFUND_TOOL

transactional = pytest.mark.django_db(transaction=True)

CHANNELS = {
    "slack": "channel = slack_channel()",
    "threads": 'channel = slack_channel(engagement="threads", streaming=False, approvers=["U0BOB0001"])',
    "open": "channel = slack_channel(allow_external=True, allow_guests=True, streaming=False)",
    "unset": 'channel = slack_channel(signing_secret_env="UNSET_SLACK_SECRET")',
}
REMOTE = {"HTTP_HOST": "agents.example.com", "REMOTE_ADDR": "203.0.113.9"}
LOCAL = {"HTTP_HOST": "127.0.0.1:8000", "REMOTE_ADDR": "127.0.0.1"}


def write_agent(root: Path) -> Path:
    (root / "agent" / "channels").mkdir(parents=True)
    (root / "agent" / "tools").mkdir(parents=True)
    (root / "agent" / "tools" / "refund.py").write_text(REFUND_TOOL)
    (root / "agent" / "instructions.md").write_text("Echo.\n")
    (root / "agent" / "agent.py").write_text(
        'from agents.sdk import Agent\nagent = Agent(model="scripted:echo", tools=[], builtins=["ask_question"])\n')
    for name, declaration in CHANNELS.items():
        (root / "agent" / "channels" / f"{name}.py").write_text(f"from agents.sdk import slack_channel\n{declaration}\n")
    return root


@pytest.fixture(scope="module")
def fake():
    with FakeSlack() as api:
        yield api


@pytest.fixture
def slack(fake, monkeypatch, settings):
    fake.reset()
    caches["default"].clear()  # replay protection and users.info answers
    monkeypatch.setenv("SLACK_SIGNING_SECRET", SECRET)
    monkeypatch.setenv("SLACK_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("SLACK_API_URL", fake.api_url)
    monkeypatch.delenv("UNSET_SLACK_SECRET", raising=False)
    settings.AGENTSITE_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    yield fake
    caches["default"].clear()


@pytest.fixture
def agent(tmp_path, db):
    return deploy_agent_folder(write_agent(tmp_path / "chatty")).agent


def deliver(payload: dict | bytes, channel: str = "slack", *, route: str = "events", client: Client | None = None,
            headers: dict[str, str] | None = None, **extra):
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    signed = signed_headers(body) if headers is None else headers
    content_type = "application/x-www-form-urlencoded" if route == "interactivity" else "application/json"
    return (client or Client(**REMOTE)).post(
        f"/chatty/v1/channels/{channel}/{route}", body, content_type=content_type,
        **{f"HTTP_{k.upper().replace('-', '_')}": v for k, v in signed.items()}, **extra)


def sessions_of(channel: str) -> list[Session]:
    return list(Session.objects.filter(channel=channel))


# -- verification ------------------------------------------------------------------------

def test_slacks_url_check_is_answered_with_the_challenge(slack, agent):
    response = deliver({"token": "t", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY", "type": "url_verification"})

    assert response.status_code == 200
    assert response.json() == {"challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY"}


@pytest.mark.parametrize("route", ["events", "interactivity"])
def test_unsigned_old_forged_and_replayed_requests_get_401(slack, agent, route):
    body = json.dumps({"token": "t", "challenge": "c", "type": "url_verification"}).encode()
    if route == "interactivity":
        body = b"payload=%7B%7D"
    old = signed_headers(body, timestamp=1_600_000_000)
    forged = signed_headers(body, secret="not-the-secret")
    good = signed_headers(body)

    answers = {
        "unsigned": deliver(body, route=route, headers={}),
        "old": deliver(body, route=route, headers=old),
        "forged": deliver(body, route=route, headers=forged),
        "first": deliver(body, route=route, headers=good),
        "replayed": deliver(body, route=route, headers=good),
    }

    assert answers["first"].status_code == 200
    for name in ("unsigned", "old", "forged", "replayed"):
        assert answers[name].status_code == 401, name
        assert answers[name].json()["error"]["code"] == "invalid_signature"
    assert "too old" in answers["old"].json()["error"]["message"]
    assert "already received" in answers["replayed"].json()["error"]["message"]


def test_without_a_signing_secret_only_a_dev_loopback_caller_is_taken(slack, agent, settings):
    check = {"token": "t", "challenge": "c-1", "type": "url_verification"}

    remote = deliver(check, "unset", headers={})
    settings.AGENTSITE_DEV = True
    local = deliver(check, "unset", headers={}, client=Client(**LOCAL))
    still_remote = deliver(check, "unset", headers={})

    assert remote.status_code == 401
    assert remote.json()["error"]["code"] == "slack_not_configured"
    assert "UNSET_SLACK_SECRET" in remote.json()["error"]["message"]
    assert local.json() == {"challenge": "c-1"}
    assert still_remote.status_code == 401


# -- conversations -------------------------------------------------------------------------

@transactional
def test_a_mention_starts_a_session_and_the_reply_streams_into_one_message_in_its_thread(slack, agent,
                                                                                         sync_turns):
    response = deliver(message_event("is the deploy for billing safe to retry?", ts="1712345678.123459"))

    assert response.status_code == 200 and response.json()["outcome"] == "accepted"
    [session] = sessions_of("slack")
    assert session.principal_id == f"slack:{TEAM}:{ADA}" and session.authenticator == "slack"
    assert session.channel_state["thread_ts"] == "1712345678.123459"
    [message] = slack.in_thread("1712345678.123459")
    assert message.channel == CHANNEL
    assert message.text == "You said: is the deploy for billing safe to retry?"
    assert slack.calls("chat.postMessage")[0].json()["thread_ts"] == "1712345678.123459"
    assert session.turns.get().status == Turn.Status.COMPLETED


@transactional
def test_a_streamed_reply_is_edited_in_place_as_it_grows(slack, agent, sync_turns, settings):
    settings.AGENTSITE_DELTA_FLUSH_SECONDS = 0  # every chunk is its own delta

    deliver(message_event("/reply " + "many words " * 30, ts="1712345600.000100"))

    [message] = slack.in_thread("1712345600.000100")
    assert message.text == ("many words " * 30).strip()
    assert len(message.history) >= 2 and message.history[0] != message.text  # posted early, finished by an edit
    assert message.history[-1] == message.text


@transactional
def test_without_streaming_the_reply_is_posted_once(slack, agent, sync_turns):
    deliver(message_event("hello there", ts="1712345601.000100"), "threads")

    assert slack.replies("1712345601.000100") == ["You said: hello there"]
    assert slack.calls("chat.update") == []


@transactional
def test_a_mention_in_the_thread_continues_its_session_and_a_plain_reply_does_not(slack, agent, sync_turns):
    deliver(message_event("first", ts="1712345602.000100"))
    plain = deliver(message_event("not for the bot", ts="1712345602.000200", thread_ts="1712345602.000100",
                                  kind="message"))
    deliver(message_event("second", ts="1712345602.000300", thread_ts="1712345602.000100", user=BOB))

    assert plain.json()["outcome"] == "ignored"
    [session] = sessions_of("slack")
    assert session.turns.count() == 2
    assert slack.replies("1712345602.000100") == ["You said: first", "You said: second"]


@transactional
def test_in_threads_mode_every_reply_in_the_bots_thread_continues_it(slack, agent, sync_turns):
    deliver(message_event("first", ts="1712345603.000100"), "threads")
    deliver(message_event("and then?", ts="1712345603.000200", thread_ts="1712345603.000100", kind="message"),
            "threads")
    elsewhere = deliver(message_event("a thread without the bot", ts="1712345604.000200",
                                      thread_ts="1712345604.000100", kind="message"), "threads")

    assert elsewhere.json()["outcome"] == "ignored"
    [session] = sessions_of("threads")
    assert session.turns.count() == 2
    assert slack.replies("1712345603.000100") == ["You said: first", "You said: and then?"]


@transactional
def test_a_retried_event_is_answered_and_starts_nothing_new(slack, agent, sync_turns):
    event = message_event("once please", ts="1712345605.000100", event_id="Ev0RETRY01")

    first = deliver(event)
    body = json.dumps(event).encode()  # Slack signs each retry anew, a few seconds later
    retried = deliver(body, headers=signed_headers(body, timestamp=int(time.time()) + 3),
                      HTTP_X_SLACK_RETRY_NUM="1", HTTP_X_SLACK_RETRY_REASON="http_timeout")

    assert first.json()["outcome"] == "accepted"
    assert retried.status_code == 200 and retried.json()["outcome"] == "duplicate"
    assert Turn.objects.count() == 1
    assert slack.replies("1712345605.000100") == ["You said: once please"]


@transactional
def test_guests_and_other_workspaces_are_blocked_by_default(slack, agent, sync_turns):
    deliver(message_event("from a guest", ts="1712345606.000100", user=GUEST))
    deliver(message_event("from slack connect", ts="1712345606.000200", user=OUTSIDER, user_team="T0OTHERWS"))
    deliver(message_event("a stranger in our team's event", ts="1712345606.000300", user=OUTSIDER))

    assert sessions_of("slack") == []
    assert slack.calls("chat.postMessage") == []

    deliver(message_event("from a guest", ts="1712345606.000400", user=GUEST), "open")
    assert slack.replies("1712345606.000400") == ["You said: from a guest"]


@transactional
def test_the_bots_own_messages_and_edits_are_ignored(slack, agent, sync_turns):
    own = deliver(message_event("my own reply", ts="1712345607.000100", user="U0LAN0Z89", kind="message",
                                channel_type="im"))
    edit = deliver(message_event("edited", ts="1712345607.000200", kind="message", channel_type="im",
                                 subtype="message_changed"))

    assert own.json()["outcome"] == edit.json()["outcome"] == "ignored"
    assert Session.objects.count() == 0


@transactional
def test_direct_messages_are_answered_and_a_bare_mention_starts_nothing(slack, agent, sync_turns):
    deliver(message_event("are you there?", ts="1712345611.000100", kind="message", channel_type="im"))
    deliver(message_event("", ts="1712345611.000200"))

    assert slack.replies("1712345611.000100") == ["You said: are you there?"]
    assert len(sessions_of("slack")) == 1


@transactional
def test_replies_cannot_ping_the_channel_and_a_failed_turn_says_so(slack, agent, sync_turns):
    deliver(message_event("/reply heads up <!channel> & <@U0BOB0001>", ts="1712345612.000100"), "threads")
    deliver(message_event("/fail the model is down", ts="1712345613.000100"), "threads")

    assert slack.replies("1712345612.000100") == ["heads up &lt;!channel&gt; &amp; &lt;@U0BOB0001&gt;"]
    assert slack.replies("1712345613.000100") == ["I could not finish that: the model is down"]


# -- approvals -------------------------------------------------------------------------------

def parked_call(session: Session) -> ToolCall:
    return ToolCall.objects.get(session=session)


@transactional
def test_the_threads_starter_approves_a_parked_call_and_anyone_else_is_refused(slack, agent, sync_turns):
    deliver(message_event('/call refund {"order_id": "A1"}', ts="1712345608.000100"))
    [session] = sessions_of("slack")
    [card] = slack.cards("1712345608.000100")
    assert "refund" in card.text and "A1" in card.blocks[0]["text"]["text"]
    assert parked_call(session).status == ToolCall.Status.AWAITING_APPROVAL

    refused = deliver(click(card, user=BOB), route="interactivity")

    assert refused.status_code == 200
    assert parked_call(session).status == ToolCall.Status.AWAITING_APPROVAL
    assert [(e["user"], e["channel"]) for e in slack.ephemeral] == [(BOB, CHANNEL)]
    assert f"<@{ADA}>" in slack.ephemeral[0]["text"]
    assert slack.messages[card.ts].edits == 0

    late_click = click(card, user=ADA, decision="deny")  # a second click on the card as it was
    approved = deliver(click(card, user=ADA), route="interactivity")

    assert approved.status_code == 200
    assert parked_call(session).status == ToolCall.Status.DONE
    assert parked_call(session).output == {"refunded": "A1"}
    assert slack.messages[card.ts].text == "Approved: refund"
    assert slack.messages[card.ts].blocks[0]["elements"][0]["text"] == f"Approved by <@{ADA}>: *refund*"
    assert session.turns.get().status == Turn.Status.COMPLETED
    assert len(slack.replies("1712345608.000100")) == 1  # the summary after the tool ran

    again = deliver(late_click, route="interactivity")
    assert again.status_code == 200 and "already decided" in slack.ephemeral[-1]["text"]


ASK_CARRIER = '/call ask_question {"question": "Which carrier?", "options": ["UPS", "DHL"]}'


@transactional
def test_the_models_question_is_a_card_whose_option_the_starter_clicks(slack, agent, sync_turns):
    deliver(message_event(ASK_CARRIER, ts="1712345612.000100"))
    [session] = sessions_of("slack")
    [card] = slack.cards("1712345612.000100")
    assert card.blocks[0]["text"]["text"] == "*The agent asks:* Which carrier?"
    buttons = next(b for b in card.blocks if b["type"] == "actions")["elements"]
    assert [b["text"]["text"] for b in buttons] == ["UPS", "DHL"]
    assert card.blocks[-1]["elements"][0]["text"] == "Or reply in this thread with your answer, mentioning this app."

    deliver(click(card, user=BOB, option="DHL"), route="interactivity")
    assert parked_call(session).status == ToolCall.Status.AWAITING_APPROVAL
    assert "answer this question" in slack.ephemeral[-1]["text"]

    deliver(click(card, user=ADA, option="DHL"), route="interactivity")
    row = parked_call(session)
    assert (row.status, row.output, row.decided_by["principalId"]) == (ToolCall.Status.DONE, "DHL",
                                                                       f"slack:{TEAM}:{ADA}")
    assert slack.messages[card.ts].text == "Answered: DHL"
    assert slack.messages[card.ts].blocks[0]["text"]["text"] == "*The agent asked:* Which carrier?\n>DHL"
    assert slack.replies("1712345612.000100") == ["Tool results:\nask_question (ok): DHL"]
    assert session.turns.get().status == Turn.Status.COMPLETED


@transactional
def test_a_reply_in_the_thread_answers_the_waiting_question_and_only_from_who_may(slack, agent, sync_turns):
    thread = "1712345613.000100"
    deliver(message_event(ASK_CARRIER, ts=thread), "threads")
    [session] = sessions_of("threads")

    deliver(message_event("UPS please", ts="1712345613.000200", thread_ts=thread, user=ADA, kind="message"),
            "threads")  # the starter is no approver of this channel: a message like any other
    assert [t.status for t in session.turns.order_by("created_at")] == ["awaiting_approval", "queued"]
    assert parked_call(session).status == ToolCall.Status.AWAITING_APPROVAL, "still waiting for its answer"

    thread = "1712345614.000100"
    deliver(message_event(ASK_CARRIER, ts=thread), "threads")
    second = Session.objects.filter(channel="threads").exclude(pk=session.pk).get()
    assert slack.cards(thread)[0].blocks[-1]["elements"][0]["text"] == "Or reply in this thread with your answer."
    deliver(message_event("UPS &lt;the cheaper one&gt;", ts="1712345614.000200", thread_ts=thread, user=BOB,
                          kind="message"), "threads")
    row = parked_call(second)
    assert (row.status, row.output) == (ToolCall.Status.DONE, "UPS <the cheaper one>"), "as Bob typed it"
    assert second.turns.count() == 1, "the reply answered the question: no second turn"
    [card] = slack.cards(thread)
    assert slack.messages[card.ts].blocks[0]["text"]["text"] == "*The agent asked:* Which carrier?\n>UPS &lt;the cheaper one&gt;"


@transactional
def test_named_approvers_decide_and_the_starter_is_not_one_of_them(slack, agent, sync_turns):
    deliver(message_event('/call refund {"order_id": "B2"}', ts="1712345609.000100"), "threads")
    [session] = sessions_of("threads")
    [card] = slack.cards("1712345609.000100")

    deliver(click(card, user=ADA), "threads", route="interactivity")
    assert parked_call(session).status == ToolCall.Status.AWAITING_APPROVAL
    deliver(click(card, user=BOB, user_team="T0OTHERWS"), "threads", route="interactivity")
    assert parked_call(session).status == ToolCall.Status.AWAITING_APPROVAL

    deliver(click(card, user=BOB, decision="deny"), "threads", route="interactivity")

    assert parked_call(session).status == ToolCall.Status.DENIED
    assert slack.messages[card.ts].text == "Denied: refund"
    assert [e["user"] for e in slack.ephemeral] == [ADA, BOB]


@transactional
def test_a_click_on_another_channels_card_decides_nothing(slack, agent, sync_turns):
    deliver(message_event('/call refund {"order_id": "C3"}', ts="1712345610.000100"))
    [session] = sessions_of("slack")
    [card] = slack.cards("1712345610.000100")

    deliver(click(card, user=ADA), "open", route="interactivity")

    assert parked_call(session).status == ToolCall.Status.AWAITING_APPROVAL
    assert "does not belong" in slack.ephemeral[0]["text"]


# -- discovery and host ---------------------------------------------------------------------

def test_info_lists_the_slack_channel_with_its_routes_and_no_secret(slack, agent):
    response = Client(**LOCAL).get("/chatty/v1/info")

    assert response.status_code == 200
    assert SECRET not in response.content.decode() and TOKEN not in response.content.decode()
    [described] = [c for c in response.json()["channels"] if c["id"] == "slack"]
    assert described["kind"] == "slack"
    assert [(r["method"], r["url"], r["rawBody"]) for r in described["routes"]] == [
        ("POST", "/chatty/v1/channels/slack/events", True),
        ("POST", "/chatty/v1/channels/slack/interactivity", True)]
    assert described["auth"] == [{"kind": "public_endpoint"}]
    config = described["config"]
    assert config["signingSecretEnv"] == {"env": "SLACK_SIGNING_SECRET", "set": True}
    assert config["botTokenEnv"] == {"env": "SLACK_BOT_TOKEN", "set": True}
    assert config["engagement"] == "mentions" and config["approvers"] is None and config["streaming"] is True


def test_the_reviewer_example_declares_a_slack_channel(slack, db):
    reviewer = deploy_agent_folder(Path(__file__).resolve().parents[2] / "examples" / "reviewer").agent

    channels = Client(**LOCAL).get(f"/{reviewer.slug}/v1/info").json()["channels"]

    [described] = [c for c in channels if c["kind"] == "slack"]
    assert described["routes"][0]["url"] == f"/{reviewer.slug}/v1/channels/slack/events"
    assert described["config"]["engagement"] == "threads"


def test_host_slack_posts_as_the_agents_bot(slack, agent):
    ts = Host(session=None, agent=agent).slack.post_message(CHANNEL, "hello from a tool", thread_ts="1.2")

    assert slack.messages[ts].text == "hello from a tool"
    assert slack.calls("chat.postMessage")[0].headers["authorization"] == f"Bearer {TOKEN}"


def test_host_slack_without_a_token_says_which_variable_to_set(slack, agent, monkeypatch):
    monkeypatch.delenv("SLACK_BOT_TOKEN")

    with pytest.raises(LookupError, match="SLACK_BOT_TOKEN"):
        Host(session=None, agent=agent).slack
