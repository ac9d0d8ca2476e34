"""Agents that message each other: list_agents, send_message and read_notifications.

The example agents `concierge` (peers: librarian) and `librarian` run on the
scripted model: a person's message carries the directives, and the text the
concierge sends carries the librarian's. Turns run inline (`sync_turns`),
except where a busy recipient is the point.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.discovery import AgentFolderError, deploy_agent_folder, load_deployment
from agents.models import Agent
from agentsite.limits import Rate
from sessions.turn.admission import start_session, submit_message
from sessions.turn.engine import run_turn
from sessions.eventlog.events import read_events
from sessions.messaging.delivery import send
from sessions.messaging.limits import MessageRefused
from sessions.messaging.tools import SendMessageInput, messaging_tools
from sessions.models import AgentMessage, Session, Turn
from sessions.principal import Principal
from sessions.turn.tools import tool_context
from tests.sessions.test_schedules import write_agent

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ASK = "Is Dune available?\n/call find_book " + json.dumps({"title": "Dune"})

transactional = pytest.mark.django_db(transaction=True)


def call(tool: str, **input) -> str:
    return f"/call {tool} {json.dumps(input)}"


def post_json(client, path: str, body):
    return client.post(path, json.dumps(body), content_type="application/json")


def open_session(client, slug: str, message: str) -> tuple[str, str]:
    response = post_json(client, f"/{slug}/v1/session", {"message": message})
    assert response.status_code == 201, response.content
    return response.json()["sessionId"], response.json()["continuationToken"]


def follow_up(client, slug: str, session_id: str, token: str, message: str) -> str:
    response = post_json(client, f"/{slug}/v1/session/{session_id}/message",
                         {"message": message, "continuationToken": token})
    assert response.status_code == 202, response.content
    return response.json()["continuationToken"]


def results(session_id: str) -> list[dict]:
    return [e["data"] for e in read_events(session_id) if e["type"] == "action.result"]


def deploy_examples() -> None:
    deploy_agent_folder(EXAMPLES / "librarian")
    deploy_agent_folder(EXAMPLES / "concierge")


def deploy_pair(tmp_path: Path, first: str, second: str) -> None:
    """Two agents on the scripted model, each the other's only peer."""
    for slug, peer in ((first, second), (second, first)):
        deploy_agent_folder(write_agent(tmp_path / slug, {}, extra=f", peers=[{peer!r}]"), slug=slug)


@transactional
def test_a_question_and_its_answer_across_two_sessions(alice, bob, sync_turns):
    deploy_examples()
    asked, token = open_session(alice, "concierge", "Is Dune on the shelves?\n" + call("send_message", to="librarian",
                                                                                     text=ASK))
    sent = results(asked)[0]
    assert sent["toolName"] == "send_message" and "error" not in sent, sent
    recipient_id = sent["output"]["sessionId"]
    assert sent["output"] == {"delivered": True, "sessionId": recipient_id, "thread": None}

    # The librarian's session is alice's: she sees it, bob does not.
    recipient = Session.objects.get(pk=recipient_id)
    assert (recipient.agent.slug, recipient.channel, recipient.principal_id) == ("librarian", "agent", "alice")
    assert alice.get(f"/librarian/v1/session/{recipient_id}").status_code == 200
    assert bob.get(f"/librarian/v1/session/{recipient_id}").status_code == 403
    events = read_events(recipient_id)
    received = next(e["data"] for e in events if e["type"] == "message.received")
    assert received == {"source": "agent", "text": ASK, "agent": "concierge", "sessionId": asked}
    first_turn = Turn.objects.filter(session_id=asked).order_by("created_at").first()
    turn = Turn.objects.get(session_id=recipient_id)
    assert turn.trigger == Turn.Trigger.AGENT and turn.status == Turn.Status.COMPLETED
    assert turn.origin == {"agent": "concierge", "sessionId": asked, "turnId": first_turn.id, "hops": 1,
                           "root": first_turn.id}
    found = [r for r in results(recipient_id) if r["toolName"] == "find_book"]
    assert found and found[0]["output"]["shelf"] == "SF-3"
    message = AgentMessage.objects.get(kind=AgentMessage.Kind.MESSAGE)
    assert (message.sender_id, message.recipient_id, message.turn_id, message.hops) == (asked, recipient_id, turn.id, 1)

    # The answer waits in the concierge's notifications, and is read once.
    token = follow_up(alice, "concierge", asked, token, call("read_notifications"))
    notifications = results(asked)[-1]["output"]["notifications"]
    assert len(notifications) == 1
    assert notifications[0]["kind"] == "reply" and notifications[0]["thread"] is None
    assert notifications[0]["from"] == {"agent": "librarian", "sessionId": recipient_id}
    assert "SF-3" in notifications[0]["text"]
    follow_up(alice, "concierge", asked, token, call("read_notifications"))
    assert results(asked)[-1]["output"] == {"notifications": []}


@transactional
def test_the_scripted_model_sends_and_reads_in_one_turn_when_the_answer_is_in(alice, sync_turns):
    """Turns run inline here, so the librarian has answered before the concierge's next step reads."""
    deploy_examples()
    asked, _ = open_session(alice, "concierge", "\n".join([call("send_message", to="librarian", text=ASK), "/next",
                                                          call("read_notifications")]))
    sent, read = results(asked)
    [answer] = read["output"]["notifications"]
    assert answer["from"]["sessionId"] == sent["output"]["sessionId"] and "SF-3" in answer["text"]
    replied = [e["data"]["text"] for e in read_events(asked) if e["type"] == "message.completed"][-1]
    assert replied.startswith("Tool results:") and "SF-3" in replied


@transactional
def test_the_same_thread_continues_one_conversation_and_another_thread_opens_a_second(alice, sync_turns):
    deploy_examples()
    asked, token = open_session(alice, "concierge", call("send_message", to="librarian", text="first"))
    token = follow_up(alice, "concierge", asked, token, call("send_message", to="librarian", text="second"))
    follow_up(alice, "concierge", asked, token, call("send_message", to="librarian", text="third", thread="loans"))
    sessions = [r["output"]["sessionId"] for r in results(asked)]
    assert sessions[0] == sessions[1] != sessions[2]
    assert [r["output"]["thread"] for r in results(asked)] == [None, None, "loans"]
    assert [t.message for t in Turn.objects.filter(session_id=sessions[0]).order_by("created_at")] == ["first", "second"]


@transactional
def test_a_busy_recipient_gets_the_message_queued_and_it_runs_after_its_turn():
    deploy_examples()
    sender = start_session(Agent.objects.get(slug="concierge"), Principal("bearer", "alice"), "hello")
    first = send(sender.session, "concierge", sender.turn.id, "librarian", "first question")
    busy = Session.objects.get(pk=first.session_id)
    assert busy.active_turn_id  # its turn is queued for a worker: the session is busy

    second = send(sender.session, "concierge", sender.turn.id, "librarian", "second question")
    assert second.session_id == first.session_id and not second.created
    queued = Turn.objects.get(session_id=busy.id, message="second question")
    assert queued.admission == Turn.Admission.COALESCE and queued.status == Turn.Status.QUEUED
    assert not Turn.objects.get(pk=busy.active_turn_id).interrupt_requested  # never preempted

    run_turn(busy.active_turn_id)
    busy.refresh_from_db()
    assert busy.active_turn_id == queued.id  # started once the first settled
    run_turn(queued.id)
    events = read_events(busy.id)
    said = [(e["type"], e["data"].get("text")) for e in events if e["type"] in ("message.received", "turn.completed")]
    assert said == [("message.received", "first question"), ("turn.completed", None),
                    ("message.received", "second question"), ("turn.completed", None)]
    replies = AgentMessage.objects.filter(kind=AgentMessage.Kind.REPLY, recipient_id=sender.session.id)
    assert [r.text for r in replies] == ["You said: first question", "You said: second question"]


@transactional
def test_a_person_preempting_the_recipient_spares_queued_messages_and_the_interrupted_one_says_so():
    deploy_examples()
    sender = start_session(Agent.objects.get(slug="concierge"), Principal("bearer", "alice"), "hello")
    first = send(sender.session, "concierge", sender.turn.id, "librarian", "first question")
    send(sender.session, "concierge", sender.turn.id, "librarian", "second question")
    busy = Session.objects.get(pk=first.session_id)
    active, queued = busy.active_turn_id, Turn.objects.get(session_id=busy.id, message="second question")

    submit_message(busy, "never mind, a person speaks")  # preempt, the default

    assert Turn.objects.get(pk=active).interrupt_requested  # what runs now is superseded
    assert not Turn.objects.get(pk=queued.pk).interrupt_requested  # another agent's message still runs
    for _ in range(3):
        busy.refresh_from_db()
        run_turn(busy.active_turn_id)
    statuses = [(t.trigger, t.status) for t in Turn.objects.filter(session_id=busy.id).order_by("created_at")]
    assert statuses == [("agent", "interrupted"), ("agent", "completed"), ("user", "completed")]
    replies = AgentMessage.objects.filter(kind=AgentMessage.Kind.REPLY, recipient_id=sender.session.id)
    assert [r.text for r in replies] == ["[no answer: librarian's turn interrupted: turn interrupted]",
                                        "You said: second question"]


def chain(agents: list[str], end: str = "the end") -> str:
    """A message whose directives make each agent send the rest of the chain to the next."""
    text = end
    for target in reversed(agents):
        text = call("send_message", to=target, text=text)
    return text


@transactional
def test_a_chain_of_agents_stops_at_the_hop_limit_with_a_tool_error(alice, sync_turns, settings, tmp_path):
    settings.AGENTSITE_AGENT_HOP_LIMIT = 3
    deploy_pair(tmp_path, "ping", "pong")
    started, _ = open_session(alice, "ping", chain(["pong", "ping", "pong", "ping", "pong"]))

    sent = AgentMessage.objects.filter(kind=AgentMessage.Kind.MESSAGE).order_by("created_at")
    assert [(m.sender_agent, m.hops) for m in sent] == [("ping", 1), ("pong", 2), ("ping", 3)]
    # pong answered ping's session back in it (the session that opened its own), then refused the fourth.
    pong = sent[0].recipient_id
    assert sent[1].recipient_id == started and sent[2].recipient_id == pong
    refused = results(pong)[-1]
    assert refused["error"].startswith("MessageRefused: hop limit: this would be message 4")
    turns = Turn.objects.filter(session_id=started).order_by("created_at")
    assert [(t.trigger, t.origin.get("hops", 0)) for t in turns] == [("user", 0), ("agent", 2)]


@transactional
def test_a_conversation_over_its_rate_is_refused(alice, sync_turns, settings):
    settings.AGENTSITE_AGENT_MESSAGE_RATE = Rate(4, 60, "4/min")
    deploy_examples()
    # Each message is answered at once: two rows of the conversation per send.
    steps = "\n/next\n".join(call("send_message", to="librarian", text=f"question {n}") for n in range(3))
    asked, _ = open_session(alice, "concierge", steps)
    first, second, third = results(asked)
    assert first["output"]["delivered"] and second["output"]["delivered"]
    assert third["error"].startswith("MessageRefused: rate limit: this conversation carried 4 messages")
    assert AgentMessage.objects.filter(kind=AgentMessage.Kind.MESSAGE).count() == 2


@transactional
def test_a_new_thread_on_every_call_is_bounded_by_the_same_rate(alice, sync_turns, settings):
    settings.AGENTSITE_AGENT_MESSAGE_RATE = Rate(2, 60, "2/min")
    deploy_examples()
    # Each thread opens a conversation of its own: without a bound on the sender, none would hit the pair's rate.
    steps = "\n/next\n".join(call("send_message", to="librarian", text=f"q{n}", thread=f"t{n}") for n in range(3))
    asked, _ = open_session(alice, "concierge", steps)
    first, second, third = results(asked)
    assert first["output"]["delivered"] and second["output"]["delivered"]
    assert third["error"].startswith("MessageRefused: rate limit: this session sent 2 messages")
    assert Session.objects.filter(agent__slug="librarian").count() == 2


@transactional
def test_an_agent_outside_the_peers_is_neither_listed_nor_reached(alice, sync_turns, support_agent):
    deploy_examples()
    asked, _ = open_session(alice, "concierge", "\n".join([call("list_agents"), "/next",
                                                          call("send_message", to="support", text="refund me")]))
    listed, refused = results(asked)
    assert listed["output"] == {"agents": [{
        "slug": "librarian", "name": "Librarian", "deployed": True,
        "description": "Knows which books the library holds, where they are shelved and whether they are on loan."}]}
    assert refused["error"] == ("MessageRefused: not reachable: 'support' is not an agent this one may message; "
                                "it may message: librarian")
    assert not Session.objects.filter(agent=support_agent).exists()
    assert not AgentMessage.objects.exists()


@transactional
def test_a_peer_without_a_deployment_is_listed_as_such_and_refused(alice, sync_turns, tmp_path):
    deploy_agent_folder(write_agent(tmp_path / "lonely", {}, extra=", peers=['ghost']"), slug="lonely")
    asked, _ = open_session(alice, "lonely", "\n".join([call("list_agents"), "/next",
                                                       call("send_message", to="ghost", text="anyone?")]))
    listed, refused = results(asked)
    assert listed["output"] == {"agents": [{"slug": "ghost", "name": "ghost", "description": "", "deployed": False}]}
    assert refused["error"] == "MessageRefused: not deployed: agent 'ghost' has no active deployment"


@transactional
def test_the_tools_are_offered_only_to_an_agent_with_peers(alice):
    deploy_examples()
    concierge = {t["name"]: t["family"] for t in alice.get("/concierge/v1/info").json()["offeredTools"]}
    librarian = {t["name"] for t in alice.get("/librarian/v1/info").json()["offeredTools"]}
    assert {n: concierge.get(n) for n in ("list_agents", "send_message", "read_notifications")} == {
        "list_agents": "builtin", "send_message": "builtin", "read_notifications": "builtin"}
    [sent] = [t["source"] for t in alice.get("/concierge/v1/info").json()["offeredTools"] if t["name"] == "send_message"]
    assert sent == {"kind": "builtin", "feature": "messaging"}
    assert librarian == {"find_book"}


# An agent's own tool named like the messaging tool.
OWN_SEND_MESSAGE = {"agent/tools/send_message.py": """
    from pydantic import BaseModel
    from agents.sdk import tool

    class Input(BaseModel):
        to: str

    @tool(description="Mine.")
    def send_message(input: Input, ctx) -> str:
        return input.to
"""}


def test_an_agent_tool_may_not_take_a_messaging_tool_name(db, tmp_path):
    folder = write_agent(tmp_path / "shadow", OWN_SEND_MESSAGE, extra=", peers=['librarian']")
    with pytest.raises(AgentFolderError, match="'send_message' is a built-in tool name"):
        deploy_agent_folder(folder, slug="shadow")


@transactional
def test_a_refusal_reaches_the_delivery_door_too():
    deploy_examples()
    sender = start_session(Agent.objects.get(slug="concierge"), Principal("bearer", "alice"), "hi")
    with pytest.raises(MessageRefused, match="not deployed"):
        send(sender.session, "concierge", sender.turn.id, "nobody", "hello?")


@transactional
def test_a_message_longer_than_a_persons_is_refused(settings):
    deploy_examples()
    sender = start_session(Agent.objects.get(slug="concierge"), Principal("bearer", "alice"), "hi")
    send_message = messaging_tools(load_deployment(sender.session.deployment))["send_message"]
    settings.AGENTSITE_MAX_MESSAGE_CHARS = 10
    with pytest.raises(MessageRefused, match=r"^too long: a message is at most 10 characters \(11 given\)"):
        send_message(SendMessageInput(to="librarian", text="x" * 11),
                     tool_context(sender.session, "call_1", turn_id=sender.turn.id))
    assert not Session.objects.filter(agent__slug="librarian").exists()


@transactional
def test_a_dry_run_session_sends_nothing(alice, sync_turns):
    deploy_examples()
    response = post_json(alice, "/concierge/v1/session",
                         {"message": call("send_message", to="librarian", text="hello"), "dryRun": True})
    assert response.status_code == 201, response.content
    sent = results(response.json()["sessionId"])[0]
    assert sent["stubbed"] is True
    assert not AgentMessage.objects.exists() and not Session.objects.filter(agent__slug="librarian").exists()


@transactional
def test_an_agent_without_peers_may_keep_a_tool_named_like_a_messaging_tool(tmp_path):
    """Releases from before the messaging tools keep loading: the names are reserved only beside peers."""
    folder = write_agent(tmp_path / "legacy", OWN_SEND_MESSAGE)
    deployment = deploy_agent_folder(folder, slug="legacy")
    assert "send_message" in load_deployment(deployment).tools
