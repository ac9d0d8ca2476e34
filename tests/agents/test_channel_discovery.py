"""Discovery of agent/channels/<id>.py: a valid declaration is loaded and
described; every incoherent one is refused with the file and the fix."""
from __future__ import annotations

from pathlib import Path

import pytest

from agents.discovery import AgentFolderError, load_agent_folder

HEAD = '''\
from pydantic import BaseModel
from agents.sdk import GET, POST, DELETE, Channel, bearer_auth, public_endpoint


class Body(BaseModel):
    text: str


def handle(req):
    return {}

'''


def folder(tmp_path: Path, channels: dict[str, str]) -> Path:
    root = tmp_path / "chan"
    (root / "agent" / "channels").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("Echo.\n")
    for name, text in channels.items():
        (root / "agent" / "channels" / name).write_text(text)
    return root


def problems(tmp_path: Path, channels: dict[str, str]) -> list[str]:
    with pytest.raises(AgentFolderError) as caught:
        load_agent_folder(folder(tmp_path, channels))
    return [str(p) for p in caught.value.problems]


def test_a_channel_is_loaded_with_its_routes_and_described_without_secrets(tmp_path):
    loaded = load_agent_folder(folder(tmp_path, {"inbox.py": HEAD + '''
channel = Channel(routes=[POST("/messages", body=Body, handler=handle), DELETE("/messages/:id", handler=handle)],
                  auth=[bearer_auth("hunter2-token"), public_endpoint()],
                  events={"message.completed": lambda e, c, x: None})
'''}))

    described = loaded.manifest()["channels"]
    assert [c["id"] for c in described] == ["inbox"]
    assert [(r["method"], r["url"]) for r in described[0]["routes"]] == [
        ("POST", "/chan/v1/channels/inbox/messages"), ("DELETE", "/chan/v1/channels/inbox/messages/:id")]
    assert described[0]["auth"] == [{"kind": "bearer_auth", "verifier": False}, {"kind": "public_endpoint"}]
    assert "hunter2-token" not in repr(described)
    assert loaded.manifest()["hooks"] == []  # the events map is not an observe-only hook


@pytest.mark.parametrize("declaration, expected", [
    ('channel = Channel(routes=[GET("/items", handler=handle)])',
     "GET /items: a GET route declares its query schema: query=Model"),
    ('channel = Channel(routes=[POST("/items", handler=handle)])',
     "POST /items: a POST route declares its body schema: body=Model"),
    ('channel = Channel(routes=[POST("items", body=Body, handler=handle)])', "the path must start with '/'"),
    ('channel = Channel(routes=[POST("/a", body=dict, handler=handle)])', "body= must be a pydantic model class"),
    ('channel = Channel(routes=[POST("/a", body=Body, handler=handle), POST("/a", body=Body, handler=handle)])',
     "another route has the same method and path"),
    ('channel = Channel(routes=[POST("/a", body=Body, handler=handle)], auth=[])', "auth=[] admits nobody"),
    ('channel = Channel(routes=[POST("/a", body=Body, handler=handle)], auth=[bearer_auth()])',
     "bearer_auth() needs a token or verifier="),
    ('channel = Channel(routes=[POST("/a", body=Body, handler=handle)], events={"done": handle})',
     "'done' is not an event type"),
    ('channel = Channel(routes=[POST("/a", body=Body, handler=handle)], state={"at": object()})',
     "state= is the starting per-session state"),
    ('channel = Channel()', "the channel declares nothing"),
    ('other = 1', "define `channel = Channel(routes=[...])`"),
])
def test_an_incoherent_channel_is_refused_naming_the_file_and_the_fix(tmp_path, declaration, expected):
    found = problems(tmp_path, {"inbox.py": HEAD + declaration + "\n"})

    assert any(p.startswith("agent/channels/inbox.py: ") and expected in p for p in found), found


def test_channel_ids_are_file_names_and_built_in_names_are_reserved(tmp_path):
    found = problems(tmp_path, {"http.py": HEAD + "channel = Channel()\n", "agent.py": HEAD + "channel = Channel()\n",
                                "Bad Name.py": "", "notes.txt": ""})

    assert "agent/channels/http.py: 'http' is the name of a built-in surface: rename the file" in found
    # The sessions agents open on each other: a channel of that name would get their events.
    assert "agent/channels/agent.py: 'agent' is the name of a built-in surface: rename the file" in found
    assert any(p.startswith("agent/channels/Bad Name.py: rename it") for p in found)
    assert any(p.startswith("agent/channels/notes.txt: channels are <id>.py files") for p in found)
