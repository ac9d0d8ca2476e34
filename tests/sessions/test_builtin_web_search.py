"""The `web_search` built-in against loopback servers standing in for a SearXNG instance and the Brave
Search API; without a backend (or its key) it is not offered, and /info says why."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.discovery import deploy_agent_folder
from sessions.eventlog.events import read_events
from tests.agents.integrations.fakeapi import Answer, FakeAPI

transactional = pytest.mark.django_db(transaction=True)

SEARXNG = {"query": "opening hours", "results": [
    {"title": "Shop hours", "url": "https://shop.example/hours", "content": "We open at 9."},
    {"title": "Holidays", "url": "https://shop.example/holidays", "content": None},
    {"title": "No link", "content": "dropped"}]}
BRAVE = {"web": {"results": [{"title": "Shop hours", "url": "https://shop.example/hours",
                              "description": "We open at 9."}]}}


def deploy_searcher(root: Path) -> None:
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("Search.\n")
    (root / "agent" / "agent.py").write_text(
        "from agents.sdk import Agent\nagent = Agent(model='scripted:echo', tools=[], builtins=['web_search'])\n")
    deploy_agent_folder(root)


def search(client, arguments: dict) -> dict:
    response = client.post("/searcher/v1/session", {"message": "/call web_search " + json.dumps(arguments)},
                           content_type="application/json")
    assert response.status_code == 201, response.content
    return [e["data"] for e in read_events(response.json()["sessionId"]) if e["type"] == "action.result"][0]


@transactional
def test_results_come_from_a_searxng_instance_as_title_url_and_snippet(local, sync_turns, tmp_path, settings):
    deploy_searcher(tmp_path / "searcher")
    with FakeAPI() as searxng:
        searxng.route("GET", "/search", Answer(body=SEARXNG))
        settings.AGENTSITE_SEARCH_BACKEND = f"searxng:{searxng.url}"

        found = search(local, {"query": "opening hours", "max_results": 5})["output"]

        assert found["backend"] == "searxng" and found["untrusted"] is True
        assert found["results"] == [
            {"title": "Shop hours", "url": "https://shop.example/hours", "snippet": "We open at 9."},
            {"title": "Holidays", "url": "https://shop.example/holidays", "snippet": ""}]
        assert searxng.requests[0].query == {"q": ["opening hours"], "format": ["json"]}
        assert search(local, {"query": "opening hours", "max_results": 1})["output"]["results"][0]["title"] == \
            "Shop hours"

        searxng.routes.clear()
        searxng.route("GET", "/search", Answer(403, {"error": "json format disabled"}))
        assert "answered HTTP 403" in search(local, {"query": "x"})["error"]


@transactional
def test_results_come_from_the_brave_api_with_its_key(local, sync_turns, tmp_path, settings, monkeypatch):
    deploy_searcher(tmp_path / "searcher")
    with FakeAPI() as brave:
        brave.route("GET", "/res/v1/web/search", Answer(body=BRAVE))
        settings.AGENTSITE_SEARCH_BACKEND = f"brave:{brave.url}"
        monkeypatch.setenv("BRAVE_SEARCH_API_KEY", "brave-key")

        found = search(local, {"query": "opening hours", "max_results": 3})["output"]

        assert found["results"] == [{"title": "Shop hours", "url": "https://shop.example/hours",
                                     "snippet": "We open at 9."}]
        seen = brave.requests[0]
        assert seen.headers["x-subscription-token"] == "brave-key" and seen.query["count"] == ["3"]


@transactional
def test_without_a_backend_or_its_key_the_tool_is_not_offered_and_info_says_why(local, tmp_path, settings,
                                                                                monkeypatch):
    deploy_searcher(tmp_path / "searcher")
    settings.AGENTSITE_SEARCH_BACKEND = ""
    info = local.get("/searcher/v1/info").json()
    assert info["builtins"] == ["web_search"]
    assert "web_search" not in {t["name"] for t in info["offeredTools"]}
    assert "AGENTSITE_SEARCH_BACKEND" in info["unavailableBuiltins"]["web_search"]

    settings.AGENTSITE_SEARCH_BACKEND = "brave"
    monkeypatch.delenv("BRAVE_SEARCH_API_KEY", raising=False)
    assert "BRAVE_SEARCH_API_KEY" in local.get("/searcher/v1/info").json()["unavailableBuiltins"]["web_search"]

    monkeypatch.setenv("BRAVE_SEARCH_API_KEY", "brave-key")
    settings.AGENTSITE_SEARCH_BACKEND = "brave:http://search-proxy.example"
    assert "in the clear" in local.get("/searcher/v1/info").json()["unavailableBuiltins"]["web_search"]
    settings.AGENTSITE_SEARCH_BACKEND = "brave"
    info = local.get("/searcher/v1/info").json()
    assert info["unavailableBuiltins"] == {}
    assert "web_search" in {t["name"] for t in info["offeredTools"]}
