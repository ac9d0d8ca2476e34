"""Turns of known status, timings, usage and end for the dashboard's tests, and the figures
they must give (tests/sessions/test_dashboard.py); spending in the ledger and sessions of known
cost for its spend section (tests/sessions/test_dashboard_spend.py, tests/browser).
`python -c "...main()"` writes them on the database of the process's settings and prints the
figures of each window as JSON, so the same numbers are checked on PostgreSQL as on SQLite."""
from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from decimal import Decimal

from django.utils import timezone

from agents.models import Agent, Deployment
from sessions.dashboard.figures import WINDOWS, dashboard_figures
from sessions.dashboard.spend import spend_figures
from sessions.models import Session, Spend, Turn
from sessions.models.spend import utc_day

RATE_LIMITED = "provider error: rate limited (429)"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"

# name: (agent, model, status, minutes before now, totalMs, queueMs, usage (in, out) | None | {}, error)
TURNS: dict[str, tuple] = {
    "A1": ("alpha", "scripted:echo", "completed", 10, 100, 10, (100, 10), ""),
    "A2": ("alpha", "scripted:echo", "completed", 20, 200, 20, (200, 20), ""),
    "A3": ("alpha", "scripted:echo", "completed", 120, 300, 30, None, ""),
    "A4": ("alpha", "scripted:echo", "failed", 180, 5000, 40, (50, 0), RATE_LIMITED),
    "A5": ("alpha", "scripted:echo", "completed", 30 * 60, 9999, 1, (1000, 1000), ""),  # 30 h ago
    "B1": ("beta", "openai:small", "completed", 5, 400, 50, (300, 30), ""),
    "B2": ("beta", "openai:small", "interrupted", 40, 700, 60, (10, 1), "turn interrupted"),
    "B3": ("beta", "openai:small", "failed", 50, 800, None, None, RATE_LIMITED),  # its worker was lost
    "B4": ("beta", "anthropic:big", "completed", 90, 600, 70, (500, 50), ""),
    "B5": ("beta", "anthropic:big", "failed", 240, None, None, {}, "database error: OperationalError"),
}


def turn_id(name: str) -> str:
    return f"trn_dashboard_{name}"


def make_turns(now: datetime | None = None) -> datetime:
    """The turns above (and a running and a queued one, which have not ended); returns `now`."""
    now = now or timezone.now()
    deployments: dict[tuple[str, str], Deployment] = {}
    for agent_slug, model in dict.fromkeys((t[0], t[1]) for t in TURNS.values()):
        agent, _ = Agent.objects.get_or_create(slug=agent_slug)
        version = agent.deployments.count() + 1
        deployments[agent_slug, model] = deployment = Deployment.objects.create(
            agent=agent, version=version, source=f"/agents/{agent_slug}", content_hash=f"{version:064d}",
            manifest={"model": model}, status="running")
        Agent.objects.filter(pk=agent.pk).update(active_deployment=deployment)
    for name, (agent_slug, model, status, minutes, total, queue, usage, error) in TURNS.items():
        deployment = deployments[agent_slug, model]
        session = Session.objects.create(agent=deployment.agent, deployment=deployment, principal_id="mia",
                                         authenticator="django")
        ended = now - timedelta(minutes=minutes)
        timings = None if total is None else {"queueMs": queue, "totalMs": total, "steps": [
            {"kind": "model", "name": model, "startMs": 0.0, "durationMs": total}]}
        Turn.objects.create(
            id=turn_id(name), session=session, status=status, error=error, created_at=ended - timedelta(seconds=1),
            started_at=ended - timedelta(seconds=1), ended_at=ended, timings=timings,
            usage={"inputTokens": usage[0], "outputTokens": usage[1], "cacheReadTokens": 0, "cacheWriteTokens": 0}
            if isinstance(usage, tuple) else usage, trace_id=TRACE if name == "A4" else "")
        if name == "A1":
            Turn.objects.create(session=session, status=Turn.Status.RUNNING, started_at=now)
            Turn.objects.create(session=session, status=Turn.Status.QUEUED)
    return now


# (days before today (UTC), agent, person, model, dollars, unpriced calls): ledger rows
SPEND = [
    (0, "alpha", "mia", "openai:small", "1.50", 0),
    (0, "beta", "mia", "anthropic:big", "0.25", 0),
    (0, "alpha", "noor", "openai:small", "0.75", 0),
    (0, "beta", "noor", "local:unknown", "0", 3),  # a model with no known price
    (1, "alpha", "mia", "anthropic:big", "2.00", 0),
    (1, "beta", "noor", "openai:small", "0.10", 1),
    (3, "alpha", "mia", "openai:small", "10.00", 0),  # in the week only
    (9, "beta", "mia", "openai:small", "100.00", 0),  # in no window
]
# name: (agent, person, usage["costUsd"] (absent: ...), turns, hours since last active)
COSTED = {
    "S1": ("alpha", "mia", 3.0, 2, 1.5),
    "S2": ("beta", "noor", 7.5, 1, 5),
    "S3": ("alpha", "noor", 0.0123, 0, 0.1),
    "S4": ("beta", "mia", None, 3, 2),  # every call unpriced: not listed
    "S5": ("alpha", "mia", ..., 1, 2),  # no cost recorded (older usage): not listed
    "S6": ("beta", "mia", 50.0, 4, 50),  # last active two days ago: in the week only
}


def agent_with_release(slug: str, model: str = "scripted:echo") -> Agent:
    """The agent, made with a running release when missing."""
    agent, _ = Agent.objects.get_or_create(slug=slug)
    if agent.active_deployment_id is None:
        deployment = Deployment.objects.create(agent=agent, version=agent.deployments.count() + 1,
                                               source=f"/agents/{slug}", content_hash="0" * 64,
                                               manifest={"model": model}, status="running")
        Agent.objects.filter(pk=agent.pk).update(active_deployment=deployment)
        agent.refresh_from_db()
    return agent


def make_spending(now: datetime | None = None, agents: dict[str, str] | None = None) -> dict[str, str]:
    """The ledger rows and sessions above (`agents` renames their agents); returns each session's id by name."""
    now = now or timezone.now()
    agents = {"alpha": "alpha", "beta": "beta", **(agents or {})}
    today = utc_day(now)
    for days_ago, agent, person, model, dollars, unpriced in SPEND:
        Spend.objects.create(day=today - timedelta(days=days_ago), principal_id=person, authenticator="django",
                             agent=agent_with_release(agents[agent]), model=model, cost_usd=Decimal(dollars),
                             unpriced_calls=unpriced, input_tokens=100, output_tokens=10)
    ids = {}
    for name, (agent, person, cost, turns, hours) in COSTED.items():
        release = agent_with_release(agents[agent])
        usage = {"inputTokens": 100, "outputTokens": 10, "cacheReadTokens": 0, "cacheWriteTokens": 0}
        if cost is not ...:
            usage["costUsd"] = cost
        if cost is None:
            usage["unpricedCalls"] = 2
        session = Session.objects.create(agent=release, deployment=release.active_deployment, principal_id=person,
                                         authenticator="django", usage=usage)
        for _ in range(turns):
            # long ended: counted as the session's turns, outside every window of the turn figures
            Turn.objects.create(session=session, status=Turn.Status.COMPLETED, created_at=now - timedelta(days=40),
                                ended_at=now - timedelta(days=40))
        Session.objects.filter(pk=session.pk).update(updated_at=now - timedelta(hours=hours))
        ids[name] = session.id
    return ids


def comparable(figures: dict[str, Any]) -> dict[str, Any]:
    """The figures without moments, as they come back from JSON."""
    return json.loads(json.dumps({
        "totals": figures["totals"], "spread": figures["spread"], "agents": figures["agents"],
        "tokens": figures["tokens"], "bucketed": sum(b["turns"] for b in figures["buckets"]),
        "slowest": [(r["id"], r["agent"], r["status"], r["total"], r["queue"], r["trace_id"])
                    for r in figures["slowest"]],
        "failures": [(f["status"], f["error_start"], f["turns"], f["agents"]) for f in figures["failures"]],
    }))


def spend_comparable(spend: dict[str, Any]) -> dict[str, Any]:
    """The spend figures as plain values: dollars as strings, sessions without their ids."""
    return json.loads(json.dumps({
        "days": [str(day) for day in spend["days"]], "total": f"{spend['total']:.4f}", "unpriced": spend["unpriced"],
        "splits": {by: [(line.key, f"{line.cost_usd:.4f}", line.unpriced_calls) for line in split.totals]
                   for by, split in spend["splits"].items()},
        "sessions": [(r["agent"], r["principal_id"], r["cost"], r["turns"]) for r in spend["sessions"]],
    }))


def expected(window: str) -> dict[str, Any]:
    """What `comparable` must give for the turns above, worked out by hand."""
    spread = {"1h": (400, 800, 20, 60, 5), "24h": (400, 5000, 40, 70, 8), "7d": (600, 9999, 30, 70, 9)}[window]
    totals = {"1h": (3, 1, 1), "24h": (5, 3, 1), "7d": (6, 3, 1)}[window]
    return {
        "totals": dict(zip(("completed", "failed", "interrupted", "turns"), (*totals, sum(totals)))),
        "spread": dict(zip(("totalP50", "totalP95", "queueP50", "queueP95", "timed"), spread)),
        "bucketed": sum(totals),
    }


def main() -> None:
    """In a child process (PostgreSQL): migrate, write the turns, print the figures and the page's status."""
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", verbosity=0)
    now = make_turns()
    make_spending(now)
    out = {key: comparable(dashboard_figures(window, now)) for key, window in WINDOWS.items()}
    out["spend"] = {key: spend_comparable(spend_figures(now - window.span, now)) for key, window in WINDOWS.items()}
    client = Client(HTTP_HOST="127.0.0.1:8000")
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    pages = {key: client.get("/admin/dashboard/", {"window": key}) for key in WINDOWS}
    out["pages"] = {key: [page.status_code, page.content.count(b"<svg class=\"chart\"")] for key, page in pages.items()}
    print(json.dumps(out))
