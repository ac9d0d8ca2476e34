"""A session's handoff to another model: its review, its all-or-nothing perform, and its recovery.

The provider paths run the real `anthropic` and `openai` clients against loopback
servers speaking their protocols (tests/providers/loopback.py)."""
from __future__ import annotations

import json
import subprocess

import pytest
from django.db import transaction
from django.utils import timezone

from sessions.turn import lifecycle
from sessions.turn.admission import AdmissionError
from sessions.eventlog.events import read_events
from sessions.handoff import materialize, perform, review
from sessions.models import Handoff, Session, Turn
from sessions.plumbing.processes import host_id
from sessions.turn.recovery import sweep
from tests.providers.loopback import Reply, an_text, oa_text
from tests.sessions.handoff_support import (  # noqa: F401  (both_servers: a fixture)
    ANTHROPIC, OPENAI, both_servers, deploy_on_models, open_session, thinking_session_on)

transactional = pytest.mark.django_db(transaction=True)
FAILING = Reply(500, headers={"retry-after": "0.01"}, body={"error": {"message": "boom", "type": "server_error"}})


def follow_up(client, session: Session, token: str, message: str) -> str:
    sent = client.post(f"/{session.agent.slug}/v1/session/{session.id}/message",
                       {"message": message, "continuationToken": token}, content_type="application/json")
    assert sent.status_code == 202, sent.content
    return sent.json()["continuationToken"]


def fresh(session: Session) -> Session:
    return Session.objects.select_related("agent", "deployment").get(pk=session.pk)


def handoff_events(session: Session) -> list[dict]:
    return [e["data"] for e in read_events(session.id) if e["type"] == "session.handoff"]


@pytest.fixture
def thinking_session(local, sync_turns, tmp_path, both_servers):
    """A session bound to Anthropic whose conversation holds a signed thinking block and a tool call."""
    return thinking_session_on(local, tmp_path, both_servers[0], [ANTHROPIC, OPENAI])


@transactional
def test_the_review_lists_the_thinking_blocks_a_move_to_openai_drops(thinking_session):
    session, _ = thinking_session
    assert session.model == ANTHROPIC
    reviewed = review(session, OPENAI)
    assert reviewed["from"] == ANTHROPIC and reviewed["to"] == OPENAI
    assert reviewed["configured"] is True and reviewed["refusal"] is None
    assert reviewed["carriesOver"] == {"messages": 4, "userMessages": 1, "assistantMessages": 2, "toolCalls": 1,
                                       "toolResults": 1, "workspace": {"kind": "local", "carried": True}}
    lost = {item["kind"]: item for item in reviewed["lost"]}
    assert set(lost) == {"thinking", "cache"}
    assert lost["thinking"]["count"] == 1 and "signature" in lost["thinking"]["detail"]
    assert reviewed["transformed"] == []  # toolu_a is an id OpenAI takes as it is
    assert reviewed["atIndex"] == session.next_event_index
    assert len(reviewed["reviewId"]) == 64
    assert review(session, OPENAI)["reviewId"] == reviewed["reviewId"]  # the same state, the same id
    assert Handoff.objects.count() == 0  # nothing changed


@transactional
def test_a_review_made_where_the_target_has_no_key_still_names_the_same_state(thinking_session, monkeypatch):
    """Web hosts may differ in credentials: whether the target is configured does not make a review stale."""
    session, _ = thinking_session
    here = review(session, OPENAI)
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL")
    elsewhere = review(session, OPENAI)
    assert (here["configured"], elsewhere["configured"]) == (True, False)
    assert elsewhere["refusal"]["code"] == "no_credential"
    assert elsewhere["reviewId"] == here["reviewId"]


@transactional
def test_the_review_asks_the_provider_which_key_it_reads(local, sync_turns, tmp_path, both_servers, monkeypatch):
    """An agent naming its own key variable: the review is configured by that one, and says to set it."""
    anthropic, _ = both_servers
    anthropic.replies.append(Reply(events=an_text("Hello.")))
    deploy_on_models(tmp_path, [ANTHROPIC, "anthropic:claude-other"], {"api_key_env": "DUO_ANTHROPIC_KEY"})
    session, _ = open_session(local, "duo", "hello")  # the loopback server takes any key

    unset = review(session, "anthropic:claude-other")  # ANTHROPIC_API_KEY is set, but not the one it reads
    monkeypatch.setenv("DUO_ANTHROPIC_KEY", "sk-duo")
    ready = review(session, "anthropic:claude-other")

    assert (unset["configured"], unset["refusal"]["code"]) == (False, "no_credential")
    assert "set DUO_ANTHROPIC_KEY " in unset["refusal"]["message"]
    assert (ready["configured"], ready["refusal"]) == (True, None)


@transactional
def test_a_target_failing_its_confirm_leaves_the_session_on_its_source(local, thinking_session, both_servers):
    session, token = thinking_session
    anthropic, openai = both_servers
    before = list(session.conversation)
    openai.replies.append(FAILING)
    with pytest.raises(AdmissionError) as refused:
        perform(session, OPENAI, review(session, OPENAI)["reviewId"])
    assert (refused.value.status, refused.value.code) == (502, "handoff_failed")
    assert len(openai.requests) == 1  # one try: the session is locked while the target is asked

    after = fresh(session)
    assert after.model == ANTHROPIC and after.conversation == before and after.active_turn_id is None
    row = Handoff.objects.get(session=session)
    assert (row.status, row.code) == ("failed", "server_error") and row.ended_at is not None
    assert refused.value.details == {"handoffId": row.id, "cause": "server_error"}
    [event] = handoff_events(session)
    assert event["status"] == "failed" and event["from"] == ANTHROPIC and "500" in event["error"]

    anthropic.replies.append(Reply(events=an_text("Still here.")))
    follow_up(local, session, token, "and A101?")
    assert len(anthropic.requests) == 3 and len(openai.requests) == 1
    assert fresh(session).conversation[-1] == {"role": "assistant", "content": "Still here."}


@transactional
def test_after_a_handoff_the_next_turn_sends_openai_the_whole_history_in_its_format(local, thinking_session,
                                                                                     both_servers):
    session, token = thinking_session
    anthropic, openai = both_servers
    openai.replies.extend([Reply(events=oa_text("OK")), Reply(events=oa_text("A101 ships tomorrow."))])
    reviewed = review(session, OPENAI)
    row = perform(session, OPENAI, reviewed["reviewId"])
    assert row.status == "completed"

    after = fresh(session)
    assert after.model == OPENAI and after.active_turn_id is None
    assert not any("reasoning" in m or "reasoningSignature" in m for m in after.conversation)
    [event] = handoff_events(session)
    assert event["status"] == "completed" and event["handoffId"] == row.id
    assert event["review"]["reviewId"] == reviewed["reviewId"]
    confirm = openai.requests[0]["body"]
    assert confirm["max_tokens"] == 1 and confirm["messages"][-1]["role"] == "user"

    follow_up(local, session, token, "and A101?")
    sent = openai.requests[-1]["body"]
    assert sent["model"] == "gpt-test" and len(anthropic.requests) == 2
    history = sent["messages"][1:]  # after the system prompt
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant", "user"]
    assert history[0] == {"role": "user", "content": "where is A100?"}
    assert history[1]["tool_calls"] == [{"id": "toolu_a", "type": "function", "function": {
        "name": "lookup_order", "arguments": json.dumps({"order_id": "A100"})}}]
    assert history[2]["tool_call_id"] == "toolu_a"
    assert history[3] == {"role": "assistant", "content": "A100 is on its way."}
    assert history[4] == {"role": "user", "content": "and A101?"}
    assert fresh(session).conversation[-1]["content"] == "A101 ships tomorrow."


@pytest.fixture
def scripted_pair(local, sync_turns, tmp_path):
    deploy_on_models(tmp_path, ["scripted:echo", "scripted:other"])
    return open_session(local, "duo", '/call lookup_order {"order_id": "A100"}')


@transactional
def test_a_review_goes_stale_after_a_new_message(local, scripted_pair):
    session, token = scripted_pair
    reviewed = review(session, "scripted:other")
    follow_up(local, session, token, "again")
    with pytest.raises(AdmissionError) as refused:
        perform(fresh(session), "scripted:other", reviewed["reviewId"])
    assert (refused.value.status, refused.value.code) == (409, "review_stale")
    assert refused.value.details["reviewId"] == review(fresh(session), "scripted:other")["reviewId"]
    assert fresh(session).model == "scripted:echo" and fresh(session).active_turn_id is None
    assert Handoff.objects.count() == 0


@transactional
def test_a_handoff_waits_for_no_running_turn(local, tmp_path, settings):
    deploy_on_models(tmp_path, ["scripted:echo", "scripted:other"])
    session, _ = open_session(local, "duo", "hello")  # not run: no worker here, the turn holds the lock
    assert session.active_turn_id is not None
    with pytest.raises(AdmissionError) as refused:
        perform(session, "scripted:other", review(session, "scripted:other")["reviewId"])
    assert (refused.value.status, refused.value.code) == (409, "session_busy")
    assert fresh(session).model == "scripted:echo" and Handoff.objects.count() == 0


@transactional
def test_refusals_name_what_is_wrong_and_what_else_may_be_chosen(local, sync_turns, tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    deploy_on_models(tmp_path, ["scripted:echo", ANTHROPIC, OPENAI])
    session, _ = open_session(local, "duo", "hello")
    cases = {ANTHROPIC: (424, "no_credential"), "scripted:echo": (409, "same_model"),
             "openai:gpt-other": (400, "model_not_allowed")}
    for to, (status, code) in cases.items():
        reviewed = review(session, to)
        assert reviewed["refusal"]["code"] == code
        assert reviewed["refusal"]["alternatives"] == [OPENAI]
        with pytest.raises(AdmissionError) as refused:
            perform(session, to, reviewed["reviewId"])
        assert (refused.value.status, refused.value.code) == (status, code)
    assert review(session, ANTHROPIC)["configured"] is False
    assert refused.value.details["allowed"] == ["scripted:echo", ANTHROPIC, OPENAI]
    assert fresh(session).model == "scripted:echo" and Handoff.objects.count() == 0


def test_tool_call_ids_the_target_refuses_are_remapped_in_the_call_and_its_result():
    kimi_style = "functions.lookup_order:0"
    conversation = [
        {"role": "user", "content": "A100?"},
        {"role": "assistant", "content": "", "reasoning": "hmm", "toolCalls": [
            {"id": kimi_style, "name": "lookup_order", "input": {"order_id": "A100"}}]},
        {"role": "tool", "callId": kimi_style, "name": "lookup_order", "content": "shipped", "isError": False},
    ]
    made = materialize(conversation, OPENAI, ANTHROPIC)
    new_id = made[1]["toolCalls"][0]["id"]
    assert new_id != kimi_style and made[2]["callId"] == new_id and new_id.replace("_", "").isalnum()
    assert "reasoning" not in made[1] and conversation[1]["reasoning"] == "hmm"  # the input is not changed
    assert materialize(conversation, OPENAI, "scripted:echo")[2]["callId"] == kimi_style


def test_an_assistant_message_of_thinking_alone_is_not_carried():
    conversation = [{"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "", "reasoning": "hmm", "reasoningSignature": "sig"},
                    {"role": "user", "content": "well?"}]
    assert materialize(conversation, ANTHROPIC, OPENAI) == [conversation[0], conversation[2]]


@transactional
def test_a_pending_handoff_whose_process_died_is_failed_by_recovery(scripted_pair):
    session, _ = scripted_pair
    before = list(fresh(session).conversation)
    child = subprocess.Popen(["true"])
    child.wait()
    turn = Turn(session=session, trigger=Turn.Trigger.HANDOFF, status=Turn.Status.RUNNING,
                claimed_by=f"{host_id()}:{child.pid}", started_at=timezone.now())
    with transaction.atomic():  # as perform writes it: the lock, its turn and the pending record at once
        assert lifecycle.lock_for_call(session, turn, parks=False)
        row = Handoff.objects.create(session=session, turn=turn, from_model="scripted:echo", to_model="scripted:other",
                                     review_id="0" * 64, review={})

    assert sweep() == 1
    row.refresh_from_db()
    assert (row.status, row.code) == ("failed", "worker_lost")
    after = fresh(session)
    assert after.model == "scripted:echo" and after.conversation == before and after.active_turn_id is None
    [event] = handoff_events(session)
    assert event["status"] == "failed" and event["code"] == "worker_lost"
