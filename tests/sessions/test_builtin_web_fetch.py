"""The `web_fetch` built-in (`Agent(builtins=["web_fetch"])`) in real turns against a loopback web
server: a page as Markdown, text or as served, a cut to max_bytes, types it refuses, and the egress
door's rules (a redirect to a private address, a domain the release does not allow)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.discovery import AgentFolderError, deploy_agent_folder, deploy_release, load_agent_folder
from agents.integrations.outbound import guard
from sessions.eventlog.events import read_events
from tests.agents.integrations.fakeapi import Answer, FakeAPI

transactional = pytest.mark.django_db(transaction=True)

PAGE = b"""<!doctype html><html><head><title>Shop</title><style>p{color:red}</style>
<script>alert('no')</script></head><body><h1>Opening hours</h1>
<p>We open at <b>9</b> and close at 17.</p><ul><li>Monday</li><li>Tuesday</li></ul>
<a href="/contact">Contact us</a></body></html>"""


def write_agent(root: Path, builtins: list[str]) -> Path:
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("Look things up on the web.\n")
    (root / "agent" / "agent.py").write_text(
        f"from agents.sdk import Agent\nagent = Agent(model='scripted:echo', tools=[], builtins={builtins!r})\n")
    return root


def fetch(client, arguments: dict) -> dict:
    """One turn that calls web_fetch; the call's action.result."""
    response = client.post("/browser/v1/session", {"message": "/call web_fetch " + json.dumps(arguments)},
                           content_type="application/json")
    assert response.status_code == 201, response.content
    [result] = [e["data"] for e in read_events(response.json()["sessionId"]) if e["type"] == "action.result"]
    return result


@pytest.fixture
def web(settings):
    settings.AGENTSITE_OUTBOUND_ALLOW = ["127.0.0.1/32"]  # the loopback server stands in for the web
    with FakeAPI() as fake:
        fake.route("GET", "/hours", Answer(body=PAGE, headers={"content-type": "text/html; charset=utf-8"}))
        fake.route("GET", "/big", Answer(body=b"<html><body>" + b"<p>word word word</p>" * 20_000 + b"</body></html>",
                                         headers={"content-type": "text/html"}))
        fake.route("GET", "/data.json", Answer(body={"open": True}))
        fake.route("GET", "/menu.pdf", Answer(body=b"%PDF-1.7 ...", headers={"content-type": "application/pdf"}))
        fake.route("GET", "/inside", Answer(302, headers={"location": "http://10.0.0.7/admin"}))
        fake.route("GET", "/latin", Answer(body=b'<html><head><meta charset="iso-8859-1"></head><body><p>caf\xe9</p>'
                                                b"</body></html>", headers={"content-type": "text/html"}))
        yield fake


@transactional
def test_a_page_comes_as_markdown_text_or_as_served_and_is_marked_untrusted(local, sync_turns, tmp_path, web):
    deploy_agent_folder(write_agent(tmp_path / "browser", ["web_fetch"]))

    page = fetch(local, {"url": f"{web.url}/hours"})["output"]
    assert page["status"] == 200 and page["contentType"] == "text/html" and page["format"] == "markdown"
    assert page["content"].startswith("# Opening hours")
    assert "We open at **9** and close at 17." in page["content"] and "* Monday" in page["content"]
    assert "[Contact us](/contact)" in page["content"]
    assert "alert" not in page["content"] and "color:red" not in page["content"]
    assert page["untrusted"] is True and "untrusted content" in page["notice"]

    text = fetch(local, {"url": f"{web.url}/hours", "format": "text"})["output"]["content"]
    assert "We open at" in text and "**" not in text and "<p>" not in text
    raw = fetch(local, {"url": f"{web.url}/hours", "format": "raw"})["output"]["content"]
    assert raw == PAGE.decode()
    assert fetch(local, {"url": f"{web.url}/latin"})["output"]["content"] == "café"  # the page's own charset
    data = fetch(local, {"url": f"{web.url}/data.json"})["output"]
    assert json.loads(data["content"]) == {"open": True} and data["format"] == "raw"


@transactional
def test_an_oversize_page_is_cut_and_binary_types_are_refused(local, sync_turns, tmp_path, web):
    deploy_agent_folder(write_agent(tmp_path / "browser", ["web_fetch"]))

    big = fetch(local, {"url": f"{web.url}/big", "max_bytes": 5000})["output"]
    assert big["truncated"] is True and len(big["content"].encode()) <= 5000 and big["bytes"] > 100_000
    pdf = fetch(local, {"url": f"{web.url}/menu.pdf"})
    assert "output" not in pdf and "does not extract PDFs" in pdf["error"]
    missing = fetch(local, {"url": f"{web.url}/nowhere"})
    assert "answered HTTP 404" in missing["error"]


@transactional
def test_the_egress_door_refuses_a_redirect_to_a_private_address_and_a_domain_not_allowed(
        local, sync_turns, tmp_path, web, monkeypatch):
    deploy_agent_folder(write_agent(tmp_path / "browser", ["web_fetch"]))
    inside = fetch(local, {"url": f"{web.url}/inside"})
    assert "output" not in inside and "10.0.0.7" in inside["error"] and "private" in inside["error"]

    monkeypatch.setattr(guard, "system_resolver", lambda host, port: ["127.0.0.1"])  # *.test names are loopback
    deploy_release(write_agent(tmp_path / "narrow" / "browser", ["web_fetch"]), allowed_domains=["docs.example.test"])
    allowed = fetch(local, {"url": f"http://docs.example.test:{web.port}/hours"})
    assert allowed["output"]["content"].startswith("# Opening hours")
    refused = fetch(local, {"url": f"http://evil.example.test:{web.port}/hours"})
    assert "evil.example.test is not one of the agent's allowed domains" in refused["error"]
    assert [r.path for r in web.requests] == ["/inside", "/hours"]


@transactional
def test_info_lists_the_declared_built_ins_with_their_schemas_and_others_have_none(local, tmp_path):
    deploy_agent_folder(write_agent(tmp_path / "browser", ["web_fetch"]))
    deploy_agent_folder(write_agent(tmp_path / "plain", []))

    info = local.get("/browser/v1/info").json()
    assert info["builtins"] == ["web_fetch"]
    tools = {t["name"]: t for t in info["offeredTools"]}
    assert tools["web_fetch"]["family"] == "builtin"
    assert tools["web_fetch"]["source"] == {"kind": "builtin", "feature": "builtins"}
    assert set(tools["web_fetch"]["inputSchema"]["properties"]) == {"url", "format", "max_bytes"}
    plain = local.get("/plain/v1/info").json()
    assert plain["builtins"] == [] and "web_fetch" not in {t["name"] for t in plain["offeredTools"]}


def test_an_unknown_built_in_is_refused_naming_the_file_and_the_choices(tmp_path):
    with pytest.raises(AgentFolderError) as refused:
        load_agent_folder(write_agent(tmp_path / "odd", ["web_fetch", "telepathy"]))
    assert "agent/agent.py: builtins: 'telepathy' is not a built-in tool this server offers" in str(refused.value)
    assert "choose from web_fetch, web_search, todos" in str(refused.value)


def test_an_agents_own_tool_may_not_take_the_name_of_a_built_in_it_declares(tmp_path):
    root = write_agent(tmp_path / "clash", ["web_fetch"])
    (root / "agent" / "tools").mkdir()
    (root / "agent" / "tools" / "web_fetch.py").write_text(
        "from pydantic import BaseModel\nfrom agents.sdk import tool\n\n\nclass Input(BaseModel):\n    url: str\n\n\n"
        "@tool(description='Mine.')\ndef web_fetch(input: Input, ctx) -> str:\n    return 'mine'\n")
    with pytest.raises(AgentFolderError) as refused:
        load_agent_folder(root)
    assert "agent/tools/web_fetch.py: 'web_fetch' is a built-in tool name: rename the file" in str(refused.value)
