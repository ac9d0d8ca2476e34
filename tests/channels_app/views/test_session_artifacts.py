"""A session's artifacts over HTTP: produced by a turn's tool, listed, downloaded by the owner only.

The turns run the scripted model, which calls a server tool that saves an
artifact through `ctx.host.artifacts`; what is checked is what a client
sees: the `artifact.saved` event, the list, the download's bytes and
headers, refusals, and that deleting the session deletes its artifacts and
its session-scoped keys.
"""
from __future__ import annotations

import json

import pytest

from agents.discovery import deploy_agent_folder
from sessions.models import Artifact, KVEntry, Session
from tests.channels_app.views.http import events_of, post_json, transactional
from tests.sessions.test_schedules import write_agent

REPORT_TOOL = """
    import base64
    from pydantic import BaseModel
    from agents.sdk import tool

    class Input(BaseModel):
        name: str = "report.md"
        text: str = "# Report"
        base64: str | None = None
        content_type: str | None = None

    @tool(description="Write a file for the user to download.", effect="read")
    def make_report(input: Input, ctx) -> dict:
        content = base64.b64decode(input.base64) if input.base64 is not None else input.text
        ctx.host.kv.set("last", input.name, scope="session")
        info = ctx.host.artifacts.save(input.name, content, content_type=input.content_type)
        return {"name": info.name, "size": info.size, "contentType": info.content_type}
"""


@pytest.fixture
def reporter(tmp_path, sync_turns):
    return deploy_agent_folder(write_agent(tmp_path / "reporter", {"agent/tools/make_report.py": REPORT_TOOL})).agent


def call(**input) -> str:
    return f"/call make_report {json.dumps(input)}"


def start(client, message: str) -> str:
    response = post_json(client, "/reporter/v1/session", {"message": message})
    assert response.status_code == 201, response.content
    return response.json()["sessionId"]


def results(session_id: str) -> list[dict]:
    return events_of(session_id, "action.result")


@transactional
def test_a_turns_artifact_downloads_for_its_principal_and_is_403_for_another(alice, bob, reporter):
    session_id = start(alice, call(name="q3-report.md", text="# Q3\nRevenue up.\n"))

    (saved,) = events_of(session_id, "artifact.saved")
    turn_id = Session.objects.get(pk=session_id).turns.get().id
    call_id = results(session_id)[0]["callId"]
    assert saved == {"name": "q3-report.md", "contentType": "text/markdown; charset=utf-8", "size": 17,
                     "sha256": saved["sha256"], "replaced": False, "callId": call_id}
    assert Session.objects.get(pk=session_id).events.get(type="artifact.saved").turn_id == turn_id

    listed = alice.get(f"/reporter/v1/session/{session_id}/artifacts")
    assert listed.status_code == 200
    (item,) = listed.json()["artifacts"]
    assert item["name"] == "q3-report.md" and item["size"] == 17 and item["turnId"] == turn_id
    assert item["callId"] == call_id and item["sha256"] == saved["sha256"]
    assert item["downloadUrl"] == f"/reporter/v1/session/{session_id}/artifacts/q3-report.md"

    download = alice.get(item["downloadUrl"])
    assert download.status_code == 200
    assert download.content == b"# Q3\nRevenue up.\n"
    assert download["Content-Type"] == "text/markdown; charset=utf-8"
    assert download["Content-Disposition"] == 'attachment; filename="q3-report.md"'
    assert download["X-Content-Type-Options"] == "nosniff"
    assert download["Content-Security-Policy"] == "sandbox"

    for path in (f"/reporter/v1/session/{session_id}/artifacts", item["downloadUrl"]):
        refused = bob.get(path)
        assert refused.status_code == 403, path
        assert refused.json()["error"]["code"] == "forbidden"
        assert b"Revenue" not in refused.content


@transactional
def test_binary_artifacts_and_names_outside_ascii_download_intact(alice, reporter):
    png = bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 255, 128])
    session_id = start(alice, call(name="graphique été.png", base64="iVBORw0KGgoA/4A="))
    (item,) = alice.get(f"/reporter/v1/session/{session_id}/artifacts").json()["artifacts"]
    assert item["downloadUrl"].endswith("/artifacts/graphique%20%C3%A9t%C3%A9.png")

    download = alice.get(item["downloadUrl"])
    assert download.status_code == 200
    assert download.content == png
    assert download["Content-Type"] == "image/png"
    assert download["Content-Disposition"] == "attachment; filename*=utf-8''graphique%20%C3%A9t%C3%A9.png"


@transactional
def test_saving_a_name_again_replaces_its_content(alice, reporter):
    session_id = start(alice, call(name="notes.txt", text="first"))
    response = post_json(alice, f"/reporter/v1/session/{session_id}/message",
                         {"message": call(name="notes.txt", text="second, longer", content_type="text/plain")})
    assert response.status_code == 202, response.content

    assert [e["replaced"] for e in events_of(session_id, "artifact.saved")] == [False, True]
    (item,) = alice.get(f"/reporter/v1/session/{session_id}/artifacts").json()["artifacts"]
    assert (item["size"], item["contentType"]) == (14, "text/plain")
    assert alice.get(item["downloadUrl"]).content == b"second, longer"
    assert item["turnId"] == Session.objects.get(pk=session_id).turns.order_by("created_at").last().id


@pytest.mark.parametrize("input, says", [
    ({"name": "../escape.txt"}, "holds a slash"),
    ({"name": "a/b.txt"}, "holds a slash"),
    ({"name": ".."}, "not a file name"),
    ({"name": ""}, "not a file name"),
    ({"name": " padded.txt"}, "white space"),
    ({"name": "tab\there.txt"}, "control character"),
    ({"name": "x" * 256}, "at most 255 bytes"),
    ({"name": "big.txt", "text": "x" * 33}, "at most 32 bytes; this one has 33"),
    ({"name": "t.txt", "content_type": "not a type"}, "not a media type"),
    ({"name": "t.txt", "content_type": "text/plain\r\nX-Evil: 1"}, "not a media type"),
    ({"name": "t.txt", "content_type": "text/plain;\r\n charset=utf-8"}, "not a media type"),
])
@transactional
def test_an_artifact_that_cannot_be_stored_is_the_tools_error_and_the_turn_goes_on(alice, reporter, settings,
                                                                                   input, says):
    settings.AGENTSITE_ARTIFACT_MAX_BYTES = 32
    session_id = start(alice, call(**input))

    (result,) = results(session_id)
    assert result["error"].startswith("HostError: ") and says in result["error"], result
    assert Session.objects.get(pk=session_id).status == "waiting"
    assert not Artifact.objects.exists()
    assert events_of(session_id, "artifact.saved") == []


@transactional
def test_a_session_keeps_a_bounded_number_of_artifacts(alice, reporter, settings):
    settings.AGENTSITE_ARTIFACTS_PER_SESSION = 2
    session_id = start(alice, "\n".join([call(name="a.txt"), call(name="b.txt")]))
    post_json(alice, f"/reporter/v1/session/{session_id}/message", {"message": call(name="c.txt")})
    post_json(alice, f"/reporter/v1/session/{session_id}/message", {"message": call(name="a.txt", text="again")})

    errors = [r.get("error") for r in results(session_id)]
    assert errors[:2] == [None, None] and "at most 2 artifacts" in errors[2] and errors[3] is None
    assert sorted(Artifact.objects.values_list("name", flat=True)) == ["a.txt", "b.txt"]


@transactional
def test_a_direct_tool_call_on_a_session_saves_an_artifact_of_that_call(alice, reporter):
    session_id = start(alice, "hello")
    response = post_json(alice, "/reporter/v1/tools/make_report/call",
                         {"input": {"name": "direct.csv", "text": "a,b\n1,2\n"}, "sessionId": session_id})
    assert response.status_code == 200, response.content

    artifact = Artifact.objects.get(session_id=session_id)
    assert artifact.call_id == response.json()["callId"]
    assert artifact.turn_id == Session.objects.get(pk=session_id).turns.get(trigger="tool").id
    assert artifact.content_type == "text/csv; charset=utf-8"
    assert alice.get(f"/reporter/v1/session/{session_id}/artifacts/direct.csv").content == b"a,b\n1,2\n"


@transactional
def test_a_tool_called_without_a_session_gets_a_clear_error(alice, reporter):
    response = post_json(alice, "/reporter/v1/tools/make_report/call", {"input": {"name": "x.txt"}})
    assert response.status_code == 200 and response.json()["isError"] is True
    assert "no session here: pass session_id=" in response.json()["error"]
    assert not Artifact.objects.exists()


@transactional
def test_unknown_artifacts_sessions_and_agents_are_404_and_bad_ids_400(alice, reporter, support_agent):
    session_id = start(alice, call(name="r.md"))
    cases = {
        f"/reporter/v1/session/{session_id}/artifacts/none.md": (404, "artifact_not_found"),
        f"/reporter/v1/session/{session_id}/artifacts/R.md": (404, "artifact_not_found"),
        f"/reporter/v1/session/{session_id}/artifacts/%2E%2E": (404, "artifact_not_found"),
        f"/reporter/v1/session/{session_id}/artifacts/{'x' * 3000}": (404, "artifact_not_found"),
        "/reporter/v1/session/ses_nope/artifacts": (404, "session_not_found"),
        "/reporter/v1/session/ses_nope/artifacts/r.md": (404, "session_not_found"),
        f"/support/v1/session/{session_id}/artifacts/r.md": (404, "session_not_found"),
        f"/nobody/v1/session/{session_id}/artifacts": (404, "agent_not_found"),
        f"/reporter/v1/session/{session_id}/artifacts/r%00.md": (400, "invalid_text"),
    }
    for path, (status, code) in cases.items():
        response = alice.get(path)
        assert (response.status_code, response.json()["error"]["code"]) == (status, code), path


@transactional
def test_a_download_is_served_whatever_the_client_accepts(alice, reporter):
    session_id = start(alice, call(name="r.md", text="x"))
    path = f"/reporter/v1/session/{session_id}/artifacts/r.md"
    for accept in ("application/json", "text/csv", "image/*", "*/*"):
        response = alice.get(path, HTTP_ACCEPT=accept)
        assert (response.status_code, response.content) == (200, b"x"), accept
    missing = alice.get(path + "x", HTTP_ACCEPT="image/png")
    assert (missing.status_code, missing["Content-Type"]) == (404, "application/json")


@transactional
def test_deleting_a_session_deletes_its_artifacts_and_session_keys(alice, reporter):
    session_id = start(alice, call(name="r.md"))
    kept = start(alice, call(name="kept.md"))
    assert KVEntry.objects.filter(session_id=session_id).exists()

    assert alice.delete(f"/reporter/v1/session/{session_id}").status_code == 204

    assert not Artifact.objects.filter(session_id=session_id).exists()
    assert not KVEntry.objects.filter(session_id=session_id).exists()
    assert alice.get(f"/reporter/v1/session/{session_id}/artifacts/r.md").status_code == 404
    assert Artifact.objects.filter(session_id=kept).count() == 1, "other sessions keep theirs"
    assert KVEntry.objects.filter(session_id=kept).count() == 1
