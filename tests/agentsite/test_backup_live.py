"""A backup taken while a server runs turns, restored into a fresh state root and served again.

The sessions that had finished read back through the API exactly as before; the turn that was
streaming when the backup was taken ends as a lost worker's (`worker_lost`), its log contiguous;
a call parked for approval is decided on the restored server and runs.
"""
from __future__ import annotations

import shutil

import pytest

from tests.agentsite.backup_support import manage_json, state_env
from tests.sessions.test_live_stream import assert_contiguous, dump
from tests.support import ROOT, read_stream_until, run_server

AGENT = 'from agents.sdk import Agent\nagent = Agent(model="scripted:echo", params={"chunk_delay_ms": %d})\n'
MESSAGE = " ".join(f"w{i:03d}" for i in range(150))  # ~25 streamed chunks


def agents_folder(parent):
    for slug, delay in (("quick", 0), ("slow", 400)):  # slow: ~10 s a turn, still running at the backup
        (parent / slug / "agent").mkdir(parents=True)
        (parent / slug / "agent" / "agent.py").write_text(AGENT % delay)
        (parent / slug / "agent" / "instructions.md").write_text("Echo the user.\n")
    (parent / "quick" / "agent" / "tools").mkdir()
    shutil.copy(ROOT / "examples" / "support" / "agent" / "tools" / "cancel_order.py", parent / "quick" / "agent" / "tools")
    return parent


def start(client, slug: str, message: str = MESSAGE) -> str:
    response = client.post(f"/{slug}/v1/session", json={"message": message})
    assert response.status_code == 201, response.text
    return response.json()["sessionId"]


@pytest.mark.timeout(180)
def test_a_backup_taken_mid_turn_restores_finished_sessions_as_they_were_and_the_turn_as_lost(tmp_path):
    agents = agents_folder(tmp_path / "agents")
    live, restored = tmp_path / "live", tmp_path / "restored"
    with run_server(live, "--agents", str(agents)) as server, server.client(timeout=30) as client:
        finished = []
        for _ in range(3):
            session_id = start(client, "quick")
            read_stream_until(client, f"/quick/v1/session/{session_id}/stream?startIndex=0", "session.waiting")
            finished.append(session_id)
        parked = start(client, "quick", '/call cancel_order {"order_id": "A102"}')
        read_stream_until(client, f"/quick/v1/session/{parked}/stream?startIndex=0", "action.approval_requested")
        held = start(client, "slow")
        read_stream_until(client, f"/slow/v1/session/{held}/stream?startIndex=0", "message.appended", count=2)
        manifest = manage_json(state_env(live), "backup", "--out", str(tmp_path / "live.tar.gz"))
        before = {session_id: dump(client, session_id, "quick") for session_id in finished}
    assert manifest["counts"]["runningTurns"] == 1

    report = manage_json(state_env(restored), "restore", str(tmp_path / "live.tar.gz"))
    assert report["lostTurnsEnded"] == 1
    with run_server(restored, "--agents", str(agents)) as server, server.client(timeout=30) as client:
        for session_id in finished:
            assert dump(client, session_id, "quick") == before[session_id]
        events = dump(client, held, "slow")
        assert_contiguous(events, held)
        assert [e["type"] for e in events[-2:]] == ["turn.failed", "session.waiting"]
        assert events[-2]["data"]["code"] == "worker_lost"
        assert client.get(f"/slow/v1/session/{held}").json()["status"] == "waiting"

        waiting = client.get(f"/quick/v1/session/{parked}/approvals").json()
        call_id = waiting["approvals"][0]["callId"]
        decided = client.post(f"/quick/v1/session/{parked}/approvals/{call_id}", json={"decision": "approve"})
        assert decided.status_code in (200, 202), decided.text
        events = read_stream_until(client, f"/quick/v1/session/{parked}/stream?startIndex=0", "session.waiting")
        result = [e for e in events if e["type"] == "action.result"][-1]
        assert result["data"]["output"]["cancelled"] is True
