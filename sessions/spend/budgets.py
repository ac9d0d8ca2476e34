"""The budgets a turn is under: its person's (their own, else the server's) and its agent's,
each daily and monthly (UTC), in US dollars, against what the ledger says was spent."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone as dt_timezone
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.utils import timezone

from sessions.models import PersonBudget, Spend
from sessions.models.spend import utc_day

WARN_AT = Decimal("0.8")  # budget.warning once spending crosses this share of a budget


@dataclass(frozen=True)
class Budget:
    scope: str  # "principal" or "agent"
    window: str  # "daily" or "monthly"
    usd: Decimal

    def start(self, today: date) -> date:
        return today if self.window == "daily" else today.replace(day=1)

    def ends_at(self, now: datetime) -> datetime:
        """When this window's spending starts again from zero."""
        today = utc_day(now)
        if self.window == "daily":
            following = today + timedelta(days=1)
        else:
            following = (today.replace(day=28) + timedelta(days=4)).replace(day=1)
        return datetime.combine(following, time.min, tzinfo=dt_timezone.utc)

    def describe(self) -> dict[str, Any]:
        return {"scope": self.scope, "window": self.window, "budgetUsd": float(self.usd)}


@dataclass(frozen=True)
class Payer:
    """Whose spending a turn adds to: a person (principal and authenticator) on an agent."""
    principal_id: str
    authenticator: str
    agent_id: int
    budgets: tuple[Budget, ...]

    def spent(self, budget: Budget, now: datetime) -> Decimal:
        rows = Spend.objects.since(budget.start(utc_day(now)))
        if budget.scope == "agent":
            return rows.filter(agent_id=self.agent_id).dollars()
        return rows.filter(principal_id=self.principal_id, authenticator=self.authenticator).dollars()

    def over(self, now: datetime | None = None) -> tuple[Budget, Decimal] | None:
        """The first budget already spent, and what was spent of it; None while every one has room."""
        over, _ = self.standing(now)
        return over

    def standing(self, now: datetime | None = None) -> tuple[tuple[Budget, Decimal] | None, Decimal | None]:
        """(`over`'s answer, what is left of the tightest budget while none is spent: None without budgets)."""
        now = now or timezone.now()
        room = None
        for budget in self.budgets:
            if (spent := self.spent(budget, now)) >= budget.usd:
                return (budget, spent), Decimal(0)
            room = budget.usd - spent if room is None else min(room, budget.usd - spent)
        return None, room


def payer(principal_id: str, authenticator: str, agent_id: int, agent_budget: dict[str, Any] | None) -> Payer:
    return Payer(principal_id, authenticator, agent_id,
                 (*_person_budgets(principal_id, authenticator), *_agent_budgets(agent_budget)))


def payer_of(session, deployment=None) -> Payer:
    """The payer of `session`'s turns, under its release's (or `deployment`'s) agent budget."""
    manifest = (deployment or session.deployment).manifest
    return payer(session.principal_id, session.authenticator, session.agent_id, manifest.get("budget"))


def _person_budgets(principal_id: str, authenticator: str) -> list[Budget]:
    daily, monthly = settings.AGENTSITE_BUDGET_PRINCIPAL_DAILY, settings.AGENTSITE_BUDGET_PRINCIPAL_MONTHLY
    if authenticator == "django":  # a person with an account: an operator may have set their own
        own = PersonBudget.objects.filter(user__username=principal_id).values_list("daily_usd", "monthly_usd").first()
        if own is not None:
            daily, monthly = own[0] if own[0] is not None else daily, own[1] if own[1] is not None else monthly
    return [Budget("principal", window, usd) for window, usd in (("daily", daily), ("monthly", monthly))
            if usd is not None]


def _agent_budgets(declared: dict[str, Any] | None) -> list[Budget]:
    return [Budget("agent", window, Decimal(str(amount))) for window, amount in (declared or {}).items()]
