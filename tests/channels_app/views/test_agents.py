"""The agents on the server: list, info, health, and the OpenAPI document.

Bad input is in tests/channels_app/test_bad_*.py, who may do what in test_auth_policies.py."""
from __future__ import annotations

import shutil

import pytest


# -- agents, info, health, OpenAPI ---------------------------------------------------------

@pytest.mark.django_db
def test_the_agents_list_shows_each_deployed_agent(local, support_agent):
    response = local.get("/v1/agents")

    assert response.status_code == 200
    [agent] = response.json()["agents"]
    assert agent["slug"] == "support"
    assert agent["name"] == "Shop support"
    assert agent["description"] == "Answers questions about orders and issues refunds."
    assert agent["model"] == "scripted:echo"
    assert agent["deployment"]["version"] == 1


@pytest.mark.django_db
def test_info_describes_the_agent_and_its_tools_with_json_schemas(local, support_agent):
    response = local.get("/support/v1/info")

    assert response.status_code == 200
    info = response.json()
    assert info["slug"] == "support"
    assert info["model"] == "scripted:echo"
    tools = {t["name"]: t for t in info["tools"]}
    assert set(tools) == {"cancel_order", "lookup_order", "refund_order"}
    assert tools["lookup_order"]["effect"] == "read"
    assert tools["refund_order"]["effect"] == "write"
    schema = tools["lookup_order"]["inputSchema"]
    assert schema["type"] == "object"
    assert schema["required"] == ["order_id"]
    assert schema["properties"]["order_id"]["pattern"] == r"^[A-Z]\d{3}$"
    assert info["deployment"]["version"] == 1
    assert info["deployment"]["status"] == "running"
    assert info["deployment"]["contentHash"] == support_agent.active_deployment.content_hash


@pytest.mark.django_db
def test_info_names_where_each_tool_comes_from(local, support_agent):
    info = local.get("/support/v1/info").json()

    lookup = {"kind": "file", "path": "agent/tools/lookup_order.py"}
    assert [t["source"] for t in info["tools"] if t["name"] == "lookup_order"] == [lookup]
    assert {t["name"]: t["source"] for t in info["offeredTools"]}["lookup_order"] == lookup


@pytest.mark.django_db
def test_info_of_a_release_whose_manifest_predates_tool_files_still_names_their_sources(local, support_agent,
                                                                                       caplog):
    # A release deployed before manifests named each tool's file, whose files are gone: /info reads the manifest.
    release = support_agent.active_deployment
    release.manifest = {**release.manifest, "tools": [{k: v for k, v in t.items() if k != "file"}
                                                      for t in release.manifest["tools"]]}
    release.content_hash = "0" * 64  # a release this process never loaded
    release.save(update_fields=["manifest", "content_hash"])
    release.bundle.delete()
    shutil.rmtree(release.snapshot_dir())

    response = local.get("/support/v1/info")

    assert response.status_code == 200, response.content
    assert "cannot load support v1 for its tools" in caplog.text
    info = response.json()
    expected = {"kind": "file", "path": "agent/tools/cancel_order.py"}
    assert info["tools"][0]["source"] == expected and "file" not in info["tools"][0]
    assert info["offeredTools"][0]["name"] == "cancel_order" and info["offeredTools"][0]["source"] == expected


@pytest.mark.django_db
def test_the_server_answers_liveness_without_credentials_and_an_agents_only_to_its_callers(support_agent, local):
    from django.test import Client

    outsider = Client(HTTP_HOST="example.com", REMOTE_ADDR="203.0.113.9")

    assert outsider.get("/healthz").json() == {"status": "ok"}
    # Which agents exist is for callers the chain admits, as GET /v1/agents: no probing by slug.
    assert outsider.get("/support/v1/health").status_code == 401
    assert outsider.get("/nobody/v1/health").status_code == 401
    agent = local.get("/support/v1/health")
    assert agent.status_code == 200
    assert agent.json() == {"status": "ok", "agent": "support", "deployed": True}


@pytest.mark.django_db
def test_the_openapi_document_lists_the_session_routes(local):
    response = local.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")

    assert response.status_code == 200
    document = response.json()
    assert document["openapi"].startswith("3.")
    paths = document["paths"]
    for route, method in [
        ("/{slug}/v1/session", "post"),
        ("/{slug}/v1/sessions", "get"),
        ("/{slug}/v1/session/{session_id}", "get"),
        ("/{slug}/v1/session/{session_id}", "delete"),
        ("/{slug}/v1/session/{session_id}/message", "post"),
        ("/{slug}/v1/session/{session_id}/stop", "post"),
        ("/{slug}/v1/session/{session_id}/events", "get"),
        ("/{slug}/v1/session/{session_id}/stream", "get"),
        ("/{slug}/v1/info", "get"),
        ("/v1/agents", "get"),
    ]:
        assert method in paths.get(route, {}), f"{method.upper()} {route} is not in the OpenAPI document"
    create_body = paths["/{slug}/v1/session"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert create_body  # the body model is documented, not left blank


@pytest.mark.django_db
def test_the_api_docs_page_answers_200(local):
    response = local.get("/api/docs/")

    assert response.status_code == 200
    assert b"swagger" in response.content.lower()
