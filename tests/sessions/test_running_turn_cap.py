"""AGENTSITE_MAX_RUNNING_TURNS against a real server: with a cap of 1, a principal's
turns run one after another, in the order they were sent, while another
principal's turn is not held behind them. On the embedded default and on
PostgreSQL + Redis, where the count is taken under an advisory lock.
"""
from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Iterator

import httpx
import pytest

from tests.support import Server, backend_env, read_stream_until, run_server

ALICE = "alice-token-0123456789"
BOB = "bob-token-9876543210"


@pytest.fixture(scope="module", params=["sqlite", "postgres+redis"])
def server(request, tmp_path_factory) -> Iterator[Server]:
    with contextlib.ExitStack() as stack:
        env = {"AGENTSITE_MAX_RUNNING_TURNS": "1", "AGENTSITE_WORKERS": "3", **backend_env(stack, request.param, migrated=True)}
        yield stack.enter_context(run_server(tmp_path_factory.mktemp("state"), "--bearer-token", ALICE,
                                             "--bearer-token", BOB, env=env))


def start(client: httpx.Client, message: str) -> dict:
    response = client.post("/support/v1/session", json={"message": message})
    assert response.status_code == 201, response.text
    return response.json()


def turn_times(client: httpx.Client, session_id: str) -> tuple[datetime, datetime]:
    """When the session's first turn started and completed."""
    events = read_stream_until(client, f"/support/v1/session/{session_id}/stream?startIndex=0", "turn.completed",
                               timeout=30)
    at = {e["type"]: datetime.fromisoformat(e["at"]) for e in events}
    return at["turn.started"], at["turn.completed"]


def test_a_principals_turns_beyond_the_cap_wait_in_order_and_others_are_not_held(server):
    with server.client(timeout=20, headers={"Authorization": f"Bearer {ALICE}"}) as alice, \
            server.client(timeout=20, headers={"Authorization": f"Bearer {BOB}"}) as bob:
        first = start(alice, "/sleep 1500")
        second = start(alice, "/sleep 300")
        third = start(alice, "hi")
        assert second["status"] == third["status"] == "idle"  # waiting for the cap, without the lock
        bobs = start(bob, "hi")

        first_started, first_done = turn_times(alice, first["sessionId"])
        second_started, second_done = turn_times(alice, second["sessionId"])
        third_started, _ = turn_times(alice, third["sessionId"])
        bob_started, bob_done = turn_times(bob, bobs["sessionId"])

        assert second_started >= first_done
        assert third_started >= second_done
        assert bob_done < first_done  # bob's turn ran beside alice's, not after it

        # A follow-up waits for the cap too, and the session comes back to waiting after it.
        sent = alice.post(f"/support/v1/session/{first['sessionId']}/message", json={"message": "again"})
        assert sent.status_code == 202, sent.text
        events = read_stream_until(alice, f"/support/v1/session/{first['sessionId']}/stream?startIndex=0",
                                   "turn.completed", count=2, timeout=30)
        assert [e["type"] for e in events].count("turn.started") == 2
