"""What model calls cost: the public table, an operator's override from its date, a free
offline model and an unknown one (null, never 0), per call, per turn and per session."""
from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agents.pricing import overrides, prices
from agents.pricing.model import ModelPrice
from sessions.models import Event, Session
from sessions.turn.usage import add_usage
from tests.providers.loopback import Reply, oa_text, oa_tool_calls
from tests.sessions.test_metrics import scraped, total

USAGE = {"inputTokens": 1000, "outputTokens": 200, "cacheReadTokens": 4000, "cacheWriteTokens": 0}


def steps(session_id: str) -> list:
    return [e.data["usage"] for e in Event.objects.filter(session_id=session_id, type="step.completed").order_by("index")]


@pytest.mark.django_db
def test_the_table_prices_public_models_and_knows_nothing_of_others():
    now = timezone.now()
    assert prices.cost("openai:gpt-4o", USAGE, now) == prices.Price(Decimal("0.0095"), "table")  # 2.5 + 2 + 5 (cached)
    assert prices.cost("openai:my-own-model", USAGE, now) == prices.UNKNOWN
    assert prices.cost("scripted:echo", USAGE, now) == prices.Price(Decimal(0), "free")
    # Another public provider reached through the OpenAI protocol is priced as that provider, not as OpenAI.
    groq = prices.cost("openai:llama-3.3-70b-versatile", USAGE, now, base_url="https://api.groq.com/openai/v1")
    assert groq.source == "table" and groq.usd != prices.cost("openai:llama-3.3-70b-versatile", USAGE, now).usd
    # A loopback or self-hosted server is priced by the protocol's provider when it serves a public model's name.
    assert prices.cost("openai:gpt-4o", USAGE, now, base_url="http://127.0.0.1:9/v1").usd == Decimal("0.0095")


@pytest.mark.django_db
def test_an_override_wins_from_its_date_and_an_empty_cache_price_is_the_input_price():
    now = timezone.now()
    ModelPrice.objects.create(model="openai:gpt-4o", input_per_mtok=1, output_per_mtok=2,
                              effective_from=now - timedelta(days=30))
    ModelPrice.objects.create(model="openai:gpt-4o", input_per_mtok=10, output_per_mtok=20, cache_read_per_mtok=0,
                              effective_from=now + timedelta(days=1))
    assert prices.cost("openai:gpt-4o", USAGE, now) == prices.Price(Decimal("0.0054"), "override")  # 1 + 0.4 + 4
    assert prices.cost("openai:gpt-4o", USAGE, now + timedelta(days=2)).usd == Decimal("0.014")  # 10 + 4 + 0
    # Before the first row took effect, the table's price.
    assert prices.cost("openai:gpt-4o", USAGE, now - timedelta(days=31)).source == "table"


@pytest.mark.django_db
def test_a_price_saved_in_another_process_is_read_within_the_freshness_window(monkeypatch):
    now = timezone.now()
    assert prices.cost("openai:house-model", USAGE, now) == prices.UNKNOWN
    # A row written without this process's signal (as another process's admin would write it).
    ModelPrice.objects.bulk_create([ModelPrice(model="openai:house-model", input_per_mtok=1, output_per_mtok=1,
                                               effective_from=now - timedelta(minutes=1))])
    assert prices.cost("openai:house-model", USAGE, now) == prices.UNKNOWN  # still within the window
    monkeypatch.setattr(overrides, "FRESH_SECONDS", 0.0)
    assert prices.cost("openai:house-model", USAGE, now).usd == Decimal("0.0052")


def test_totals_sum_known_costs_and_count_unpriced_calls():
    priced = {**USAGE, "costUsd": 0.5}
    unpriced = {**USAGE, "costUsd": None, "unpricedCalls": 1}
    assert add_usage(priced, priced)["costUsd"] == 1.0
    both = add_usage(priced, unpriced)
    assert (both["costUsd"], both["unpricedCalls"]) == (0.5, 1)
    none = add_usage(unpriced, unpriced)
    assert (none["costUsd"], none["unpricedCalls"]) == (None, 2)
    assert add_usage({}, priced)["costUsd"] == 0.5
    assert add_usage(priced, None) is None  # unknown tokens: the total is unknown, its cost too


@pytest.mark.django_db(transaction=True)
def test_each_call_turn_and_session_carries_its_cost(local, agent_on_model, openai_server, sync_turns):
    ModelPrice.objects.create(model="openai:gpt-test", input_per_mtok=2, output_per_mtok=8, cache_read_per_mtok=1,
                              effective_from=timezone.now() - timedelta(hours=1))
    agent_on_model("openai:gpt-test", tools=None)
    openai_server.replies.extend([
        Reply(events=oa_tool_calls([("call_1", "lookup_order", {"order_id": "A100"})], prompt=1000, completion=50)),
        Reply(events=oa_text("It has shipped.", prompt=1500, completion=20)),
        Reply(events=oa_text("Anything else?", prompt=1600, completion=10)),
    ])
    created = local.post("/remote/v1/session", {"message": "where is A100?"}, content_type="application/json")
    session_id, token = created.json()["sessionId"], created.json()["continuationToken"]
    first, second = steps(session_id)
    assert first["costUsd"] == pytest.approx((1000 * 2 + 50 * 8) / 1e6)
    assert second["costUsd"] == pytest.approx((1500 * 2 + 20 * 8) / 1e6)
    completed = Event.objects.get(session_id=session_id, type="turn.completed").data["usage"]
    assert completed["costUsd"] == pytest.approx((2500 * 2 + 70 * 8) / 1e6) and "unpricedCalls" not in completed

    response = local.post(f"/remote/v1/session/{session_id}/message", {"message": "thanks", "continuationToken": token},
                          content_type="application/json")
    assert response.status_code in (200, 201, 202), response.content
    total = Session.objects.get(pk=session_id).usage
    assert total["costUsd"] == pytest.approx((4100 * 2 + 80 * 8) / 1e6)
    detail = local.get(f"/remote/v1/session/{session_id}").json()
    assert detail["usage"]["costUsd"] == pytest.approx(total["costUsd"])


@pytest.mark.django_db(transaction=True)
def test_metrics_count_dollars_by_agent_and_model_and_unpriced_calls_apart(local, agent_on_model, openai_server,
                                                                          sync_turns):
    ModelPrice.objects.create(model="openai:gpt-test", input_per_mtok=2, output_per_mtok=8,
                              effective_from=timezone.now() - timedelta(hours=1))
    agent_on_model("openai:gpt-test")
    agent_on_model("openai:gpt-unknown", slug="unpriced")
    before = scraped(local)
    openai_server.replies.extend([Reply(events=oa_text("one", prompt=1000, completion=100)),
                                  Reply(events=oa_text("two", prompt=1000, completion=100))])
    for slug in ("remote", "unpriced"):
        assert local.post(f"/{slug}/v1/session", {"message": "hi"}, content_type="application/json").status_code == 201
    after = scraped(local)

    def grew(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert grew("agentsite_cost_usd_total", agent="remote", model="openai:gpt-test") == pytest.approx(0.0028)
    assert grew("agentsite_unpriced_calls_total", agent="remote") == 0
    assert grew("agentsite_unpriced_calls_total", agent="unpriced", model="openai:gpt-unknown") == 1
    assert grew("agentsite_cost_usd_total", agent="unpriced") == 0
