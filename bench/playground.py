#!/usr/bin/env python
"""Server time of the playground and admin pages for a long session.

1. Make a fresh state root (a temp dir), migrate it and deploy
   examples/support, as `serve` does.
2. Write one session of 2,000 events straight through
   `sessions.eventlog.events.append_events` (the one door events go through): 100
   turns of 20 events each (user message, reasoning, a tool call and its
   result, seven text deltas, usage), with their Turn and ToolCall rows, owned
   by the loopback principal.
3. Time each page in-process with Django's test `Client` (server time only:
   URL resolution, views, queries, templates), then over real HTTP against a
   `manage.py serve --no-workers` on the same state root (round trip on
   loopback, so it includes daphne and the client).
4. Print p50/p95 per page against the target and write the JSON report to
   bench/results/playground-<timestamp>.json (gitignored).

Pages: the playground session page, its trace, the agent page, the admin
session change page (logged in as a superuser), plus the session's NDJSON
download and the admin session list.

    .venv/bin/python bench/playground.py
    .venv/bin/python bench/playground.py --requests 50 --events 5000 --keep-state

Every loop is bounded in count; the server process is stopped at the end,
on error and on Ctrl-C.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
TARGET_MS = 200.0
EVENTS_PER_TURN = 20
ADMIN_USER, ADMIN_PASSWORD = "bench", "bench-password-0123"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1))))
    return ordered[rank]


def summary(samples_ms: list[float]) -> dict[str, float]:
    return {
        "n": len(samples_ms),
        "p50_ms": round(statistics.median(samples_ms), 2),
        "p95_ms": round(percentile(samples_ms, 95), 2),
        "mean_ms": round(statistics.fmean(samples_ms), 2),
        "max_ms": round(max(samples_ms), 2),
    }


# -- the fixture: one long session --------------------------------------------------

def turn_events(n: int, call_id: str) -> list[tuple[str, dict[str, Any]]]:
    """One turn's 20 events, shaped like the engine's."""
    reply = f"Order A100 was delivered (turn {n}). " * 4
    deltas = [reply[i:i + len(reply) // 7 + 1] for i in range(0, len(reply), len(reply) // 7 + 1)][:7]
    while len(deltas) < 7:
        deltas.append("")
    usage = {"inputTokens": 200 + n, "outputTokens": 40, "cacheReadTokens": 0, "cacheWriteTokens": 0}
    items = [
        ("message.received", {"text": f'Where is my order? ({n})\n/call lookup_order {{"order_id": "A100"}}', "source": "user"}),
        ("turn.started", {"trigger": "user"}),
        ("step.started", {"step": 1}),
        ("reasoning.appended", {"delta": "The customer asks about an order; look it up."}),
        ("reasoning.completed", {"text": "The customer asks about an order; look it up."}),
        ("actions.requested", {"calls": [{"callId": call_id, "toolName": "lookup_order", "input": {"order_id": "A100"}}]}),
        ("action.result", {"callId": call_id, "toolName": "lookup_order", "durationMs": 1.2, "stubbed": False,
                           "output": {"orderId": "A100", "status": "delivered", "items": ["teapot"], "total": 34.5}}),
        ("step.completed", {"step": 1}),
        ("step.started", {"step": 2}),
        *[("message.appended", {"delta": d}) for d in deltas],
        ("message.completed", {"text": "".join(deltas)}),
        ("step.completed", {"step": 2}),
        ("turn.completed", {"usage": usage, "durationMs": 35.0}),
    ]
    assert len(items) == EVENTS_PER_TURN - 1
    return items


def build_session(events: int) -> str:
    from django.utils import timezone as dj_timezone

    from agents.models import Agent
    from channels_app.auth import LOCAL_PRINCIPAL
    from sessions.eventlog.events import append_events
    from sessions.models import Event, Session, ToolCall, Turn

    agent = Agent.objects.select_related("active_deployment").get(slug="support")
    session = Session.objects.create(
        agent=agent, deployment=agent.active_deployment, title="Bench: a long conversation",
        principal_id=LOCAL_PRINCIPAL.principal_id, principal_type=LOCAL_PRINCIPAL.principal_type,
        authenticator=LOCAL_PRINCIPAL.authenticator, status=Session.Status.WAITING,
    )
    append_events(session.id, [
        ("session.started", {"mode": "chat", "title": session.title, "channel": "http", "agent": "support",
                             "principal": LOCAL_PRINCIPAL.as_dict(), "options": {}}),
        ("agent.bound", {"agent": "support", "model": "scripted:echo",
                         "deployment": {"version": agent.active_deployment.version,
                                        "contentHash": agent.active_deployment.content_hash}}),
    ])
    written = 2
    n = 0
    while written < events:
        now = dj_timezone.now()
        turn = Turn.objects.create(session=session, message=f"turn {n}", status=Turn.Status.COMPLETED,
                                   claimed_by="bench", started_at=now, ended_at=now)
        call_id = f"call_{n}_0"
        ToolCall.objects.create(session=session, turn=turn, call_id=call_id, tool="lookup_order",
                                input={"order_id": "A100"}, status=ToolCall.Status.DONE,
                                output={"orderId": "A100", "status": "delivered"}, started_at=now, ended_at=now)
        items = turn_events(n, call_id)[: events - written - 1]
        append_events(session.id, items, turn_id=turn.id)
        append_events(session.id, [("session.waiting", {})])
        written += len(items) + 1
        n += 1
    count = Event.objects.filter(session=session).count()
    assert count == events, f"wrote {count} events, wanted {events}"
    return session.id


# -- timing ---------------------------------------------------------------------------

# Pages held to TARGET_MS; the NDJSON download is an API response, timed for reference.
TARGETED = ("playground_session", "playground_trace", "playground_agent", "admin_session_change", "admin_session_list")


def pages(session_id: str) -> dict[str, str]:
    from django.contrib.admin.utils import quote  # the admin unquotes "_22" and the like in a path

    return {
        "playground_session": f"/playground/support/session/{session_id}",
        "playground_trace": f"/playground/support/session/{session_id}/trace",
        "playground_agent": "/playground/support",
        "admin_session_change": f"/admin/agent_sessions/session/{quote(session_id)}/change/",
        "admin_session_list": "/admin/agent_sessions/session/",
        "events_ndjson": f"/support/v1/session/{session_id}/events",
    }


def time_requests(get: Callable[[str], tuple[int, int]], path: str, requests: int, warmup: int) -> dict[str, Any]:
    for _ in range(warmup):
        status, _ = get(path)
        assert status == 200, f"{path}: HTTP {status}"
    samples: list[float] = []
    size = 0
    for _ in range(requests):
        started = time.perf_counter()
        status, size = get(path)
        samples.append((time.perf_counter() - started) * 1000)
        assert status == 200, f"{path}: HTTP {status}"
    return {**summary(samples), "bytes": size}


def in_process(session_id: str, requests: int, warmup: int) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    user = get_user_model().objects.get(username=ADMIN_USER)
    local = Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="127.0.0.1")
    staff = Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="127.0.0.1")
    staff.force_login(user)

    results: dict[str, Any] = {}
    for name, path in pages(session_id).items():
        client = staff if name.startswith("admin") else local

        def get(p: str, client=client) -> tuple[int, int]:
            response = client.get(p)
            body = b"".join(response.streaming_content) if response.streaming else response.content
            return response.status_code, len(body)

        queries = []  # counted with a wrapper: Django resets its own query log when a request starts
        with connection.execute_wrapper(lambda execute, sql, *rest: queries.append(sql) or execute(sql, *rest)):
            get(path)
        results[name] = {**time_requests(get, path, requests, warmup), "queries": len(queries)}
    return results


def over_http(state_root: Path, session_id: str, requests: int, warmup: int) -> dict[str, Any]:
    import httpx

    from tests.support import run_server

    results: dict[str, Any] = {}
    with run_server(state_root, "--no-workers", "--no-examples") as server:
        with httpx.Client(base_url=server.base_url, timeout=30) as local, \
                httpx.Client(base_url=server.base_url, timeout=30) as staff:
            login = staff.get("/admin/login/")
            token = staff.cookies["csrftoken"]
            done = staff.post("/admin/login/?next=/admin/", data={
                "username": ADMIN_USER, "password": ADMIN_PASSWORD, "csrfmiddlewaretoken": token, "next": "/admin/",
            })
            assert login.status_code == 200 and done.status_code == 302, f"admin login failed: {done.status_code}"
            for name, path in pages(session_id).items():
                client = staff if name.startswith("admin") else local

                def get(p: str, client=client) -> tuple[int, int]:
                    response = client.get(p)
                    return response.status_code, len(response.content)

                results[name] = time_requests(get, path, requests, warmup)
    return results


# -- main ---------------------------------------------------------------------------------

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=2000, help="events in the session (default 2000)")
    parser.add_argument("--requests", type=int, default=30, help="timed requests per page (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed requests per page first (default 3)")
    parser.add_argument("--no-http", action="store_true", help="in-process timings only")
    parser.add_argument("--out", help="the JSON report (default bench/results/playground-<timestamp>.json)")
    parser.add_argument("--keep-state", action="store_true", help="keep the temp state root")
    args = parser.parse_args()

    state_root = Path(tempfile.mkdtemp(prefix="agentsite-bench-playground-"))
    # The embedded default on a fresh state root, whatever this shell has set.
    for name in ("DATABASE_URL", "REDIS_URL", "AGENTSITE_TEST_DB", "AGENTSITE_AUTH", "AGENTSITE_DEBUG"):
        os.environ.pop(name, None)
    os.environ["AGENTSITE_STATE_ROOT"] = str(state_root)
    os.environ["DJANGO_SETTINGS_MODULE"] = "agentsite.settings"
    sys.path.insert(0, str(ROOT))

    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections

    from agents.discovery import deploy_agent_folder

    try:
        call_command("migrate", interactive=False, verbosity=0)
        deploy_agent_folder(ROOT / "examples" / "support")
        get_user_model().objects.create_superuser(ADMIN_USER, "bench@example.com", ADMIN_PASSWORD)
        started = time.perf_counter()
        session_id = build_session(args.events)
        print(f"session {session_id}: {args.events} events written in {time.perf_counter() - started:.1f} s "
              f"(state root {state_root})")

        report: dict[str, Any] = {
            "bench": "playground",
            "at": datetime.now(timezone.utc).isoformat(),
            "events": args.events,
            "requests": args.requests,
            "target_ms": TARGET_MS,
            "targeted": list(TARGETED),
            "cpus": os.cpu_count(),
            "loadavg_before": os.getloadavg(),
            "pages": pages(session_id),
            "in_process": in_process(session_id, args.requests, args.warmup),
        }
        connections.close_all()  # the server opens the same SQLite file
        if not args.no_http:
            report["http"] = over_http(state_root, session_id, args.requests, args.warmup)
    finally:
        if not args.keep_state:
            import shutil

            shutil.rmtree(state_root, ignore_errors=True)

    print(f"\n{'page':<24}{'in-process p50':>16}{'p95':>9}{'queries':>9}{'KB':>8}" + (f"{'HTTP p50':>11}{'p95':>9}" if "http" in report else "") + "  verdict")
    missed = []
    for name in report["pages"]:
        mine = report["in_process"][name]
        line = f"{name:<24}{mine['p50_ms']:>16.1f}{mine['p95_ms']:>9.1f}{mine['queries']:>9}{mine['bytes'] / 1024:>8.0f}"
        worst = mine["p95_ms"]
        if "http" in report:
            http = report["http"][name]
            line += f"{http['p50_ms']:>11.1f}{http['p95_ms']:>9.1f}"
            worst = max(worst, http["p95_ms"])
        if name not in TARGETED:
            print(line + "  (reference)")
            continue
        ok = worst < TARGET_MS
        if not ok:
            missed.append(name)
        print(line + ("  ok" if ok else f"  MISSES {TARGET_MS:.0f} ms"))
    report["missed"] = missed
    report["loadavg_after"] = os.getloadavg()
    print(f"\nload average before {report['loadavg_before'][0]:.1f}, after {report['loadavg_after'][0]:.1f} "
          f"on {report['cpus']} CPUs: other work on the machine inflates every number")

    out = Path(args.out) if args.out else ROOT / "bench" / "results" / f"playground-{datetime.now():%Y%m%d-%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"\nreport: {out}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
