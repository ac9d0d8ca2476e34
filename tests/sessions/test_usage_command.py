"""`manage.py usage`: the ledger's spending by agent, person or model, as a table and as JSON."""
from __future__ import annotations

import io
import json
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.management import CommandError, call_command

from agents.models import Agent
from sessions.models import Spend
from sessions.models.spend import utc_day


@pytest.fixture
def ledger(db):
    support, sales = Agent.objects.create(slug="support"), Agent.objects.create(slug="sales")
    today = utc_day()
    rows = [(today, "pat", support, "openai:gpt-4o", "1.50", 0, 1000), (today, "ann", support, "openai:gpt-4o", "0.25", 0, 200),
            (today, "pat", sales, "anthropic:claude-sonnet-4-5", "3.00", 0, 3000), (today, "pat", sales, "openai:house", "0", 4, 50),
            (today - timedelta(days=40), "pat", support, "openai:gpt-4o", "99", 0, 9)]
    for day, who, agent, model, cost, unpriced, tokens in rows:
        Spend.objects.create(day=day, principal_id=who, authenticator="django", agent=agent, model=model,
                             cost_usd=Decimal(cost), unpriced_calls=unpriced, input_tokens=tokens, output_tokens=1)
    return today


def usage(*args: str) -> str:
    out = io.StringIO()
    call_command("usage", *args, stdout=out)
    return out.getvalue()


def test_json_by_agent_from_a_day_sums_each_agent_most_expensive_first(ledger):
    found = json.loads(usage("--json", "--since", (ledger - timedelta(days=1)).isoformat()))
    assert [(r["key"], r["costUsd"], r["unpricedCalls"]) for r in found["rows"]] == [("sales", 3.0, 4),
                                                                                      ("support", 1.75, 0)]
    assert found["total"]["costUsd"] == 4.75 and found["total"]["tokens"]["input"] == 4250
    assert found["by"] == "agent"


@pytest.mark.parametrize("by, expected", [("principal", [("pat", 4.5), ("ann", 0.25)]),
                                          ("model", [("anthropic:claude-sonnet-4-5", 3.0), ("openai:gpt-4o", 1.75),
                                                     ("openai:house", 0.0)])])
def test_json_by_person_and_by_model(ledger, by, expected):
    found = json.loads(usage("--json", "--by", by, "--since", ledger.isoformat()))
    assert [(r["key"], r["costUsd"]) for r in found["rows"]] == expected


def test_the_table_has_a_row_each_and_the_total(ledger):
    text = usage("--since", ledger.isoformat(), "--by", "model").splitlines()
    assert text[0].startswith(f"Spending since {ledger.isoformat()}")
    assert text[1].split()[:3] == ["model", "cost", "$"]
    assert text[2].split()[:3] == ["anthropic:claude-sonnet-4-5", "3.0000", "0"]
    assert text[-1].split()[:3] == ["total", "4.7500", "4"]


def test_a_day_that_does_not_parse_says_how_to_write_it(db):
    with pytest.raises(CommandError, match="YYYY-MM-DD"):
        usage("--since", "last week")
