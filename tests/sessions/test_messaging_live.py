"""The example agents concierge and librarian on a real `manage.py serve`: the question is
sent from a turn in one qcluster worker, answered in a turn of another, and the answer read
back in a third, across processes, as the quickstart serves them: on the embedded default and on
PostgreSQL + Redis. The servers' turn budget is 3, so one turn sending five messages at once
(parallel calls, each on its own connection) gets three through."""
from __future__ import annotations

import contextlib
import json
from typing import Iterator

import httpx
import pytest

from tests.support import Server, backend_env, read_stream_until, run_server

QUESTION = "Is Dune available?\n/call find_book " + json.dumps({"title": "Dune"})
BUDGET = 3


@pytest.fixture(scope="module", params=["sqlite", "postgres+redis"])
def server(request, tmp_path_factory) -> Iterator[Server]:
    with contextlib.ExitStack() as stack:
        env = {**backend_env(stack, request.param, migrated=True), "AGENTSITE_AGENT_TURN_BUDGET": str(BUDGET)}
        yield stack.enter_context(run_server(tmp_path_factory.mktemp("messaging"), env=env))


def results(events: list[dict]) -> list[dict]:
    return [e["data"] for e in events if e["type"] == "action.result"]


def test_the_concierge_asks_the_librarian_and_reads_the_answer(server: Server):
    with server.client(timeout=20) as client:
        ask = "Is Dune on the shelves?\n/call send_message " + json.dumps({"to": "librarian", "text": QUESTION})
        created = client.post("/concierge/v1/session", json={"message": ask})
        assert created.status_code == 201, created.text
        session, token = created.json()["sessionId"], created.json()["continuationToken"]
        stream = f"/concierge/v1/session/{session}/stream"
        sent = results(read_stream_until(client, stream, "turn.completed"))[0]
        recipient = sent["output"]["sessionId"]
        assert sent["output"] == {"delivered": True, "sessionId": recipient, "thread": None}

        answered = read_stream_until(client, f"/librarian/v1/session/{recipient}/stream", "turn.completed")
        received = next(e["data"] for e in answered if e["type"] == "message.received")
        assert received == {"source": "agent", "text": QUESTION, "agent": "concierge", "sessionId": session}
        detail = client.get(f"/librarian/v1/session/{recipient}").json()
        assert detail["principal"]["principalId"] == client.get(f"/concierge/v1/session/{session}").json()[
            "principal"]["principalId"]

        follow = client.post(f"/concierge/v1/session/{session}/message",
                             json={"message": "/call read_notifications {}", "continuationToken": token})
        assert follow.status_code == 202, follow.text
        read = results(read_stream_until(client, stream, "turn.completed", count=2))[-1]
        [answer] = read["output"]["notifications"]
        assert answer["from"] == {"agent": "librarian", "sessionId": recipient} and "SF-3" in answer["text"]


def test_a_refused_message_is_a_tool_error_on_a_running_server(server: Server):
    with server.client(timeout=20) as client:
        ask = "/call send_message " + json.dumps({"to": "support", "text": "refund me"})
        created = client.post("/concierge/v1/session", json={"message": ask})
        assert created.status_code == 201, created.text
        events = read_stream_until(client, f"/concierge/v1/session/{created.json()['sessionId']}/stream",
                                   "turn.completed")
        assert results(events)[0]["error"].startswith("MessageRefused: not reachable: 'support'")
        mine = client.get("/support/v1/sessions")
        assert mine.status_code == 200 and mine.json()["sessions"] == []


def test_parallel_sends_from_one_turn_stop_at_the_budget(server: Server):
    sends = "\n".join("/call send_message " + json.dumps({"to": "librarian", "text": f"question {n}", "thread": f"t{n}"})
                      for n in range(5))
    with server.client(timeout=20) as client:
        before = len(client.get("/librarian/v1/sessions").json()["sessions"])
        created = client.post("/concierge/v1/session", json={"message": sends})
        assert created.status_code == 201, created.text
        events = read_stream_until(client, f"/concierge/v1/session/{created.json()['sessionId']}/stream",
                                   "turn.completed")
        sent = results(events)
        delivered = [r for r in sent if "error" not in r]
        refused = [r for r in sent if "error" in r]
        assert (len(sent), len(delivered)) == (5, BUDGET), sent
        for result in refused:
            assert result["error"].startswith("MessageRefused: turn budget: the message that started this work has "
                                              f"already caused {BUDGET} turns of agents, and at most {BUDGET} may")
        mine = client.get("/librarian/v1/sessions")
        assert mine.status_code == 200 and len(mine.json()["sessions"]) == before + BUDGET
    logged = [line for line in server.output().splitlines() if "agent turn budget spent" in line]
    assert len(logged) >= len(refused) and f"(AGENTSITE_AGENT_TURN_BUDGET={BUDGET})" in logged[-1]
    assert "Traceback" not in server.output()
