"""Budgets: a new turn over a spent budget is 429 with nothing queued; a running turn stops
between steps once its budget is spent; a warning at 80%; a person's own budget in place of
the server's; spending counted in the ledger whether or not a budget applies."""
from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from agents.pricing.model import ModelPrice
from sessions.models import Event, PersonBudget, Session, Spend, Turn
from sessions.models.spend import utc_day
from tests.providers.loopback import Reply, oa_text, oa_tool_calls

LOCAL = {"principal_id": "local", "authenticator": "local"}


def spent(agent, amount: str, day=None, **who) -> None:
    Spend.objects.create(day=day or utc_day(), agent=agent, model="openai:gpt-test", cost_usd=Decimal(amount),
                         **(who or LOCAL))


def price_gpt_test(per_mtok: int) -> None:
    ModelPrice.objects.create(model="openai:gpt-test", input_per_mtok=per_mtok, output_per_mtok=per_mtok,
                              effective_from=timezone.now() - timedelta(hours=1))


def seconds_to_midnight() -> float:
    now = timezone.now()
    return (now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1) - now).total_seconds()


@pytest.mark.django_db(transaction=True)
def test_a_new_session_over_a_spent_daily_budget_is_refused_with_nothing_queued(local, agent_on_model, settings,
                                                                                 openai_server, sync_turns):
    settings.AGENTSITE_BUDGET_PRINCIPAL_DAILY = Decimal("1")
    agent = agent_on_model("openai:gpt-test")
    spent(agent, "0.60")
    spent(agent, "0.40", day=utc_day() - timedelta(days=1))  # yesterday's does not count today
    spent(agent, "0.50", principal_id="bob", authenticator="local")  # nor does another person's
    openai_server.replies.append(Reply(events=oa_text("hello")))
    assert local.post("/remote/v1/session", {"message": "hi"}, content_type="application/json").status_code == 201

    Spend.objects.filter(day=utc_day(), **LOCAL).update(cost_usd=Decimal("1.00"))  # now exactly spent
    sessions_before = Session.objects.count()
    response = local.post("/remote/v1/session", {"message": "hi"}, content_type="application/json")
    assert response.status_code == 429, response.content
    body = response.json()
    assert body["error"]["code"] == "budget_exceeded"
    assert "daily budget of $1" in body["error"]["message"]
    details = body["error"]["details"]
    assert (details["scope"], details["window"], details["budgetUsd"]) == ("principal", "daily", 1.0)
    assert details["spentUsd"] == pytest.approx(1.0)
    assert abs(int(response["Retry-After"]) - seconds_to_midnight()) < 5
    assert Session.objects.count() == sessions_before and not Turn.objects.filter(status=Turn.Status.QUEUED).exists()


@pytest.mark.django_db(transaction=True)
def test_a_follow_up_over_a_spent_monthly_budget_is_refused(local, agent_on_model, openai_server, settings, sync_turns):
    agent = agent_on_model("openai:gpt-test")
    openai_server.replies.append(Reply(events=oa_text("hello")))
    created = local.post("/remote/v1/session", {"message": "hi"}, content_type="application/json").json()
    settings.AGENTSITE_BUDGET_PRINCIPAL_MONTHLY = Decimal("5")
    spent(agent, "5", day=utc_day().replace(day=1))
    response = local.post(f"/remote/v1/session/{created['sessionId']}/message",
                          {"message": "more", "continuationToken": created["continuationToken"]},
                          content_type="application/json")
    assert response.status_code == 429, response.content
    assert response.json()["error"]["details"]["window"] == "monthly"
    assert Turn.objects.filter(session_id=created["sessionId"]).count() == 1


@pytest.mark.django_db(transaction=True)
def test_an_agents_budget_counts_everyone_and_a_persons_own_replaces_the_servers(local, agent_on_model, settings,
                                                                                 openai_server, sync_turns):
    agent = agent_on_model("openai:gpt-test", budget={"daily": 2})
    spent(agent, "2", principal_id="someone-else", authenticator="django")
    response = local.post("/remote/v1/session", {"message": "hi"}, content_type="application/json")
    assert response.status_code == 429 and response.json()["error"]["details"]["scope"] == "agent"

    settings.AGENTSITE_BUDGET_PRINCIPAL_DAILY = Decimal("1")
    other = agent_on_model("openai:gpt-test", slug="other")
    pat = User.objects.create_user("pat", password="pw-pat-1234")
    spent(other, "1.5", principal_id="pat", authenticator="django")
    local.force_login(pat)
    assert local.post("/other/v1/session", {"message": "hi"}, content_type="application/json").status_code == 429
    PersonBudget.objects.create(user=pat, daily_usd=Decimal("10"))
    openai_server.replies.append(Reply(events=oa_text("hello")))
    assert local.post("/other/v1/session", {"message": "hi"}, content_type="application/json").status_code == 201


@pytest.mark.django_db(transaction=True)
def test_a_running_turn_warns_at_80_percent_and_stops_between_steps_once_spent(local, agent_on_model, openai_server,
                                                                               settings, sync_turns):
    price_gpt_test(1000)  # $0.001 a token
    agent_on_model("openai:gpt-test", tools=None, budget={"daily": 1})
    openai_server.replies.extend([
        Reply(events=oa_tool_calls([("call_1", "lookup_order", {"order_id": "A100"})], prompt=1000, completion=10)),
        Reply(events=oa_text("never asked for")),
    ])
    response = local.post("/remote/v1/session", {"message": "where is A100?"}, content_type="application/json")
    session_id = response.json()["sessionId"]
    events = [(e.type, e.data) for e in Event.objects.filter(session_id=session_id).order_by("index")]
    types = [t for t, _ in events]
    [warning] = [d for t, d in events if t == "budget.warning"]
    assert (warning["scope"], warning["window"], warning["budgetUsd"], warning["spentUsd"]) == (
        "agent", "daily", 1.0, pytest.approx(1.01))
    # The first call's tools ran to their end; the next call was never made.
    assert "turn.failed" in types, " ".join(types)
    assert types.index("budget.warning") < types.index("action.result") < types.index("turn.failed")
    assert len(openai_server.requests) == 1
    [failed] = [d for t, d in events if t == "turn.failed"]
    assert failed["code"] == "budget_exceeded" and "agent's daily budget of $1" in failed["error"]
    assert failed["usage"]["costUsd"] == pytest.approx(1.01)
    assert Spend.objects.get().cost_usd == Decimal("1.01")  # charged as it ended, and not again at the settle


@pytest.mark.django_db(transaction=True)
def test_without_a_budget_the_turns_spending_is_counted_when_it_settles(local, agent_on_model, openai_server,
                                                                        sync_turns):
    price_gpt_test(2)
    agent = agent_on_model("openai:gpt-test", tools=None)
    openai_server.replies.extend([
        Reply(events=oa_tool_calls([("call_1", "lookup_order", {"order_id": "A100"})], prompt=1000, completion=50)),
        Reply(events=oa_text("It has shipped.", prompt=1500, completion=20)),
    ])
    assert local.post("/remote/v1/session", {"message": "where?"}, content_type="application/json").status_code == 201
    row = Spend.objects.get()
    assert (row.agent_id, row.principal_id, row.authenticator, row.model, row.day) == (
        agent.pk, "local", "local", "openai:gpt-test", utc_day())
    assert (row.input_tokens, row.output_tokens, row.unpriced_calls) == (2500, 70, 0)
    assert row.cost_usd == Decimal("0.00514")
