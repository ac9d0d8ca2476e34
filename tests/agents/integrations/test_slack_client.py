"""slack_sdk's real WebClient against a loopback fake of Slack's Web API."""
from __future__ import annotations

import itertools
import json
import re

import pytest
from django.core.cache import caches
from slack_sdk.errors import SlackApiError

from agents.integrations.outbound import OutboundRefused
from agents.integrations.slack import (
    APPROVE,
    SlackClient,
    SlackConfig,
    StreamedReply,
    check_sender,
    parse_event,
)

from .conftest import LOOPBACK, Clock, fixture_json
from .fakeapi import Answer, FakeAPI, Recorded

TOKEN = "xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy"


class FakeSlack(FakeAPI):
    def __init__(self):
        super().__init__()
        self.users = {
            "U061F7AUR": {"id": "U061F7AUR", "team_id": "T061EG9R6", "name": "ada", "is_restricted": False,
                          "is_ultra_restricted": False, "deleted": False, "is_bot": False},
            "U0GUEST01": {"id": "U0GUEST01", "team_id": "T061EG9R6", "name": "contractor", "is_restricted": True,
                          "is_ultra_restricted": False, "deleted": False, "is_bot": False},
        }
        stamps = itertools.count(1)

        def authorized(request: Recorded) -> bool:
            return request.headers.get("authorization") == f"Bearer {TOKEN}"

        def post_message(request: Recorded, match: re.Match) -> Answer:
            if not authorized(request):
                return Answer(200, {"ok": False, "error": "invalid_auth"})
            sent = request.json()
            ts = f"1712345710.{next(stamps):06d}"
            return Answer(200, {"ok": True, "channel": sent["channel"], "ts": ts,
                                "message": {"type": "message", "text": sent["text"], "ts": ts,
                                            "thread_ts": sent.get("thread_ts")}})

        def update(request: Recorded, match: re.Match) -> Answer:
            if not authorized(request):
                return Answer(200, {"ok": False, "error": "invalid_auth"})
            sent = request.json()
            return Answer(200, {"ok": True, "channel": sent["channel"], "ts": sent["ts"], "text": sent["text"]})

        def users_info(request: Recorded, match: re.Match) -> Answer:
            if not authorized(request):
                return Answer(200, {"ok": False, "error": "invalid_auth"})
            # The SDK sends the arguments as a form body (or a query string).
            arguments = request.form() if request.body else request.query
            user = self.users.get(arguments.get("user", [""])[0])
            return Answer(200, {"ok": True, "user": user} if user else {"ok": False, "error": "user_not_found"})

        self.route("POST", r"/api/chat\.postMessage", post_message)
        self.route("POST", r"/api/chat\.update", update)
        self.route("GET", r"/api/users\.info", users_info)
        self.route("POST", r"/api/users\.info", users_info)

    def calls(self, method: str) -> list[Recorded]:
        return [r for r in self.requests if r.path == f"/api/{method}"]


@pytest.fixture(autouse=True)
def fresh_cache():
    caches["default"].clear()
    yield
    caches["default"].clear()


@pytest.fixture
def slack():
    with FakeSlack() as fake:
        yield fake


@pytest.fixture
def client(slack) -> SlackClient:
    return SlackClient(TOKEN, base_url=f"{slack.url}/api/", allow=LOOPBACK)


def test_a_reply_is_posted_in_the_thread(slack, client):
    ts = client.post_message("C0LAN2Q65", "Yes: the billing deploy is idempotent.", thread_ts="1712345678.123459")
    assert ts == "1712345710.000001"
    [request] = slack.requests
    assert (request.method, request.path) == ("POST", "/api/chat.postMessage")
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert request.json() == {"channel": "C0LAN2Q65", "text": "Yes: the billing deploy is idempotent.",
                              "thread_ts": "1712345678.123459"}


def test_a_message_is_updated_in_place(slack, client):
    ts = client.post_message("C0LAN2Q65", "Thinking…", thread_ts="1712345678.123459")
    client.update_message("C0LAN2Q65", ts, "Done.")
    update = slack.calls("chat.update")[0]
    assert update.json() == {"channel": "C0LAN2Q65", "ts": ts, "text": "Done."}
    assert update.headers["authorization"] == f"Bearer {TOKEN}"


def test_a_streamed_reply_posts_once_then_edits_that_message_at_a_bounded_rate(slack, client):
    clock = Clock(100.0)
    reply = StreamedReply(client, "C0LAN2Q65", "1712345678.123459", interval=1.0, clock=clock)
    reply.update("The")
    reply.update("The deploy")          # too soon: held back
    clock.advance(1.5)
    reply.update("The deploy is")
    reply.update("The deploy is")       # unchanged: nothing to send
    final_ts = reply.finish("The deploy is idempotent.")
    posts, updates = slack.calls("chat.postMessage"), slack.calls("chat.update")
    assert [p.json()["text"] for p in posts] == ["The"]
    assert [u.json()["text"] for u in updates] == ["The deploy is", "The deploy is idempotent."]
    assert {u.json()["ts"] for u in updates} == {final_ts}


def test_a_reply_that_ends_before_any_update_is_posted_once(slack, client):
    reply = StreamedReply(client, "C0LAN2Q65", "1712345678.123459", clock=Clock())
    reply.finish("Short answer.")
    assert [r.path for r in slack.requests] == ["/api/chat.postMessage"]


def test_an_approval_card_is_posted_and_closed(slack, client):
    ts = client.post_approval("C0LAN2Q65", "1712345678.123459", session_id="ses_6d1f0c2a9b8e4f7a",
                              call_id="call_1_0", tool="refund_order", summary='{"order_id": "A101"}')
    card = slack.calls("chat.postMessage")[0].json()
    assert card["thread_ts"] == "1712345678.123459" and card["text"] == "refund_order is waiting for approval"
    buttons = card["blocks"][1]["elements"]
    assert buttons[0]["action_id"] == APPROVE
    assert json.loads(buttons[0]["value"]) == {"session": "ses_6d1f0c2a9b8e4f7a", "call": "call_1_0"}
    client.close_approval("C0LAN2Q65", ts, tool="refund_order", decision="approve", user_id="U061F7AUR")
    closed = slack.calls("chat.update")[0].json()
    assert closed["ts"] == ts and closed["text"] == "Approved: refund_order"
    assert closed["blocks"] == [{"type": "context", "elements": [
        {"type": "mrkdwn", "text": "Approved by <@U061F7AUR>: *refund_order*"}]}]


def test_sender_checks_ask_users_info_once_per_user(slack, client):
    message = parse_event(fixture_json("slack/thread_reply.json"))
    assert check_sender(message, client=client).allowed
    assert check_sender(message, client=client).allowed
    guest = parse_event({**fixture_json("slack/thread_reply.json"),
                         "event": {**fixture_json("slack/thread_reply.json")["event"], "user": "U0GUEST01"}})
    result = check_sender(guest, client=client)
    assert not result.allowed and result.reason == "the sender is a guest"
    asked = slack.calls("users.info")
    assert [(r.form() or r.query)["user"] for r in asked] == [["U061F7AUR"], ["U0GUEST01"]]
    assert asked[0].headers["authorization"] == f"Bearer {TOKEN}"


def test_an_error_from_slack_raises(slack):
    bad = SlackClient("xoxb-wrong", base_url=f"{slack.url}/api/", allow=LOOPBACK)
    with pytest.raises(SlackApiError) as caught:
        bad.post_message("C0LAN2Q65", "hello")
    assert caught.value.response["error"] == "invalid_auth"


def test_the_base_url_goes_through_the_outbound_guard(slack, settings):
    with pytest.raises(OutboundRefused, match="loopback"):
        SlackClient(TOKEN, base_url=f"{slack.url}/api/", allow=[])
    with pytest.raises(OutboundRefused, match="cloud metadata"):
        SlackClient(TOKEN, base_url="http://169.254.169.254/api/", allow=[])
    settings.AGENTSITE_OUTBOUND_ALLOW = LOOPBACK
    SlackClient(TOKEN, base_url=f"{slack.url}/api/").post_message("C0LAN2Q65", "via the settings allowlist")
    assert len(slack.calls("chat.postMessage")) == 1


def test_the_config_builds_the_client_from_the_environment_and_never_shows_secrets(slack):
    config = SlackConfig(api_url=f"{slack.url}/api",
                         environ={"SLACK_BOT_TOKEN": TOKEN, "SLACK_SIGNING_SECRET": "signing-secret-value"})
    assert config.signing_secret() == "signing-secret-value"
    client = config.client(allow=LOOPBACK)
    client.post_message("C0LAN2Q65", "hi")
    shown = repr(config) + json.dumps(config.describe()) + repr(client)
    assert TOKEN not in shown and "signing-secret-value" not in shown
    assert config.describe()["bot_token_env"] == {"env": "SLACK_BOT_TOKEN", "set": True}
    assert SlackConfig(environ={}).api_base() == "https://slack.com/api/"
    with pytest.raises(LookupError, match="SLACK_BOT_TOKEN"):
        SlackConfig(environ={}).client()
