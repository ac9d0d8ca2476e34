"""The turn budget of agents messaging each other: one person's message may cause at most
`AGENTSITE_AGENT_TURN_BUDGET` turns of agents, across every thread and session it fans into.

Two agents on the scripted model, each the other's only peer: a person asks `ping` to send to
`pong` on three threads (three sessions of pong), and each pong session sends two messages back
into ping's session. Nine turns of agents would follow; the budget lets the first few run and
refuses the rest as the sending call's error (a refused send causes no more: which sends are
refused depends on the order the turns run in, inline here with `sync_turns`).
"""
from __future__ import annotations

import logging

import pytest

from agents.discovery import deploy_agent_folder
from agents.models import Agent
from sessions.turn.admission import start_session, submit_message
from sessions.custom_channels.context import ChannelContext
from sessions.eventlog.events import read_events
from sessions.messaging.delivery import send
from sessions.messaging.limits import MessageRefused
from sessions.models import AgentMessage, Reminder, Session, Turn
from sessions.principal import Principal
from sessions.timers.reminders import fire_reminder_now
from tests.sessions.test_messaging import call, deploy_pair, open_session, results
from tests.sessions.test_schedules import write_agent

transactional = pytest.mark.django_db(transaction=True)
REFUSED = "MessageRefused: turn budget: "


def fan_out(threads: int, replies: int) -> str:
    """ping sends to pong on `threads` threads; each pong session sends `replies` messages back to ping."""
    back = "\n/next\n".join(call("send_message", to="ping", text=f"reply {n}") for n in range(replies))
    return "\n/next\n".join(call("send_message", to="pong", text=back, thread=f"t{n}") for n in range(threads))


def every_result() -> list[dict]:
    return [r for session_id in Session.objects.values_list("id", flat=True) for r in results(session_id)]


@transactional
def test_a_fan_out_over_several_threads_stops_at_the_budget(alice, sync_turns, settings, tmp_path, caplog):
    settings.AGENTSITE_AGENT_TURN_BUDGET = 5
    deploy_pair(tmp_path, "ping", "pong")
    with caplog.at_level(logging.WARNING, logger="sessions.messaging.limits"):
        started, _ = open_session(alice, "ping", fan_out(threads=3, replies=2))
    person_turn = Turn.objects.get(session_id=started, trigger=Turn.Trigger.USER)

    # Five turns of agents ran, in several sessions of pong; all of them the person's message's.
    sent = AgentMessage.objects.filter(kind=AgentMessage.Kind.MESSAGE)
    assert sent.count() == 5 and {m.root for m in sent} == {person_turn.id}
    agent_turns = Turn.objects.filter(trigger=Turn.Trigger.AGENT)
    assert agent_turns.count() == 5 and {t.origin["root"] for t in agent_turns} == {person_turn.id}
    assert Session.objects.filter(agent__slug="pong").count() >= 2

    # The sends after those were refused, each as its call's error, which the model read back.
    refused = [r for r in every_result() if r.get("error", "").startswith(REFUSED)]
    assert refused and not [r for r in every_result() if "error" in r and r not in refused]
    assert refused[0]["error"] == (
        REFUSED + "the message that started this work has already caused 5 turns of agents, and at most 5 may follow "
        "from one (AGENTSITE_AGENT_TURN_BUDGET); answer with what you have")
    assert {r["toolName"] for r in refused} == {"send_message"}
    replies = [e["data"]["text"] for s in Session.objects.all() for e in read_events(s.id)
               if e["type"] == "message.completed"]
    assert sum("turn budget" in text for text in replies) >= 1

    # Each refusal is one warning line naming the root turn and the budget, without a traceback.
    lines = [r for r in caplog.records if r.name == "sessions.messaging.limits"]
    assert len(lines) == len(refused)
    for record in lines:
        assert record.levelno == logging.WARNING and record.exc_info is None and "\n" not in record.getMessage()
        assert record.getMessage().startswith(f"agent turn budget spent: turn {person_turn.id} has caused 5 turns")
        assert "(AGENTSITE_AGENT_TURN_BUDGET=5)" in record.getMessage()

    # The person speaks again: a new message, a new budget.
    # (Through admission: the agents' messages into ping's session rotated the token the person held.)
    submit_message(Session.objects.get(pk=started), call("send_message", to="pong", text="again", thread="t9"))
    again = Turn.objects.filter(session_id=started, trigger=Turn.Trigger.USER).order_by("created_at").last()
    assert results(started)[-1]["output"]["delivered"] is True
    assert AgentMessage.objects.get(kind=AgentMessage.Kind.MESSAGE, root=again.id).thread == "t9"


@transactional
def test_under_the_budget_nothing_is_refused(alice, sync_turns, settings, tmp_path):
    settings.AGENTSITE_AGENT_TURN_BUDGET = 9
    deploy_pair(tmp_path, "ping", "pong")
    open_session(alice, "ping", fan_out(threads=3, replies=2))
    assert AgentMessage.objects.filter(kind=AgentMessage.Kind.MESSAGE).count() == 9
    assert not [r for r in every_result() if "error" in r]


@transactional
def test_a_send_from_no_turn_is_refused_rather_than_counted_on_a_shared_budget(tmp_path):
    deploy_pair(tmp_path, "ping", "pong")
    sender = start_session(Agent.objects.get(slug="ping"), Principal("bearer", "alice"), "hi")
    with pytest.raises(MessageRefused, match="^send_message needs a session's turn to send from$"):
        send(sender.session, "ping", "", "pong", "hello")
    assert not AgentMessage.objects.exists()


def deploy_pair_with_reminders(tmp_path) -> None:
    """ping and pong, each the other's only peer, both with `remind_me`."""
    for slug, peer in (("ping", "pong"), ("pong", "ping")):
        deploy_agent_folder(write_agent(tmp_path / slug, {}, extra=f", peers=[{peer!r}], reminders_tool=True"),
                            slug=slug)


def sends(count: int, to: str) -> str:
    """A script that sends `count` messages to `to`, one a step, each on a thread of its own."""
    return "\n/next\n".join(call("send_message", to=to, text=f"hello {n}", thread=f"r{n}") for n in range(count))


def fire(reminder: Reminder) -> Turn:
    """Fire the reminder's next due time by hand (as the dev route does); the turn it woke, run inline."""
    reminder.refresh_from_db()
    assert fire_reminder_now(reminder)
    return Turn.objects.filter(trigger=Turn.Trigger.REMINDER).order_by("created_at").last()


def outcomes(turn: Turn) -> list[str]:
    """What each send_message of the turn came to: "delivered" or the start of its error."""
    calls = [e["data"] for e in read_events(turn.session_id)
             if e["type"] == "action.result" and e["turnId"] == turn.id and e["data"]["toolName"] == "send_message"]
    return ["delivered" if (r.get("output") or {}).get("delivered") else r.get("error", "")[:len(REFUSED)]
            for r in calls]


@transactional
def test_a_reminder_an_agents_turn_sets_spends_the_budget_of_the_message_that_started_it(
        alice, sync_turns, settings, tmp_path):
    """pong, woken by ping's message, sets a daily reminder that sends four messages back: each firing
    goes on spending the person's budget (one message spent, two left), at the hops it left off."""
    settings.AGENTSITE_AGENT_TURN_BUDGET = 3
    deploy_pair_with_reminders(tmp_path)
    remind = call("remind_me", every="1d", prompt=sends(4, "ping"))
    started, _ = open_session(alice, "ping", call("send_message", to="pong", text=remind))
    person_turn = Turn.objects.get(session_id=started, trigger=Turn.Trigger.USER)
    agents_turn = Turn.objects.get(trigger=Turn.Trigger.AGENT)
    reminder = Reminder.objects.get()
    assert reminder.session_id == agents_turn.session_id
    assert reminder.created_by == {"tool": "remind_me",
                                   "origin": {"turnId": agents_turn.id, "root": person_turn.id, "hops": 1}}

    woken = fire(reminder)
    assert woken.origin == {"turnId": agents_turn.id, "root": person_turn.id, "hops": 1}
    assert outcomes(woken) == ["delivered", "delivered", REFUSED, REFUSED]
    from_reminder = AgentMessage.objects.filter(kind=AgentMessage.Kind.MESSAGE, sender_id=woken.session_id)
    assert [(m.root, m.hops) for m in from_reminder] == [(person_turn.id, 2)] * 2

    # The next day's firing finds the budget spent: no fresh one for the agent.
    assert outcomes(fire(reminder)) == [REFUSED] * 4
    assert AgentMessage.objects.filter(kind=AgentMessage.Kind.MESSAGE).count() == 3


@transactional
def test_a_reminder_set_by_a_woken_turn_carries_the_same_root(alice, sync_turns, settings, tmp_path):
    """Two steps do not launder it: the turn an agent's reminder woke sets another reminder."""
    settings.AGENTSITE_AGENT_TURN_BUDGET = 2
    deploy_pair_with_reminders(tmp_path)
    second = call("remind_me", delay="5m", prompt=sends(3, "ping"))
    started, _ = open_session(alice, "ping", call("send_message", to="pong", text=call(
        "remind_me", delay="5m", prompt=second)))
    person_turn = Turn.objects.get(session_id=started, trigger=Turn.Trigger.USER)
    fire(Reminder.objects.get())
    later = Reminder.objects.get(status=Reminder.Status.ARMED)
    assert later.created_by["origin"]["root"] == person_turn.id
    assert outcomes(fire(later)) == ["delivered", REFUSED, REFUSED]


@transactional
def test_a_persons_own_reminder_starts_a_fresh_budget_each_time_it_fires(alice, sync_turns, settings, tmp_path):
    settings.AGENTSITE_AGENT_TURN_BUDGET = 3
    deploy_pair_with_reminders(tmp_path)
    started, _ = open_session(alice, "ping", "\n/next\n".join([
        call("send_message", to="pong", text="hi"), call("remind_me", every="1d", prompt=sends(4, "pong"))]))
    reminder = Reminder.objects.get()
    assert reminder.created_by == {"tool": "remind_me"}

    for _ in range(2):
        woken = fire(reminder)
        assert woken.origin == {}
        assert outcomes(woken) == ["delivered", "delivered", "delivered", REFUSED]
        sent = AgentMessage.objects.filter(kind=AgentMessage.Kind.MESSAGE, root=woken.id)
        assert sent.count() == 3 and {m.hops for m in sent} == {1}


LATER_TOOL = """
from pydantic import BaseModel
from agents.sdk import tool

SCRIPT = {script!r}


class Input(BaseModel):
    pass


def later(ctx):  # a handler that sets a prompt reminder of its own, then stops
    ctx.host.reminders.create(delay="5m", prompt=SCRIPT)
    return "stop"


@tool(description="Set a run-form reminder.", effect="write")
def later_on(input: Input, ctx) -> dict:
    return {{"reminderId": ctx.host.reminders.create(delay="5m", run=later).id}}
"""


@transactional
def test_a_reminder_a_handler_sets_for_an_agents_turn_carries_its_root(alice, sync_turns, settings, tmp_path):
    """A tool of pong's, run in a turn ping's message started, sets a run-form reminder; its handler
    sets a prompt reminder: that one, too, counts on the person's budget when it fires."""
    settings.AGENTSITE_AGENT_TURN_BUDGET = 3
    deploy_agent_folder(write_agent(tmp_path / "ping", {}, extra=", peers=['pong']"), slug="ping")
    deploy_agent_folder(write_agent(tmp_path / "pong", {"agent/tools/later_on.py": LATER_TOOL.format(
        script=sends(3, "ping"))}, extra=", peers=['ping']"), slug="pong")
    started, _ = open_session(alice, "ping", call("send_message", to="pong", text=call("later_on")))
    person_turn = Turn.objects.get(session_id=started, trigger=Turn.Trigger.USER)
    run_form = Reminder.objects.get()
    assert run_form.is_run_form and run_form.created_by["origin"]["root"] == person_turn.id
    run_form.refresh_from_db()
    assert fire_reminder_now(run_form)
    prompt_form = Reminder.objects.get(status=Reminder.Status.ARMED)
    assert prompt_form.created_by == {"origin": run_form.created_by["origin"]}
    assert outcomes(fire(prompt_form)) == ["delivered", "delivered", REFUSED]


RELAY_CHANNEL = '''\
from agents.sdk import Channel

SCRIPT = {script!r}


def relay(event, channel, ctx):
    if event["data"].get("source") == "agent":  # another agent's message arrived: start a turn of our own
        ctx.send(SCRIPT)


channel = Channel(events={{"message.received": relay}})
'''


@transactional
def test_a_channel_relaying_an_agents_turn_does_not_hand_it_a_fresh_budget(sync_turns, settings, tmp_path):
    """ping's channel answers every message from another agent by starting a turn of its own (trigger
    `channel`): that turn goes on counting on the budget of the message that started the exchange."""
    settings.AGENTSITE_AGENT_TURN_BUDGET = 4
    deploy_agent_folder(write_agent(tmp_path / "ping", {"agent/channels/relay.py": RELAY_CHANNEL.format(
        script=sends(4, "pong"))}, extra=", peers=['pong']"), slug="ping")
    deploy_agent_folder(write_agent(tmp_path / "pong", {}, extra=", peers=['ping']"), slug="pong")
    ping = Agent.objects.get(slug="ping")
    asked = ChannelContext(agent=ping, channel_id="relay", principal=Principal("bearer", "alice")).send(
        call("send_message", to="pong", text=call("send_message", to="ping", text="go")))
    first = Turn.objects.get(pk=asked.turn_id)
    answered = Turn.objects.get(session__agent=ping, trigger=Turn.Trigger.AGENT)
    relayed = Turn.objects.exclude(pk=first.pk).get(trigger=Turn.Trigger.CHANNEL)
    assert relayed.origin == {"turnId": answered.id, "root": first.id, "hops": 2}
    assert outcomes(relayed) == ["delivered", "delivered", REFUSED, REFUSED]
    assert set(AgentMessage.objects.filter(kind=AgentMessage.Kind.MESSAGE).values_list("root", flat=True)) == {first.id}


REMIND_TOOL = """
from pydantic import BaseModel
from agents.sdk import tool

SCRIPT = {script!r}


class Input(BaseModel):
    session_id: str


@tool(description="Set a reminder on a session.", effect="write")
def remind_session(input: Input, ctx) -> dict:
    return {{"reminderId": ctx.host.reminders.create(session_id=input.session_id, delay="5m", prompt=SCRIPT).id}}
"""

CALLING_CHANNEL = '''\
from agents.sdk import Channel


def remind(event, channel, ctx):
    if event["data"].get("source") == "agent":
        ctx.call_tool("remind_session", {"session_id": ctx.session.id})


channel = Channel(events={"message.received": remind})
'''


@transactional
def test_a_tool_a_channel_calls_for_an_agents_turn_passes_its_root_on(sync_turns, settings, tmp_path):
    """ping's channel answers another agent's message with a direct tool call that sets a reminder
    (without a session, and then bound to one): the reminder counts on the exchange's budget."""
    settings.AGENTSITE_AGENT_TURN_BUDGET = 4
    deploy_agent_folder(write_agent(tmp_path / "ping", {
        "agent/channels/relay.py": CALLING_CHANNEL,
        "agent/tools/remind_session.py": REMIND_TOOL.format(script=sends(4, "pong"))}, extra=", peers=['pong']"),
        slug="ping")
    deploy_agent_folder(write_agent(tmp_path / "pong", {}, extra=", peers=['ping']"), slug="pong")
    channel = ChannelContext(agent=Agent.objects.get(slug="ping"), channel_id="relay",
                             principal=Principal("bearer", "alice"))
    asked = channel.send(call("send_message", to="pong", text=call("send_message", to="ping", text="go")))
    first = Turn.objects.get(pk=asked.turn_id)
    answered = Turn.objects.get(session_id=asked.session_id, trigger=Turn.Trigger.AGENT)
    reminder = Reminder.objects.get()
    assert reminder.created_by == {"origin": {"turnId": answered.id, "root": first.id, "hops": 2}}
    assert outcomes(fire(reminder)) == ["delivered", "delivered", REFUSED, REFUSED]

    # Bound to the (now idle) session, the call is a turn of its own (trigger `tool`) carrying the root.
    channel.origin = {"turnId": answered.id, "root": first.id, "hops": 2}
    channel.call_tool("remind_session", {"session_id": asked.session_id}, session_id=asked.session_id)
    tool_turn = Turn.objects.get(trigger=Turn.Trigger.TOOL)
    assert tool_turn.origin == channel.origin
    bound = Reminder.objects.get(status=Reminder.Status.ARMED)
    assert bound.created_by == {"origin": {"turnId": tool_turn.id, "root": first.id, "hops": 2}}
    assert outcomes(fire(bound)) == [REFUSED] * 4
