"""A custom channel's keys and sessions keep to their principal: the webhook example on a team's
server, tried by member A (mia), member B (max), an operator, anonymous callers and scoped tokens,
through its post route and its read route; the lab channel's routes that take a session id; and
`ChannelContext` itself (keys per principal, a shared channel, keys stored before, validation)."""
from __future__ import annotations

import pytest
from django.test import Client

from agents.channels import Channel, channel_problems
from agents.discovery import deploy_agent_folder
from sessions.turn.admission import start_session
from sessions.custom_channels import ChannelContext, ChannelError, SessionNotFound, key_hash
from sessions.eventlog.events import read_events
from sessions.models import PersonalToken, Session
from sessions.principal import Principal
from tests.channels_app.roles_support import HOST, PEER, anonymous, people  # noqa: F401 (fixture)
from tests.channels_app.test_custom_channels import (  # noqa: F401 (fixtures)
    WEBHOOK,
    calls,
    lab,
    post,
    server_default,
    transactional,
    write_agent,
)

MESSAGES = "/webhook/v1/channels/inbox/messages"
THREAD = "/webhook/v1/channels/inbox/threads/{}"
A = Principal(authenticator="django", principal_id="mia")
B = Principal(authenticator="django", principal_id="max")


def token_client(user, agents: list[str]) -> Client:
    _, secret = PersonalToken.issue(user, f"scoped-{'-'.join(agents)}", agents=agents)
    return Client(HTTP_AUTHORIZATION=f"Bearer {secret}", HTTP_HOST=HOST, REMOTE_ADDR=PEER)


def texts(session_id: str, kind: str = "message.received") -> list[str]:
    return [e["data"]["text"] for e in read_events(session_id) if e["type"] == kind]


@pytest.fixture
def inbox(people, sync_turns):
    deploy_agent_folder(WEBHOOK)
    started = post(people.mia.client, MESSAGES, {"text": "my card ends 4242", "thread": "t1"})
    assert started.status_code == 200, started.content
    return started.json()["sessionId"]


@transactional
def test_member_b_posting_to_member_as_thread_gets_a_session_of_their_own(people, inbox):
    before = people.max.client.get(THREAD.format("t1"))
    posted = post(people.max.client, MESSAGES, {"text": "what did they say?", "thread": "t1"})
    theirs = people.max.client.get(THREAD.format("t1")).json()
    mine = people.mia.client.get(THREAD.format("t1")).json()

    # B sees no thread t1 before posting: nothing says A has one.
    assert before.status_code == 200 and before.json() == {"thread": "t1", "sessionId": None, "replies": []}
    assert posted.status_code == 200 and posted.json()["created"] is True
    assert posted.json()["sessionId"] != inbox
    assert theirs["sessionId"] == posted.json()["sessionId"]
    assert theirs["replies"] == ["You said: what did they say?"]
    assert mine["sessionId"] == inbox and mine["replies"] == ["You said: my card ends 4242"]
    # A's conversation never got B's message; each session is its poster's.
    assert texts(inbox) == ["my card ends 4242"]
    assert Session.objects.get(pk=posted.json()["sessionId"]).principal_id == "max"
    # The session API agrees with the channel: A's session is A's.
    assert people.max.client.get(f"/webhook/v1/session/{inbox}").status_code == 403
    assert people.mia.client.get(f"/webhook/v1/session/{inbox}").status_code == 200
    channels = {c["id"]: c for c in people.max.client.get("/webhook/v1/info").json()["channels"]}
    assert channels["inbox"]["sharedSessions"] is False


@transactional
def test_member_a_keeps_reaching_their_thread_and_an_operator_gets_their_own(people, inbox):
    again = post(people.mia.client, MESSAGES, {"text": "and the invoice?", "thread": "t1"}).json()
    operator_read = people.olga.client.get(THREAD.format("t1")).json()
    operator_post = post(people.olga.client, MESSAGES, {"text": "operator here", "thread": "t1"}).json()

    assert again["sessionId"] == inbox and again["created"] is False
    assert texts(inbox) == ["my card ends 4242", "and the invoice?"]
    # An operator is one more caller to a channel: its threads are its own, A's stay A's.
    assert operator_read["sessionId"] is None
    assert operator_post["created"] is True and operator_post["sessionId"] != inbox
    assert texts(inbox) == ["my card ends 4242", "and the invoice?"]
    # Operators oversee A's session through the session API (read, not speak), as before.
    assert people.olga.client.get(f"/webhook/v1/session/{inbox}").status_code == 200


@transactional
def test_anonymous_and_tokens_scoped_elsewhere_are_refused_and_a_token_of_as_own_reaches_as_thread(people, inbox):
    elsewhere = token_client(people.mia.user, ["support"])
    scoped_here = token_client(people.mia.user, ["webhook"])
    max_scoped_here = token_client(people.max.user, ["webhook"])

    assert anonymous().get(THREAD.format("t1")).status_code == 401
    assert post(anonymous(), MESSAGES, {"text": "hi", "thread": "t1"}).status_code == 401
    assert elsewhere.get(THREAD.format("t1")).status_code == 403
    assert post(elsewhere, MESSAGES, {"text": "hi", "thread": "t1"}).status_code == 403
    # A token is its user: mia's scoped token is mia, max's is max.
    assert scoped_here.get(THREAD.format("t1")).json()["sessionId"] == inbox
    assert max_scoped_here.get(THREAD.format("t1")).json()["sessionId"] is None
    assert post(max_scoped_here, MESSAGES, {"text": "via token", "thread": "t1"}).json()["sessionId"] != inbox
    assert texts(inbox) == ["my card ends 4242"]


@transactional
def test_a_channel_route_taking_a_session_id_reaches_only_the_callers_sessions(people, lab, sync_turns):
    started = post(people.mia.client, "/lab/v1/channels/lab/start", {"text": "mine", "key": "k1"}).json()
    sid = started["sessionId"]
    lab_paths = {"state": f"/lab/v1/channels/lab/state/{sid}", "emit": f"/lab/v1/channels/lab/emit/{sid}",
                 "gated": f"/lab/v1/channels/lab/gated/{sid}"}

    for client in (people.max.client, people.olga.client):
        refused = client.patch(lab_paths["state"], "{}", content_type="application/json")
        assert refused.status_code == 404, refused.content
        assert refused.json()["error"]["code"] == "session_not_found"
        assert post(client, lab_paths["emit"]).status_code == 404
        assert post(client, lab_paths["gated"]).status_code == 404
        assert client.get("/lab/v1/channels/lab/continuation/k1").json() == {"has": False, "busy": False,
                                                                             "sessionId": None}
        assert post(client, "/lab/v1/channels/lab/interrupt/k1").json() == {"interrupted": False}
    # The same 404 as for a session that does not exist: nothing tells the two apart.
    missing = people.max.client.patch("/lab/v1/channels/lab/state/ses_nothere", "{}", content_type="application/json")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "session_not_found"
    state = Session.objects.get(pk=sid).channel_state
    assert "touched" not in state and state["replies"] == ["You said: mine"]
    assert people.mia.client.patch(lab_paths["state"], "{}", content_type="application/json").json()["touched"]
    assert people.mia.client.get("/lab/v1/channels/lab/continuation/k1").json()["sessionId"] == sid


# -- ChannelContext ---------------------------------------------------------------------------

@transactional
def test_a_key_belongs_to_the_principal_that_opened_it(lab, sync_turns):
    as_a, as_b = ChannelContext(agent=lab, channel_id="lab", principal=A), ChannelContext(agent=lab, channel_id="lab",
                                                                                             principal=B)
    opened = as_a.send("first", continuation_token="thread:t1")

    assert as_b.find_continuation("thread:t1") is None
    assert as_b.has_continuation_session("thread:t1") is False
    assert as_b.get_session(opened.session_id) is None
    with pytest.raises(SessionNotFound):
        as_b.state_of(opened.session_id)
    theirs = as_b.send("second", continuation_token="thread:t1")
    assert theirs.created is True and theirs.session_id != opened.session_id
    followed = as_a.send("third", continuation_token="thread:t1")
    assert followed.created is False and followed.session_id == opened.session_id
    assert texts(opened.session_id) == ["first", "third"]

    # With no caller (on_start), a key is nobody's until auth= says whose.
    nobody = ChannelContext(agent=lab, channel_id="lab")
    with pytest.raises(ChannelError, match="auth="):
        nobody.find_continuation("thread:t1")
    assert nobody.find_continuation("thread:t1", auth=B).session_id == theirs.session_id
    assert nobody.get_session(opened.session_id).session_id == opened.session_id
    # A route acting for someone else (auth=) acts on that principal's key.
    assert as_b.send("fourth", continuation_token="thread:t1", auth=A).session_id == opened.session_id


@transactional
def test_a_key_stored_before_keys_were_per_principal_still_reaches_its_owner_only(lab):
    old = start_session(lab, A, "from before", channel="lab", channel_key_hash=key_hash("thread:old")).session

    assert ChannelContext(agent=lab, channel_id="lab", principal=A).find_continuation("thread:old").session_id == old.id
    as_b = ChannelContext(agent=lab, channel_id="lab", principal=B)
    assert as_b.find_continuation("thread:old") is None
    assert as_b.send("mine", continuation_token="thread:old").session_id != old.id


SHARED = '''\
from pydantic import BaseModel
from agents.sdk import POST, Channel, public_endpoint


class Empty(BaseModel):
    pass


channel = Channel(routes=[POST("/hook", body=Empty, handler=lambda req: None)], auth=[public_endpoint()],
                  shared_sessions=True)
'''


@transactional
def test_a_shared_channels_key_reaches_one_session_whoever_acts(tmp_path, server_default, sync_turns):
    agent = deploy_agent_folder(write_agent(tmp_path / "bot", {"bot": SHARED})).agent
    public = Principal(authenticator="public_endpoint", principal_id="public", principal_type="anonymous")
    ctx = ChannelContext(agent=agent, channel_id="bot", principal=public)

    first = ctx.send("from mia", continuation_token="C1:171.5", auth=A)
    second = ctx.send("from max", continuation_token="C1:171.5", auth=B)

    assert second.session_id == first.session_id and second.created is False
    assert ctx.get_session(first.session_id) is not None
    assert Session.objects.get(pk=first.session_id).channel_key_hash == key_hash("C1:171.5")
    info = Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="127.0.0.1").get("/bot/v1/info").json()
    assert next(c for c in info["channels"] if c["id"] == "bot")["sharedSessions"] is True


def test_shared_sessions_needs_an_authored_chain():
    problems = channel_problems(Channel(routes=[], events={"*": lambda *a: None}, shared_sessions=True))

    assert any("shared_sessions=True" in p and "auth=" in p for p in problems), problems
    assert channel_problems(Channel(events={"*": lambda *a: None}, shared_sessions="yes")) == [
        "shared_sessions= is True or False"]


def test_the_provider_channels_share_their_sessions_and_pass_validation():
    from agents.sdk import bitbucket_channel, github_channel, gitlab_channel, slack_channel

    for built in (github_channel(), gitlab_channel(), bitbucket_channel(), slack_channel()):
        assert built.shared_sessions is True and channel_problems(built) == [], built.kind
