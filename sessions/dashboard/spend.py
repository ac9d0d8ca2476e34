"""What the dashboard shows of spending: dollars per UTC day by agent, person and model, read from
the ledger (`sessions.spend.report`), and the sessions that cost the most.

The ledger is kept per whole UTC day, so spending covers every day the window touches: a one-hour
window reads today (and yesterday, past midnight). A session's cost is the `costUsd` of its total
usage, read as a JSON key (`KeyTextTransform` and `Cast`, as figures.py) on SQLite and PostgreSQL.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Count, F, FloatField, IntegerField, OuterRef, Subquery
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from sessions.models import Session, Turn
from sessions.models.spend import utc_day
from sessions.spend.report import Line, spending

SPLITS = {"agent": "agent", "principal": "person", "model": "model"}  # `spending`'s `by`: what the page calls it
EXPENSIVE = 15


@dataclass
class Split:
    """One way of splitting the window's dollars: each key's total, and its dollars on each day."""

    by: str
    label: str
    days: list[date]
    per_day: dict[str, dict[date, Decimal]]
    totals: list[Line]  # the most expensive first


def days_of(since: datetime, until: datetime) -> list[date]:
    """Every UTC day from the one holding `since` to the one holding `until`."""
    first, last = utc_day(since), utc_day(until)
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def split(by: str, days: list[date]) -> Split:
    """One query: the ledger summed per `by` value and day over `days`."""
    lines: dict[str, dict[date, Line]] = {}
    for day, line in spending(days[0], by, until=days[-1], per_day=True):
        lines.setdefault(line.key, {})[day] = line
    totals = [Line(key, sum((line.cost_usd for line in daily.values()), Decimal(0)),
                   sum(line.unpriced_calls for line in daily.values()), {}) for key, daily in lines.items()]
    totals.sort(key=lambda line: (-line.cost_usd, line.key))
    per_day = {key: {day: line.cost_usd for day, line in daily.items()} for key, daily in lines.items()}
    return Split(by, SPLITS[by], days, per_day, totals)


def expensive_sessions(since: datetime, until: datetime) -> list[dict[str, Any]]:
    """The sessions updated in the window with the largest known total cost (over all their turns),
    with their turns counted; sessions whose cost is unknown (null or missing) are left out."""
    cost = Cast(KeyTextTransform("costUsd", "usage"), FloatField())
    turns = (Turn.objects.filter(session=OuterRef("pk")).order_by().values("session")
             .annotate(n=Count("id")).values("n"))
    rows = (Session.objects.filter(updated_at__gte=since, updated_at__lte=until).order_by()
            # SQLite reads a JSON null as the text 'null', which casts to 0: excluded by name
            .annotate(cost=cost).filter(cost__isnull=False).exclude(usage__costUsd=None)
            .order_by(F("cost").desc(), "-updated_at")
            .values("id", "principal_id", "authenticator", "updated_at", "cost", slug=F("agent__slug"),
                    turn_count=Subquery(turns, output_field=IntegerField()))[:EXPENSIVE])
    return [{**row, "agent": row.pop("slug"), "turns": row.pop("turn_count") or 0} for row in rows]


def spend_figures(since: datetime, until: datetime) -> dict[str, Any]:
    """The window's spending, over the whole UTC days it touches, and its most expensive sessions."""
    days = days_of(since, until)
    splits = {by: split(by, days) for by in SPLITS}
    agents = splits["agent"].totals  # every ledger row has an agent: its totals are the window's
    return {
        "days": days,
        "splits": splits,
        "total": sum((line.cost_usd for line in agents), Decimal(0)),
        "unpriced": sum(line.unpriced_calls for line in agents),
        "sessions": expensive_sessions(since, until),
    }
