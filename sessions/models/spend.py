"""What model calls cost, kept per UTC day, person, agent and model (the ledger budgets, the
dashboard and `manage.py usage` read), and the budgets operators set for one person."""
from __future__ import annotations

from collections import Counter
from datetime import date, datetime, timezone as dt_timezone
from decimal import Decimal
from typing import Any, Iterable

from django.conf import settings
from django.db import models
from django.db.models import Sum
from django.utils import timezone

from sessions.sql.rows import add_or_insert

TOKEN_FIELDS = {"inputTokens": "input_tokens", "outputTokens": "output_tokens",
                "cacheReadTokens": "cache_read_tokens", "cacheWriteTokens": "cache_write_tokens"}


class SpendQuerySet(models.QuerySet):
    def since(self, day: date) -> "SpendQuerySet":
        return self.filter(day__gte=day)

    def dollars(self) -> Decimal:
        return self.aggregate(total=Sum("cost_usd"))["total"] or Decimal(0)


class Spend(models.Model):
    day = models.DateField()
    principal_id = models.CharField(max_length=200)
    authenticator = models.CharField(max_length=64)
    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="+")
    model = models.CharField(max_length=200)
    cost_usd = models.DecimalField(max_digits=20, decimal_places=10, default=Decimal(0))
    # Calls whose model had no known price: they add no dollars, and are counted here instead.
    unpriced_calls = models.PositiveIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    cache_read_tokens = models.BigIntegerField(default=0)
    cache_write_tokens = models.BigIntegerField(default=0)

    objects = SpendQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "principal_id", "authenticator", "agent", "model"],
                                               name="spend_once_per_day_owner_agent_model")]
        indexes = [models.Index(fields=["principal_id", "authenticator", "day"], name="spend_principal_day"),
                   models.Index(fields=["agent", "day"], name="spend_agent_day")]

    @classmethod
    def charge(cls, day: date, principal_id: str, authenticator: str, agent_id: int,
               calls: Iterable[tuple[str, dict[str, Any] | None]]) -> None:
        """Add model calls, as (model id, usage), to the day's rows, made if missing; in the caller's
        transaction. A usage of None (the provider reported nothing) counts as one unpriced call."""
        by_model: dict[str, Counter] = {}
        for model, usage in calls:
            by_model.setdefault(model, Counter()).update(_amounts(usage))
        for model, amounts in by_model.items():
            amounts = {field: amount for field, amount in amounts.items() if amount}
            if amounts:  # a model that answered nothing (a fall-over's first): no row for it
                add_or_insert(cls, {"day": day, "principal_id": principal_id, "authenticator": authenticator,
                                    "agent_id": agent_id, "model": model}, amounts)


def utc_day(moment: datetime | None = None) -> date:
    return (moment or timezone.now()).astimezone(dt_timezone.utc).date()


def _amounts(usage: dict[str, Any] | None) -> dict[str, Any]:
    if usage is None:
        return {"unpriced_calls": 1}
    amounts: dict[str, Any] = {field: usage.get(key, 0) for key, field in TOKEN_FIELDS.items()}
    amounts["unpriced_calls"] = usage.get("unpricedCalls", 0)
    if usage.get("costUsd") is not None:
        amounts["cost_usd"] = Decimal(str(usage["costUsd"]))
    return amounts


class PersonBudget(models.Model):
    """A person's own budget in dollars, in place of the server's AGENTSITE_BUDGET_PRINCIPAL_*."""
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="budget")
    daily_usd = models.DecimalField("daily $", max_digits=12, decimal_places=2, null=True, blank=True,
                                    help_text="empty: the server's default (AGENTSITE_BUDGET_PRINCIPAL_DAILY)")
    monthly_usd = models.DecimalField("monthly $", max_digits=12, decimal_places=2, null=True, blank=True,
                                      help_text="empty: the server's default (AGENTSITE_BUDGET_PRINCIPAL_MONTHLY)")
    updated_by = models.CharField(max_length=150, blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"budget of {self.user}"
