"""A streaming model's first delta is written at once; the rest is coalesced; a reply that comes all
at once is one write. Read as a client would: the stored `message.appended` events and their times.
Turns run in-process through django-q2's sync mode.
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from agents.discovery import deploy_agent_folder
from sessions.eventlog.events import read_events

transactional = pytest.mark.django_db(transaction=True)
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa"


def agent(tmp_path: Path, slug: str, params: dict) -> None:
    root = tmp_path / slug
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("You echo.\n")
    (root / "agent" / "agent.py").write_text(
        f'from agents.sdk import Agent\nagent = Agent(model="scripted:echo", params={params!r}, tools=[])\n')
    deploy_agent_folder(root)


def appended(client, slug: str) -> list[dict]:
    created = client.post(f"/{slug}/v1/session", json.dumps({"message": WORDS}), content_type="application/json")
    assert created.status_code == 201, created.content
    events = read_events(created.json()["sessionId"])
    assert any(e["type"] == "session.waiting" for e in events)
    return [e for e in events if e["type"] == "message.appended"]


@transactional
def test_a_streaming_models_first_delta_is_its_own_write_and_the_rest_coalesce(alice, tmp_path, sync_turns,
                                                                              settings):
    settings.AGENTSITE_DELTA_FLUSH_SECONDS = 0.2  # a window far wider than the chunks' gap
    agent(tmp_path, "thinker", {"latency_ms": 30, "chunk_delay_ms": 40})  # thinks, then streams

    deltas = appended(alice, "thinker")

    first_chunk = "You said: alpha bravo "
    assert deltas[0]["data"]["delta"] == first_chunk  # written before the second chunk came
    assert "".join(d["data"]["delta"] for d in deltas) == f"You said: {WORDS}"
    assert len(deltas) < 5  # the chunks after the first are coalesced: fewer writes than chunks
    first_at, second_at = (datetime.fromisoformat(d["at"].replace("Z", "+00:00")) for d in deltas[:2])
    assert (second_at - first_at).total_seconds() >= 0.03  # the first did not wait for the next


@transactional
def test_a_reply_that_comes_at_once_is_one_write(alice, tmp_path, sync_turns):
    agent(tmp_path, "instant", {})

    deltas = appended(alice, "instant")

    assert [d["data"]["delta"] for d in deltas] == [f"You said: {WORDS}"]
