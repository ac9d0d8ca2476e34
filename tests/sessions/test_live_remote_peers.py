"""An agent messages a peer on another agentsite server by its agent card's URL: two real `manage.py
serve` processes on this machine, the sender's token for the other server kept as the agent's secret,
every request through the outbound guard (loopback admitted by AGENTSITE_OUTBOUND_ALLOW, as an operator
admits a private network), the thread's next message continuing the same A2A context, and the hops
carried to the peer's turn.
"""
from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from sessions.models import Session, Turn
from tests.server_database import on_server_database
from tests.support import run_server

TO_THE_END = {"Accept": "application/x-ndjson"}  # the answer is the turn's events, to its end
PEER_TOKEN = "remote-peer-token-0123456789abcdef"
ASKER = '''from agents.sdk import Agent
agent = Agent(model="scripted:echo", peers=[{"url": "%s/support", "token": "${PEER_TOKEN}"},
                                            "http://169.254.169.254/latest"])
'''


def results(client: httpx.Client, session: str) -> list[dict]:
    events = [json.loads(line) for line in client.get(f"/asker/v1/session/{session}/events").text.splitlines()]
    return [e["data"] for e in events if e["type"] == "action.result"]


def send(to: str, text: str, thread: str = "") -> str:
    return "/call send_message " + json.dumps({"to": to, "text": text, **({"thread": thread} if thread else {})})


@pytest.fixture(scope="module")
def servers(tmp_path_factory, django_db_blocker):
    peer_root = tmp_path_factory.mktemp("peer")
    with run_server(peer_root, "--bearer-token", PEER_TOKEN, "--no-schedules") as peer:
        agents = tmp_path_factory.mktemp("agents")
        (agents / "asker" / "agent").mkdir(parents=True)
        (agents / "asker" / "agent" / "agent.py").write_text(ASKER % peer.base_url)
        (agents / "asker" / "agent" / "instructions.md").write_text("Ask the peers.\n")
        env = {"AGENTSITE_OUTBOUND_ALLOW": "127.0.0.1/32"}
        with run_server(tmp_path_factory.mktemp("asker"), "--no-schedules", "--agents", str(agents / "asker"),
                        env=env) as asker:
            with httpx.Client(base_url=asker.base_url, timeout=60) as client:
                put = client.put("/v1/agents/asker/secrets/PEER_TOKEN", json={"value": PEER_TOKEN})
                assert put.status_code in (200, 201), put.text
            yield asker, peer, peer_root, django_db_blocker


def test_an_agent_messages_a_peer_on_another_server_by_its_card_url(servers):
    asker, peer, peer_root, django_db_blocker = servers
    url = f"{peer.base_url}/support"
    message = "\n".join([send(url, "Where is my order A100?", "orders"), "/next", send(url, "And A101?", "orders")])
    with httpx.Client(base_url=asker.base_url, timeout=60) as client:
        started = client.post("/asker/v1/session", json={"message": message}, headers=TO_THE_END)
        assert started.status_code == 200, started.text
        session = started.headers["X-Session-Id"]
        found = results(client, session)
    outputs = [r["output"] for r in found]
    assert [o["reply"] for o in outputs] == ["You said: Where is my order A100?", "You said: And A101?"], found
    assert [o["state"] for o in outputs] == ["completed", "completed"]
    assert outputs[0]["contextId"] == outputs[1]["contextId"], "the thread continues the same A2A context"
    with on_server_database(Path(peer_root), django_db_blocker):
        remote = Session.objects.get(pk=outputs[0]["contextId"])
        origins = list(Turn.objects.filter(session=remote).order_by("created_at").values_list("origin", flat=True))
        assert remote.channel == "a2a" and remote.agent.slug == "support"
    assert [(o["hops"], o["peer"]) for o in origins] == [(1, "asker"), (1, "asker")]


def test_a_peer_at_a_guarded_address_is_refused(servers):
    asker, *_ = servers
    with httpx.Client(base_url=asker.base_url, timeout=60) as client:
        started = client.post("/asker/v1/session", json={"message": send("http://169.254.169.254/latest", "hi")},
                              headers=TO_THE_END)
        found = results(client, started.headers["X-Session-Id"])
    assert len(found) == 1 and "not reachable" in found[0]["error"], found
