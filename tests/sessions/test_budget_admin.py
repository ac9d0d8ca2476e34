"""A person's own budget in the admin: set by an operator with the permission, signed; the ledger is read only."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.auth.models import User

from sessions.models import PersonBudget
from tests.agents.test_secret_admin import login


@pytest.mark.django_db
def test_an_operator_sets_a_persons_budget_and_the_ledger_cannot_be_edited():
    pat = User.objects.create_user("pat")
    client = login("olga", operators=True, permissions=("add_personbudget", "view_personbudget", "view_spend"))
    response = client.post("/admin/agent_sessions/personbudget/add/",
                           {"user": pat.pk, "daily_usd": "12.50", "monthly_usd": ""})
    assert response.status_code == 302, response.content.decode()[-1500:]
    budget = PersonBudget.objects.get()
    assert (budget.user, budget.daily_usd, budget.monthly_usd, budget.updated_by) == (pat, Decimal("12.50"), None, "olga")
    assert client.get("/admin/agent_sessions/spend/").status_code == 200
    assert client.get("/admin/agent_sessions/spend/add/").status_code == 403


@pytest.mark.django_db
def test_without_the_permission_no_budget_is_set():
    pat = User.objects.create_user("pat")
    client = login("sam", operators=True)
    assert client.post("/admin/agent_sessions/personbudget/add/", {"user": pat.pk, "daily_usd": "1"}).status_code == 403
    assert not PersonBudget.objects.exists()
