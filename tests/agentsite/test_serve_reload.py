"""`serve --dev` deploys a served agent folder again when it is saved: a real server, real saves.

Each save is seen where an author looks: the release route the playground asks, a new
session's system prompt (the scripted model's `/system`), `/info`'s tools and the server's
output; a session opened before keeps its release; a broken file keeps the last good release
serving and says why until the fix.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support import run_server

pytestmark = pytest.mark.timeout(240)

AGENT = '''from agents.sdk import Agent

agent = Agent(model="scripted:echo", name="Hello", tools=[])
'''
TOOL = '''from pydantic import BaseModel

from agents.sdk import tool


class Input(BaseModel):
    word: str{extra}


@tool(description="Shout a word.", effect="read")
def shout(data: Input) -> str:
    return data.word.upper()
'''


def reply(client: httpx.Client, path: str, message: str) -> tuple[str, str]:
    """One turn in one request: (the session's id, the reply's full text)."""
    answer = client.post(path, json={"message": message}, headers={"Accept": "application/x-ndjson"})
    assert answer.status_code == 200, answer.text
    events = [json.loads(line) for line in answer.text.splitlines() if line.strip()]
    [text] = [e["data"]["text"] for e in events if e["type"] == "message.completed"]
    return answer.headers["X-Session-Id"], text


def release_when(client: httpx.Client, ready, timeout: float = 30) -> dict:
    """The release route's answer once `ready(answer)` holds (the save is deployed within moments)."""
    deadline = time.monotonic() + timeout
    while True:
        state = client.get("/hello/v1/release").json()
        if ready(state) or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


def tool_schema(client: httpx.Client) -> dict:
    [shout] = [t for t in client.get("/hello/v1/info").json()["tools"] if t["name"] == "shout"]
    return shout["inputSchema"]


def test_each_save_is_a_release_new_sessions_take_and_open_ones_do_not(tmp_path: Path):
    folder = tmp_path / "hello"
    (folder / "agent" / "tools").mkdir(parents=True)
    (folder / "agent" / "agent.py").write_text(AGENT)
    instructions = folder / "agent" / "instructions.md"
    instructions.write_text("You are the first draft.")
    tool = folder / "agent" / "tools" / "shout.py"
    tool.write_text(TOOL.format(extra=""))

    with run_server(tmp_path / "state", "--dev", "--no-examples", "--workers", "1", "--agents", str(folder)) as server:
        assert f"reload     watching {folder}" in server.output()
        client = server.client()
        first = client.get("/hello/v1/release").json()
        assert (first["version"], first["reloading"], first["folderError"]) == (1, True, None)
        old, said = reply(client, "/hello/v1/session", "/system")
        assert "You are the first draft." in said

        # Instructions: a new session reads the new ones; the session opened before keeps v1.
        instructions.write_text("You are the second draft.")
        assert release_when(client, lambda s: s["version"] == 2)["version"] == 2
        _, said = reply(client, "/hello/v1/session", "/system")
        assert "You are the second draft." in said and "first draft" not in said
        _, said = reply(client, f"/hello/v1/session/{old}/message", "/system")
        assert "You are the first draft." in said
        assert client.get(f"/hello/v1/session/{old}").json()["deployment"]["version"] == 1

        # A tool's schema.
        assert set(tool_schema(client)["properties"]) == {"word"}
        tool.write_text(TOOL.format(extra="\n    times: int = 1"))
        assert release_when(client, lambda s: s["version"] == 3)["version"] == 3
        assert set(tool_schema(client)["properties"]) == {"word", "times"}

        # A broken tool file: v3 keeps serving, and the file, its line and the problem are said.
        tool.write_text(TOOL.format(extra="\n    times: int =") )
        broken = release_when(client, lambda s: s["folderError"] is not None)
        assert broken["version"] == 3
        [problem] = broken["folderError"]["problems"]
        assert problem["path"] == "agent/tools/shout.py"
        assert "SyntaxError" in problem["message"] and "line 8" in problem["message"]
        assert client.get("/hello/v1/info").json()["folderError"] == broken["folderError"]
        _, said = reply(client, "/hello/v1/session", "/tools")
        assert "shout" in said  # sessions still start, on v3
        assert "does not validate; v3 still serves until it does" in server.output()
        assert "agent/tools/shout.py: failed to import: SyntaxError" in server.output()

        # The fix: a new release, and the problem is gone everywhere.
        tool.write_text(TOOL.format(extra="\n    times: int = 2"))
        fixed = release_when(client, lambda s: s["folderError"] is None)
        assert fixed["version"] == 4
        assert client.get("/hello/v1/info").json()["folderError"] is None
        assert tool_schema(client)["properties"]["times"]["default"] == 2
        assert "agent hello: v4 deployed from" in server.output()

        # Saving the files of an earlier release activates it again rather than numbering another.
        tool.write_text(TOOL.format(extra="\n    times: int = 1"))
        assert release_when(client, lambda s: s["version"] == 3)["version"] == 3
        assert "(the same files as before: activated again)" in server.output()


def test_without_dev_or_reload_nothing_is_watched(tmp_path: Path):
    folder = tmp_path / "hello"
    (folder / "agent").mkdir(parents=True)
    (folder / "agent" / "agent.py").write_text(AGENT)
    (folder / "agent" / "instructions.md").write_text("One.")
    with run_server(tmp_path / "state", "--no-examples", "--no-workers", "--agents", str(folder)) as server:
        assert server.client().get("/hello/v1/release").json()["reloading"] is False
        titles = [" ".join(p.cmdline()) for p in psutil.Process(server.process.pid).children(recursive=True)]
        assert titles and not [t for t in titles if "reload" in t]
        assert "reload " not in server.output()
