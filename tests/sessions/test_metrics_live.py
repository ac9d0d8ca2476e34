"""/metrics on a live server: 2 workers, django-q2 replacing each after 2 tasks.

One server, one pass: a baseline scrape, then turns of every kind (a reply, a
tool call that works and one that fails, a failing model, a call parked for
approval, turns queued behind busy workers), then scrapes parsed by
prometheus_client's own parser. Counters move by exactly what happened, the
work of workers that are gone included; the gauges read from the database
see the parked call and the queued turn; a websocket counts as an open
stream until it closes.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from typing import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.sync.client import connect

from tests.support import Server, read_stream_until, run_server

pytestmark = pytest.mark.slow

TOKEN = "metrics-token-for-the-live-test"
AGENT = "support"
SESSION_ROUTE = "<slug:slug>/v1/session"
LIVE = "live"
Samples = dict[tuple[str, tuple], float]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    env = {"AGENTSITE_Q_RECYCLE": "2", "AGENTSITE_METRICS_TOKEN": TOKEN}
    with run_server(tmp_path_factory.mktemp("state-metrics"), "--workers", "2", env=env) as server:
        yield server


def scrape(server: Server) -> Samples:
    # From another address the token would be needed; here it is sent as a scraper would.
    with server.client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        answer = client.get("/metrics")
    assert answer.status_code == 200, answer.text
    found: Samples = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def start(server: Server, message: str, **body: str) -> dict:
    with server.client() as client:
        created = client.post(f"/{AGENT}/v1/session", json={"message": message, **body})
    assert created.status_code == 201, created.text
    return created.json()


def events_until(server: Server, session_id: str, until: str, count: int = 1) -> list[dict]:
    with server.client() as client:
        return read_stream_until(client, f"/{AGENT}/v1/session/{session_id}/stream?startIndex=0", until,
                                 count=count, timeout=30)


def dead_workers(server: Server) -> set[int]:
    """Worker processes that claimed turns and are gone (replaced by django-q2)."""
    with sqlite3.connect(server.state_root / "db.sqlite3") as db:
        claimers = {int(row[0].rpartition(":")[2]) for row in
                    db.execute("SELECT DISTINCT claimed_by FROM agent_sessions_turn WHERE claimed_by <> ''")}
    gone = set()
    for pid in claimers:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            gone.add(pid)
    return gone


def test_counters_histograms_and_gauges_across_replaced_workers(server):
    before = scrape(server)
    sessions: list[str] = []
    for message in ("hello", '/call lookup_order {"order_id": "A100"}', '/call lookup_order {"order_id": "Z999"}',
                    "/fail the model is down"):
        sessions.append(start(server, message)["sessionId"])
        events_until(server, sessions[-1], "session.waiting")

    # A call parked for approval: the database gauge sees it while it waits.
    parked = start(server, '/call cancel_order {"order_id": "A102"}')
    sessions.append(parked["sessionId"])
    requested = events_until(server, parked["sessionId"], "action.approval_requested")[-1]
    waiting = scrape(server)
    assert value(waiting, "agentsite_approvals_pending") == value(before, "agentsite_approvals_pending") + 1
    with server.client() as client:
        call_id = requested["data"]["callId"]
        decided = client.post(f"/{AGENT}/v1/session/{parked['sessionId']}/approvals/{call_id}",
                              json={"decision": "approve"})
    assert decided.status_code == 200, decided.text
    events_until(server, parked["sessionId"], "session.waiting")

    # Both workers busy: a third turn waits for one, and the queue depth says so.
    busy = [start(server, "/sleep 2500")["sessionId"] for _ in range(2)]
    time.sleep(0.5)
    sessions += busy + [start(server, "hello again")["sessionId"]]
    assert value(scrape(server), "agentsite_queue_depth") >= 1
    for session_id in sessions[-3:]:
        events_until(server, session_id, "session.waiting")

    deadline = time.monotonic() + 15
    while not dead_workers(server):  # a worker leaves once its second task is done
        assert time.monotonic() < deadline, "no worker was replaced"
        time.sleep(0.2)
    after = scrape(server)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    events = [e for s in sessions for e in events_until(server, s, "session.waiting")]
    ended = [e for e in events if e["type"] in ("turn.completed", "turn.failed")]
    assert len(ended) == 8
    assert moved("agentsite_turns_total", agent=AGENT, status="completed", purpose=LIVE) == 7
    assert moved("agentsite_turns_total", agent=AGENT, status="failed", purpose=LIVE) == 1
    assert moved("agentsite_turn_duration_seconds_count", agent=AGENT, purpose=LIVE) == 8
    assert moved("agentsite_turn_queue_seconds_count", agent=AGENT, purpose=LIVE) == 8
    assert moved("agentsite_turn_duration_seconds_sum", agent=AGENT, purpose=LIVE) == pytest.approx(
        sum(e["data"]["timings"]["totalMs"] for e in ended) / 1000, abs=0.01)

    model = next(e for e in events if e["type"] == "agent.bound")["data"]["model"]
    steps = [e for e in events if e["type"] == "step.completed"]
    assert moved("agentsite_model_first_token_seconds_count", agent=AGENT, model=model, purpose=LIVE) == len(steps)
    for key, kind in (("inputTokens", "input"), ("outputTokens", "output")):
        reported = sum((e["data"]["usage"] or {}).get(key, 0) for e in ended)
        assert reported > 0
        assert moved("agentsite_tokens_total", agent=AGENT, model=model, kind=kind, purpose=LIVE) == reported

    for tool, outcome in (("lookup_order", "done"), ("lookup_order", "failed"), ("cancel_order", "done")):
        assert moved("agentsite_tool_calls_total", agent=AGENT, tool=tool, outcome=outcome, purpose=LIVE) == 1
    assert moved("agentsite_http_requests_total", route=SESSION_ROUTE, status="201") == len(sessions)
    assert value(after, "agentsite_approvals_pending") == value(before, "agentsite_approvals_pending")
    assert value(after, "agentsite_queue_depth") == 0
    # The replaced workers' files are still summed: dropping them would have lost turns above.
    assert any((server.state_root / "metrics" / f"counter_{pid}.db").exists() for pid in dead_workers(server))


def test_an_eval_runs_turn_counts_as_eval_in_every_family_and_never_as_live(server):
    """Loopback may ask for an eval session, as an eval run on this host does."""
    before = scrape(server)
    session_id = start(server, '/call lookup_order {"order_id": "A100"}', purpose="eval")["sessionId"]
    events = events_until(server, session_id, "session.waiting")
    model = next(e for e in events if e["type"] == "agent.bound")["data"]["model"]
    after = scrape(server)

    def moved(name: str, **labels: str) -> dict[str, float]:
        return {purpose: value(after, name, **labels, purpose=purpose) - value(before, name, **labels, purpose=purpose)
                for purpose in ("eval", LIVE)}

    assert moved("agentsite_sessions_total", agent=AGENT) == {"eval": 1, LIVE: 0}
    assert moved("agentsite_turns_total", agent=AGENT, status="completed") == {"eval": 1, LIVE: 0}
    assert moved("agentsite_turn_duration_seconds_count", agent=AGENT) == {"eval": 1, LIVE: 0}
    assert moved("agentsite_turn_queue_seconds_count", agent=AGENT) == {"eval": 1, LIVE: 0}
    steps = len([e for e in events if e["type"] == "step.completed"])
    assert moved("agentsite_model_first_token_seconds_count", agent=AGENT, model=model) == {"eval": steps, LIVE: 0}
    for kind in ("input", "output"):
        tokens = moved("agentsite_tokens_total", agent=AGENT, model=model, kind=kind)
        assert tokens["eval"] > 0 and tokens[LIVE] == 0
    assert moved("agentsite_tool_calls_total", agent=AGENT, tool="lookup_order", outcome="done") == {"eval": 1, LIVE: 0}


def open_streams(server: Server, transport: str) -> float:
    return value(scrape(server), "agentsite_streams_open", transport=transport)


def wait_for_streams(server: Server, transport: str, expected: float) -> None:
    deadline = time.monotonic() + 10
    while (found := open_streams(server, transport)) != expected:
        assert time.monotonic() < deadline, f"{transport} streams open: {found}, expected {expected}"
        time.sleep(0.1)


def test_open_streams_are_counted_until_they_close(server):
    session_id = start(server, "hello")["sessionId"]
    events_until(server, session_id, "session.waiting")
    url = server.base_url.replace("http://", "ws://") + f"/{AGENT}/v1/session/{session_id}/ws?startIndex=0"
    with connect(url, additional_headers={"Origin": server.base_url}, open_timeout=10) as ws:
        json.loads(ws.recv(timeout=10))
        wait_for_streams(server, "websocket", 1)
    wait_for_streams(server, "websocket", 0)

    leave = threading.Event()

    def follow() -> None:
        with server.client(timeout=30) as client, client.stream(
                "GET", f"/{AGENT}/v1/session/{session_id}/stream", headers={"Accept": "text/event-stream"}) as answer:
            lines = answer.iter_lines()  # kept: a dropped iterator would close the response
            next(lines)
            leave.wait(20)

    reader = threading.Thread(target=follow)
    reader.start()
    try:
        wait_for_streams(server, "sse", 1)
    finally:
        leave.set()
    reader.join(timeout=20)
    wait_for_streams(server, "sse", 0)
