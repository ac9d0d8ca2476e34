"""The per-principal limits on PostgreSQL without Redis: two `serve` processes share one
database and nothing else, so the running-turn cap is held by PostgreSQL's advisory
locks and the rate counters live in the database cache's table (`agentsite_limits`).

Each test speaks as principals of its own (bearer tokens): the cap and the rates are per
principal, so the tests do not share a budget.
"""
from __future__ import annotations

import contextlib
from datetime import datetime
from pathlib import Path
from typing import Iterator

import httpx
import psycopg
import pytest

from tests.sessions.test_approvals import PAY_5, lines, write_gated_agent
from tests.support import Server, postgres_database, read_stream_until, run_server

TOKENS = {name: f"{name}-token-0123456789" for name in ("alice", "bob", "carol", "dana", "erin")}


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Iterator[tuple[Server, Server, str, Path]]:
    """Two servers on one throwaway PostgreSQL database, no Redis; the gated agent's ledger."""
    root = tmp_path_factory.mktemp("limits-pg")
    ledger = root / "ledger.txt"
    write_gated_agent(root / "agents" / "gated", ledger, root / "notes.txt")
    with contextlib.ExitStack() as stack:
        database = stack.enter_context(postgres_database(migrated=True))
        env = {"DATABASE_URL": database, "REDIS_URL": "", "AGENTSITE_MAX_RUNNING_TURNS": "1",
               "AGENTSITE_WORKERS": "3", "AGENTSITE_RATE_SESSIONS": "4/hour", "AGENTSITE_RATE_MESSAGES": "2/hour"}
        args = ["--agents", str(root / "agents"), "--no-examples"]
        for token in TOKENS.values():
            args += ["--bearer-token", token]
        one = stack.enter_context(run_server(root / "state-1", *args, env=env))
        two = stack.enter_context(run_server(root / "state-2", *args, env=env))
        yield one, two, database, ledger


def client(server: Server, who: str) -> httpx.Client:
    return server.client(timeout=30, headers={"Authorization": f"Bearer {TOKENS[who]}"})


def start(client: httpx.Client, message: str) -> dict:
    response = client.post("/gated/v1/session", json={"message": message})
    assert response.status_code == 201, response.text
    return response.json()


def events_until(client: httpx.Client, session_id: str, until: str, count: int = 1) -> list[dict]:
    return read_stream_until(client, f"/gated/v1/session/{session_id}/stream?startIndex=0", until, count=count,
                             timeout=40)


def at(events: list[dict], type_: str) -> datetime:
    return [datetime.fromisoformat(e["at"]) for e in events if e["type"] == type_][-1]


def held_back(events: list[dict]) -> list[dict]:
    return [e["data"] for e in events if e["type"] == "turn.queued"]


def test_the_cap_holds_across_two_web_processes_on_postgresql(stack):
    one, two, _, _ = stack
    with client(one, "alice") as a1, client(two, "alice") as a2, client(two, "bob") as b2:
        first = start(a1, "/sleep 1500")
        second = start(a2, "/sleep 300")
        third = start(a1, "hi")
        assert second["status"] == third["status"] == "idle"
        bobs = start(b2, "hi")

        first_events = events_until(a2, first["sessionId"], "turn.completed")
        second_events = events_until(a1, second["sessionId"], "turn.completed")
        third_events = events_until(a2, third["sessionId"], "turn.completed")
        bob_events = events_until(b2, bobs["sessionId"], "turn.completed")

        assert held_back(first_events) == [] and held_back(bob_events) == []
        for waited in (second_events, third_events):
            assert held_back(waited) == [{"waitingFor": "running_turns_cap", "runningTurnsCap": 1}]
            types = [e["type"] for e in waited]
            assert types.index("turn.queued") < types.index("turn.started")
        assert at(second_events, "turn.started") >= at(first_events, "turn.completed")
        assert at(third_events, "turn.started") >= at(second_events, "turn.completed")
        assert at(bob_events, "turn.completed") < at(first_events, "turn.completed")


def test_a_parked_turn_holds_no_slot_and_waits_for_one_once_approved(stack):
    one, two, _, ledger = stack
    with client(one, "dana") as d1, client(two, "dana") as d2:
        parked = start(d1, PAY_5)["sessionId"]
        call_id = events_until(d2, parked, "action.approval_requested")[-1]["data"]["callId"]

        # Another of dana's sessions runs while the first waits for a person.
        busy = start(d2, "/sleep 2000")
        assert busy["status"] == "running"
        events_until(d1, busy["sessionId"], "step.started")

        # Approved while that one holds the slot: the parked turn waits for it to end.
        approved = d2.post(f"/gated/v1/session/{parked}/approvals/{call_id}", json={"decision": "approve"})
        assert approved.status_code == 200, approved.text
        resumed = events_until(d1, parked, "turn.completed")
        busy_events = events_until(d2, busy["sessionId"], "turn.completed")

        assert held_back(resumed) == [{"waitingFor": "running_turns_cap", "runningTurnsCap": 1}]
        assert at(resumed, "action.result") >= at(busy_events, "turn.completed")
        assert lines(ledger) == ["5"]


def test_stop_ends_a_turn_waiting_for_a_slot_while_the_other_still_runs(stack):
    one, two, _, _ = stack
    with client(one, "erin") as e1, client(two, "erin") as e2:
        running = start(e1, "/sleep 8000")["sessionId"]
        waiting = start(e2, "hi")["sessionId"]
        assert events_until(e1, running, "step.started")

        stopped = e2.post(f"/gated/v1/session/{waiting}/stop")
        assert stopped.status_code == 202, stopped.text
        ended = events_until(e1, waiting, "session.waiting")

        assert [e["data"]["error"] for e in ended if e["type"] == "turn.failed"] == ["turn interrupted"]
        assert "message.completed" not in {e["type"] for e in ended}
        assert e2.get(f"/gated/v1/session/{running}").json()["status"] == "running"
        assert e1.post(f"/gated/v1/session/{running}/stop").status_code == 202


def test_the_rate_limits_are_counted_in_the_database_across_two_web_processes(stack):
    one, two, database, _ = stack
    with client(one, "carol") as c1, client(two, "carol") as c2:
        created = [c.post("/gated/v1/session", json={"message": "hi"}) for c in (c1, c2, c1, c2)]
        assert [r.status_code for r in created] == [201] * 4, [r.text for r in created]
        for c in (c1, c2):
            refused = c.post("/gated/v1/session", json={"message": "hi"})
            assert refused.status_code == 429, refused.text
            assert 1 <= int(refused.headers["Retry-After"]) <= 3600
            assert "4/hour" in refused.json()["error"]["message"]

        session = created[0].json()["sessionId"]
        for c in (c2, c1):
            sent = c.post(f"/gated/v1/session/{session}/message", json={"message": "more", "admission": "coalesce"})
            assert sent.status_code == 202, sent.text
        refused = c2.post(f"/gated/v1/session/{session}/message", json={"message": "more"})
        assert refused.status_code == 429 and "2/hour" in refused.json()["error"]["message"]

    with psycopg.connect(database) as conn:
        counters = conn.execute("SELECT count(*) FROM agentsite_limits").fetchone()[0]
    assert counters >= 2  # carol's sessions and messages, at least
