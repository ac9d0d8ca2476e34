"""A turn's model calls on their way to the ledger.

Without a budget, the calls wait in the meter and the turn's settle charges them in
its own transaction: no write of their own. Under a budget, each call is charged as
it ends, in a transaction that serialises it with every other charge against the same
budgets (SQLite's write lock; on PostgreSQL an advisory lock per budget), and reads
what was spent before it. A call that ends after its budget was already spent (by
another turn's call, say) is still charged (it was made) but its turn goes no further:
of two turns racing for the last of a budget, exactly one carries on. Before each call
a turn whose budget is spent stops too. Either stop happens between steps, never
while a tool runs.
"""
from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any, Callable

from django.db import transaction
from django.utils import timezone

from agents.providers.base import ProviderError
from sessions.models import Spend
from sessions.models.spend import utc_day
from sessions.plumbing.pglocks import lock_for_transaction
from sessions.spend.budgets import WARN_AT, Budget, Payer

Call = tuple[str, "dict[str, Any] | None"]


class BudgetExceeded(ProviderError):
    """The turn's budget is spent: it fails with code `budget_exceeded` (the engine ends it as any
    provider error), its message naming the budget and when it refills."""

    def __init__(self, budget: Budget, spent: Decimal):
        ends = budget.ends_at(timezone.now())
        super().__init__(f"the {budget.scope}'s {budget.window} budget of ${budget.usd} is spent "
                         f"(${spent.quantize(Decimal('0.0001'))}); it refills at {ends.isoformat()}",
                         code="budget_exceeded")
        self.budget, self.spent = budget, spent


class Meter:
    def __init__(self, payer: Payer | None = None, waiting: list[Call] | None = None,
                 warn: Callable[[dict[str, Any]], None] | None = None):
        """`payer`: under a budget, whose; `waiting`: calls a parked turn had not charged;
        `warn`: told (with the budget, its window's spending and end) once a charge crosses 80% of one."""
        self.payer = payer if payer is not None and payer.budgets else None
        self.waiting: list[Call] = list(waiting or [])
        self.warn = warn
        self._lock = threading.Lock()  # a subagent's calls come from tool threads

    def before_call(self) -> Decimal | None:
        """Stop the turn if a budget of its is spent; what is left of the tightest (None: no budget)."""
        if self.payer is None:
            return None
        over, room = self.payer.standing()
        if over is not None:
            raise BudgetExceeded(*over)
        return room

    def called(self, model_id: str, usage: dict[str, Any] | None) -> None:
        if self.payer is None:
            with self._lock:
                self.waiting.append((model_id, usage))
            return
        before, after = self._charge(model_id, usage)
        for budget in self.payer.budgets:
            if before[budget] >= budget.usd:
                raise BudgetExceeded(budget, after[budget])
        for budget in self.payer.budgets:
            if before[budget] < budget.usd * WARN_AT <= after[budget] and self.warn is not None:
                self.warn({**budget.describe(), "spentUsd": float(after[budget]),
                           "refillsAt": budget.ends_at(timezone.now()).isoformat()})

    def take(self) -> list[Call]:
        """The calls not charged yet (for the turn's settle, or a parked turn's state)."""
        with self._lock:
            taken, self.waiting = self.waiting, []
        return taken

    def _charge(self, model_id: str, usage: dict[str, Any] | None) -> tuple[dict, dict]:
        payer, now = self.payer, timezone.now()
        with transaction.atomic():
            for key in sorted({budget_key(payer, budget) for budget in payer.budgets}):  # one order: no deadlock
                lock_for_transaction(key)  # PostgreSQL; SQLite's write lock already serialises charges
            Spend.charge(utc_day(now), payer.principal_id, payer.authenticator, payer.agent_id, [(model_id, usage)])
            after = {budget: payer.spent(budget, now) for budget in payer.budgets}
        cost = Decimal(str(usage["costUsd"])) if usage and usage.get("costUsd") is not None else Decimal(0)
        return {budget: spent - cost for budget, spent in after.items()}, after


def budget_key(payer: Payer, budget: Budget) -> str:
    if budget.scope == "agent":
        return f"budget:agent:{payer.agent_id}"
    return f"budget:principal:{payer.authenticator}\x1f{payer.principal_id}"
