"""Inputs the OpenAPI document once called valid and the server refused: each answer, and the document now agreeing.

Each was found by Schemathesis with a random seed. For each: what the server
answers (status and body), and that the document's schema refuses what the
server refuses and takes what it takes.
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from agents.discovery import deploy_agent_folder
from sessions.models import Reminder, Session
from tests.channels_app.bad_input import error_of, post_json


@pytest.fixture
def document(local) -> dict:
    response = local.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return response.json()


def schema_takes(document: dict, name: str, value) -> bool:
    validator = Draft202012Validator({"$ref": f"#/components/schemas/{name}", "components": document["components"]})
    return validator.is_valid(value)


def session_of(client, slug: str = "support", **body) -> dict:
    response = post_json(client, f"/{slug}/v1/session", {"message": "hello", **body})
    assert response.status_code == 201, response.content
    return response.json()


# -- an empty cursor is none --------------------------------------------------------------------

@pytest.mark.django_db
def test_an_empty_cursor_is_the_first_page(local, support_agent):
    ids = [session_of(local)["sessionId"] for _ in range(2)]

    response = local.get("/support/v1/sessions", {"cursor": "", "limit": 1})

    assert response.status_code == 200
    body = response.json()
    assert [s["sessionId"] for s in body["sessions"]] == ids[-1:]
    assert body["nextCursor"]


@pytest.mark.django_db
def test_an_empty_cursor_on_another_list_is_the_whole_list(local, support_agent):
    session_id = session_of(local)["sessionId"]

    response = local.get(f"/support/v1/session/{session_id}/approvals", {"cursor": ""})

    assert (response.status_code, response.json()) == (200, {"approvals": []})


@pytest.mark.django_db
def test_a_list_past_one_page_has_a_next_cursor_that_pages_through_it(local, support_agent):
    session_id = session_of(local)["sessionId"]
    for prompt in ("a", "b", "c"):
        assert post_json(local, f"/support/v1/session/{session_id}/reminders",
                         {"delay": "1h", "prompt": prompt}).status_code == 201

    first = local.get(f"/support/v1/session/{session_id}/reminders", {"limit": 2}).json()
    second = local.get(f"/support/v1/session/{session_id}/reminders",
                       {"limit": 2, "cursor": first["nextCursor"]}).json()

    assert [r["prompt"] for r in first["reminders"] + second["reminders"]] == ["c", "b", "a"]
    assert "nextCursor" not in second
    assert error_of(local.get(f"/support/v1/session/{session_id}/reminders", {"cursor": "x"}), 400)["code"] == \
        "invalid_cursor"


# -- base64 content ------------------------------------------------------------------------------

@pytest.mark.django_db
def test_content_that_is_not_base64_is_refused_by_the_server_and_the_document(local, support_agent, document):
    sent = {"path": "a.bin", "content": "not base64!", "encoding": "base64"}

    error = error_of(post_json(local, "/support/v1/session", {"message": "hi", "workspaceFiles": [sent]}), 400)

    assert error == {"code": "invalid_request", "message": "workspaceFiles[0].content is not valid base64",
                     "details": None}
    assert not Session.objects.exists()
    assert not schema_takes(document, "WorkspaceFile", sent)
    assert schema_takes(document, "WorkspaceFile", {**sent, "content": base64.b64encode(b"\x00\x01").decode()})
    assert schema_takes(document, "WorkspaceFile", {**sent, "encoding": "utf-8"})
    assert schema_takes(document, "WorkspaceFile", {"path": "a.txt", "content": "not base64!"})


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["..", "a/../b", "a%2Fb", ".", "./.", "/abs", "back\\slash"])
def test_a_path_the_server_refuses_is_refused_by_the_document(local, support_agent, document, path):
    sent = {"path": path, "content": "x"}

    error = error_of(post_json(local, "/support/v1/session", {"message": "hi", "workspaceFiles": [sent]}), 400)

    assert error["code"] == "invalid_request" and error["details"][0]["field"] == "workspaceFiles.0.path"
    assert not schema_takes(document, "WorkspaceFile", sent)


# -- no runtime on a follow-up -------------------------------------------------------------------

@pytest.mark.django_db
def test_a_runtime_on_a_follow_up_is_refused_by_the_server_and_the_document(local, support_agent, document):
    token = session_of(local)["continuationToken"]
    body = {"message": "again", "continuationToken": token, "runtime": {"kind": "local"}}

    error = error_of(post_json(local, "/support/v1/session", body), 400)

    assert error == {"code": "runtime_overlay_refused", "details": None,
                     "message": "runtime is chosen when a session is created: a follow-up cannot change it"}
    assert not schema_takes(document, "CreateSession", body)
    assert schema_takes(document, "CreateSession", {**body, "runtime": None})
    assert schema_takes(document, "CreateSession", {**body, "continuationToken": None})
    assert post_json(local, "/support/v1/session", {**body, "runtime": None}).status_code == 202


@pytest.mark.django_db
def test_the_runtime_overlay_document_names_what_a_send_may_overlay(document):
    overlay = document["components"]["schemas"]["RuntimeOverlay"]

    assert overlay["properties"]["kind"]["const"] == "local"
    assert set(overlay["properties"]) == {"kind", "workspaceFiles"} and overlay["additionalProperties"] is False


# -- reminder durations --------------------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("every,message", [
    ("0m", "'0m' is not a duration: use a number and a unit, e.g. '90s', '20m', '2h', '1d'"),
    ("3651d", "'3651d' is too long: durations go up to 3650d (ten years)"),
    ("315360001s", "'315360001s' is too long: durations go up to 3650d (ten years)"),
])
def test_a_reminder_out_of_range_is_refused_by_the_server_and_the_document(local, support_agent, document,
                                                                           every, message):
    session_id = session_of(local)["sessionId"]
    body = {"every": every, "prompt": "wake up"}

    error = error_of(post_json(local, f"/support/v1/session/{session_id}/reminders", body), 400)

    assert error == {"code": "invalid_reminder", "message": message, "details": None}
    assert not Reminder.objects.exists()
    assert not schema_takes(document, "CreateReminder", body)


@pytest.mark.django_db
@pytest.mark.parametrize("body", [{"every": "3650d"}, {"delay": " 0090 s "}, {"every": "315360000s"},
                                  {"cron": "*/15 9 1,28 * 1"}, {"delay": "", "cron": "0 0 * * 7"}])
def test_a_reminder_the_document_takes_is_taken(local, support_agent, document, body):
    session_id = session_of(local)["sessionId"]
    body = {**body, "prompt": "wake up"}

    assert schema_takes(document, "CreateReminder", body)
    assert post_json(local, f"/support/v1/session/{session_id}/reminders", body).status_code == 201


# -- links ---------------------------------------------------------------------------------------

@pytest.mark.django_db
def test_a_created_session_links_to_every_operation_that_takes_its_id(document):
    operations = {o["operationId"]: (path, o) for path, methods in document["paths"].items()
                  for o in methods.values() if isinstance(o, dict) and "operationId" in o}
    links = operations["v1_session_create"][1]["responses"]["201"]["links"]

    targets = {link["operationId"] for link in links.values()}
    assert {"session_stream", "v1_session_stop_create", "v1_session_approvals_retrieve",
            "v1_session_artifacts_list", "v1_tools_call_create"} <= targets
    for path, operation in operations.values():
        for response in operation["responses"].values():
            for link in response.get("links", {}).values():
                assert link["operationId"] in operations, link
                target_path, target = operations[link["operationId"]]
                names = {p["name"] for p in target.get("parameters", []) if p["in"] == "path"}
                assert set(link["parameters"]) == names, (link, target_path)


@pytest.mark.django_db(transaction=True)
def test_the_linked_tool_call_runs_in_the_session_of_an_agent_that_offers_it(local, document, settings):
    deploy_agent_folder(Path(settings.BASE_DIR) / "examples" / "notes")
    created = session_of(local, "notes")
    link = next(v for path, methods in document["paths"].items() if path == "/{slug}/v1/session"
                for v in [methods["post"]["responses"]["201"]["links"]["WorkspaceToolCall"]])
    body = json.loads(json.dumps(link["requestBody"]).replace('"$response.body#/sessionId"',
                                                                json.dumps(created["sessionId"])))

    response = post_json(local, f"/notes/v1/tools/{link['parameters']['tool_name']}/call", body)

    assert response.status_code in (200, 409), response.content  # 409: the first turn still holds the session


# -- a tool's input ------------------------------------------------------------------------------

@pytest.mark.django_db
def test_each_deployed_tool_has_an_operation_with_its_input_schema(local, support_agent):
    document = local.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    operation = document["paths"]["/support/v1/tools/lookup_order/call"]["post"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    validator = Draft202012Validator({**body, "components": document["components"]})
    templated = document["paths"]["/{slug}/v1/tools/{tool_name}/call"]["post"]
    tool_name = next(p for p in templated["parameters"] if p["name"] == "tool_name")

    assert body["required"] == ["input"] and body["properties"]["input"]["required"] == ["order_id"]
    assert "lookup_order" in tool_name["schema"]["not"]["enum"]
    assert validator.is_valid({"input": {"order_id": "A100"}})
    assert post_json(local, "/support/v1/tools/lookup_order/call", {"input": {"order_id": "A100"}}).status_code == 200
    assert not validator.is_valid({"input": {}})
    assert error_of(post_json(local, "/support/v1/tools/lookup_order/call", {"input": {}}), 400)["code"] == \
        "invalid_input"
    assert not validator.is_valid({"input": {"order_id": "A100", "note": {"a\x00": 1}}})
    assert error_of(post_json(local, "/support/v1/tools/lookup_order/call",
                              {"input": {"order_id": "A100", "note": {"a\x00": 1}}}), 400)["code"] == "invalid_text"


@pytest.mark.django_db
def test_a_later_fetch_of_the_document_names_what_changed_since(local, support_agent, settings):
    """The document of the code is made once; what a fetch gets still follows agents deployed and limits set."""
    def fetch() -> dict:
        return local.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    first = fetch()
    assert fetch() == first
    assert "/ops/v1/tools/write_incident_report/call" not in first["paths"]

    deploy_agent_folder(Path(__file__).resolve().parents[2] / "examples" / "ops")
    settings.AGENTSITE_MAX_MESSAGE_CHARS = 10
    later = fetch()
    assert "/ops/v1/tools/write_incident_report/call" in later["paths"]
    assert later["components"]["schemas"]["FollowUp"]["properties"]["message"]["maxLength"] == 10
    assert first["components"]["schemas"]["FollowUp"]["properties"]["message"]["maxLength"] != 10
