"""Limits on the Claude Agent SDK's runtime: what is left of a budget is the runtime's own spending
limit, and a failed model call is made again as often as the own loop would make it."""
from __future__ import annotations

from decimal import Decimal

import pytest

from sessions.models import Event, Spend
from sessions.models.spend import utc_day
from tests.providers.conftest import start
from tests.providers.loopback import Reply, an_text, an_tool_uses

pytest.importorskip("claude_agent_sdk", reason="the optional runtime: pip install -r requirements-claude-agent.txt")

pytestmark = pytest.mark.usefixtures("no_runtime_child_kept")

MODEL = "claude-agent:claude-sonnet-4-5"


@pytest.mark.django_db(transaction=True)
def test_under_a_budget_the_runtime_stops_itself_once_what_was_left_is_spent(local, agent_on_model, anthropic_server,
                                                                            sync_turns, settings):
    settings.AGENTSITE_BUDGET_PRINCIPAL_DAILY = Decimal("1")
    agent = agent_on_model(MODEL, slug="official")
    Spend.objects.create(day=utc_day(), agent=agent, model=MODEL, cost_usd=Decimal("0.9999"),
                         principal_id="local", authenticator="local")
    # One call costs more than the $0.0001 left: the runtime goes no further than that call.
    anthropic_server.replies.extend([
        Reply(events=an_tool_uses([("toolu_1", "mcp__agent__lookup_order", {"order_id": "A100"})], 200, 20)),
        Reply(events=an_text("A100 has shipped.")),
    ])
    session_id = start(local, "official", "where is A100?")

    [failed] = Event.objects.filter(session_id=session_id, type="turn.failed")
    assert failed.data["code"] == "budget_exceeded", failed.data
    assert "daily budget of $1 is spent" in failed.data["error"]
    assert len(anthropic_server.requests) == 1
    assert Spend.objects.filter(day=utc_day(), principal_id="local").dollars() > Decimal("1")  # the call is charged
    response = local.post(f"/official/v1/session/{session_id}/message", {"message": "and now?"},
                          content_type="application/json")
    assert response.status_code == 429 and response.json()["error"]["code"] == "budget_exceeded"


@pytest.mark.django_db(transaction=True)
def test_the_runtime_makes_a_failed_call_again_as_often_as_the_own_loop_would(local, agent_on_model,
                                                                               anthropic_server, sync_turns):
    agent_on_model(MODEL, params={"max_retries": 1}, slug="official")
    anthropic_server.replies.extend([Reply(status=500, body={"type": "error", "error": {
        "type": "api_error", "message": "upstream fell over"}}) for _ in range(2)])
    anthropic_server.replies.append(Reply(events=an_text("Too late.")))

    session_id = start(local, "official", "hello?")

    [failed] = Event.objects.filter(session_id=session_id, type="turn.failed")
    assert failed.data["code"] == "server_error", failed.data
    assert len(anthropic_server.requests) == 2  # the call and its one retry


@pytest.mark.django_db(transaction=True)
def test_under_a_budget_with_room_a_follow_up_goes_to_the_kept_child_until_other_spending_moves_it(
        local, agent_on_model, anthropic_server, sync_turns, settings):
    settings.AGENTSITE_BUDGET_PRINCIPAL_DAILY = Decimal("5")
    agent = agent_on_model(MODEL, slug="official")
    anthropic_server.replies.extend(Reply(events=an_text(f"Reply {n}.", 1000, 100)) for n in range(3))
    session_id = start(local, "official", "first")
    for message in ("second", "third"):
        if message == "third":  # another session's spending: the kept child's limit no longer fits
            Spend.objects.create(day=utc_day(), agent=agent, model="anthropic:claude-sonnet-4-5",
                                 cost_usd=Decimal("0.5"), principal_id="local", authenticator="local")
        response = local.post(f"/official/v1/session/{session_id}/message", {"message": message},
                              content_type="application/json")
        assert response.status_code == 202, response.content

    ended = Event.objects.filter(session_id=session_id, type="turn.completed").order_by("index")
    assert [[s["name"] for s in e.data["timings"]["steps"] if s["kind"] == "runtime"] for e in ended] == [
        ["new"], ["kept"], ["new"]]
