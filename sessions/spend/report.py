"""Spending read back from the ledger: totals by agent, person or model (and by day), for
`manage.py usage` and the dashboard."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from django.db.models import Sum

from sessions.models import Spend

BY = {"agent": "agent__slug", "principal": "principal_id", "model": "model"}
AMOUNTS = ("cost_usd", "unpriced_calls", "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


@dataclass(frozen=True)
class Line:
    key: str
    cost_usd: Decimal
    unpriced_calls: int
    tokens: dict[str, int]

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "costUsd": float(self.cost_usd), "unpricedCalls": self.unpriced_calls,
                "tokens": self.tokens}


def spending(since: date, by: str, until: date | None = None, per_day: bool = False) -> list[tuple[date | None, Line]]:
    """(day or None, line) for each `by` value (and day, with `per_day`) from `since` to `until`
    (inclusive), the most expensive first within a day."""
    rows = Spend.objects.filter(day__gte=since)
    if until is not None:
        rows = rows.filter(day__lte=until)
    keys = [BY[by], *(["day"] if per_day else [])]
    totals = rows.values(*keys).annotate(**{f"sum_{a}": Sum(a) for a in AMOUNTS}).order_by(*keys)
    lines = [(row.get("day"), _line(row[BY[by]], row)) for row in totals]
    return sorted(lines, key=lambda dl: (dl[0] or date.min, -dl[1].cost_usd, dl[1].key))


def total(lines: list[tuple[Any, Line]]) -> Line:
    return Line("total", sum((line.cost_usd for _, line in lines), Decimal(0)),
                sum(line.unpriced_calls for _, line in lines),
                {k: sum(line.tokens[k] for _, line in lines) for k in ("input", "output", "cacheRead", "cacheWrite")})


def _line(key: str, row: dict[str, Any]) -> Line:
    return Line(key, row["sum_cost_usd"] or Decimal(0), row["sum_unpriced_calls"] or 0,
                {"input": row["sum_input_tokens"] or 0, "output": row["sum_output_tokens"] or 0,
                 "cacheRead": row["sum_cache_read_tokens"] or 0, "cacheWrite": row["sum_cache_write_tokens"] or 0})
