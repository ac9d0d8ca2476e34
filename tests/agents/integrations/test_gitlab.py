from __future__ import annotations

import json
import re

import pytest

from agents.integrations.events import EventKind, PayloadError, SignatureError, Subject
from agents.integrations.gitlab import GitLabClient, GitLabConfig, normalize_event, parse_delivery, verify_token
from agents.integrations.outbound import OutboundClient, OutboundHTTPError

from .conftest import LOOPBACK, fixture_bytes, fixture_json
from .fakeapi import Answer, FakeAPI, Recorded

TOKEN = "gl-webhook-token-7f3a"
HEAD = "da1560886d4f094c3e6c9ef40349f7d38b5d27d7"


def delivery(event: str, fixture: str) -> tuple[dict[str, str], bytes]:
    return ({"X-Gitlab-Event": event, "X-Gitlab-Token": TOKEN, "X-Gitlab-Event-UUID": "13792a34-cac6-4fda-95a8-c58e00a3954e",
             "Content-Type": "application/json"}, fixture_bytes(fixture))


def test_the_right_token_verifies():
    verify_token(TOKEN, {"x-gitlab-token": TOKEN})


@pytest.mark.parametrize("headers, message", [
    ({"X-Gitlab-Token": "gl-webhook-token-7f3b"}, "does not match"),
    ({"X-Gitlab-Token": TOKEN + " "}, "does not match"),
    ({"X-Gitlab-Token": ""}, "no X-Gitlab-Token"),
    ({}, "no X-Gitlab-Token"),
])
def test_a_wrong_or_missing_token_is_refused(headers, message):
    with pytest.raises(SignatureError, match=message):
        verify_token(TOKEN, headers)


def test_without_a_configured_token_nothing_verifies():
    with pytest.raises(SignatureError, match="no webhook token"):
        verify_token(None, {"X-Gitlab-Token": "anything"})


def test_a_merge_request_opened_normalizes():
    event = parse_delivery(*delivery("Merge Request Hook", "gitlab/merge_request.open.json"))
    assert (event.provider, event.kind, event.event, event.action) == ("gitlab", EventKind.PULL_REQUEST,
                                                                       "Merge Request Hook", "opened")
    assert event.delivery_id == "13792a34-cac6-4fda-95a8-c58e00a3954e"
    assert (event.repo, event.subject, event.number) == ("acme/platform/billing", Subject.PULL_REQUEST, 5)
    assert (event.sender_login, event.sender_type) == ("ada", "User")
    assert (event.head_sha, event.ref) == (HEAD, "fix-rounding")
    assert event.title == "Fix invoice rounding" and event.body.startswith("Invoices rounded half-down")
    assert event.html_url == "https://gitlab.example/acme/platform/billing/-/merge_requests/5"
    assert event.continuation_key == "mr:acme/platform/billing!5"


def test_a_merge_request_update_with_new_commits_is_a_synchronize():
    data = fixture_json("gitlab/merge_request.open.json")
    data["object_attributes"].update(action="update", oldrev="95790bf891e76fee5e1747ab589903a6a1f80f22")
    assert normalize_event(data).action == "synchronize"
    del data["object_attributes"]["oldrev"]
    assert normalize_event(data).action == "updated"
    data["object_attributes"]["action"] = "merge"
    assert normalize_event(data).action == "merged"


def test_a_note_on_a_merge_request_continues_the_merge_request():
    event = parse_delivery(*delivery("Note Hook", "gitlab/note.merge_request.json"))
    assert (event.kind, event.action, event.subject, event.number) == (EventKind.COMMENT, "created",
                                                                       Subject.PULL_REQUEST, 5)
    assert event.comment == "@billing-bot does this change the totals on old invoices?"
    assert event.comment_id == 1244 and event.html_url.endswith("#note_1244")
    assert (event.title, event.head_sha, event.sender_login) == ("Fix invoice rounding", HEAD, "ben")
    assert event.continuation_key == "mr:acme/platform/billing!5"


def test_a_note_on_an_issue_continues_the_issue():
    event = parse_delivery(*delivery("Note Hook", "gitlab/note.issue.json"))
    assert (event.kind, event.subject, event.number) == (EventKind.COMMENT, Subject.ISSUE, 31)
    assert event.comment == "Still seeing this on the March run."
    assert event.continuation_key == "issue:acme/platform/billing#31"


def test_a_note_on_a_commit_continues_on_the_commit():
    data = fixture_json("gitlab/note.issue.json")
    data["object_attributes"]["noteable_type"] = "Commit"
    data["commit"] = {"id": HEAD}
    del data["issue"]
    assert normalize_event(data).continuation_key == f"commit:acme/platform/billing@{HEAD}"


def test_a_failed_merge_request_pipeline_normalizes():
    event = parse_delivery(*delivery("Pipeline Hook", "gitlab/pipeline.failed.json"))
    assert (event.kind, event.conclusion, event.ref, event.head_sha) == (EventKind.PIPELINE, "failed",
                                                                         "fix-rounding", HEAD)
    assert event.html_url.endswith("/pipelines/31337")
    assert event.continuation_key == "mr:acme/platform/billing!5"


def test_a_branch_pipeline_continues_on_its_commit():
    data = fixture_json("gitlab/pipeline.failed.json")
    data["merge_request"] = None
    event = normalize_event(data)
    assert (event.subject, event.number) == (Subject.COMMIT, None)
    assert event.continuation_key == f"commit:acme/platform/billing@{HEAD}"


def test_a_push_normalizes():
    event = parse_delivery(*delivery("Push Hook", "gitlab/push.json"))
    assert (event.kind, event.ref, event.head_sha, event.sender_login) == (EventKind.PUSH, "refs/heads/fix-rounding",
                                                                           HEAD, "ada")
    assert event.title == "Use banker's rounding for invoice totals"
    assert event.continuation_key == f"commit:acme/platform/billing@{HEAD}"


def test_access_token_bots_are_marked_as_bots():
    data = fixture_json("gitlab/note.merge_request.json")
    data["user"]["username"] = "project_14_bot_3f9c0e2d1a7b4c5d"
    assert normalize_event(data).sender_is_bot


def test_an_unknown_hook_is_other_and_a_body_without_a_kind_is_refused():
    assert normalize_event({"object_kind": "deployment", "project": {"path_with_namespace": "a/b"}}).kind \
        is EventKind.OTHER
    with pytest.raises(PayloadError):
        parse_delivery({}, b"{}")


class FakeGitLab(FakeAPI):
    def __init__(self, token: str):
        super().__init__()

        def note(request: Recorded, match: re.Match) -> Answer:
            if request.headers.get("private-token") != token:
                return Answer(401, {"message": "401 Unauthorized"})
            return Answer(201 if request.method == "POST" else 200,
                          {"id": int(match["note"] or 1500), "body": request.json()["body"], "system": False,
                           "noteable_type": "MergeRequest", "noteable_iid": int(match["iid"])})

        notes = r"/api/v4/projects/(?P<project>[^/]+)/(?:merge_requests|issues)/(?P<iid>\d+)/notes(?:/(?P<note>\d+))?"
        self.route("POST", notes, note)
        self.route("PUT", notes, note)
        self.route("POST", r"/api/v4/projects/(?P<project>[^/]+)/statuses/(?P<sha>\w+)",
                   lambda request, match: Answer(201, request.json()))


@pytest.fixture
def gitlab():
    with FakeGitLab("glpat-reply-token") as fake:
        yield fake


@pytest.fixture
def client(gitlab):
    with OutboundClient(allow=LOOPBACK) as outbound:
        yield GitLabConfig(api_url=f"{gitlab.url}/api/v4",
                           environ={"GITLAB_TOKEN": "glpat-reply-token"}).client(outbound=outbound)


def test_a_merge_request_note_arrives_with_its_text_token_and_path(gitlab, client):
    note = client.create_merge_request_note("acme/platform/billing", 5, "Old invoices keep their totals.")
    assert note["body"] == "Old invoices keep their totals."
    [request] = gitlab.requests
    assert (request.method, request.path) == ("POST", "/api/v4/projects/acme%2Fplatform%2Fbilling/merge_requests/5/notes")
    assert request.json() == {"body": "Old invoices keep their totals."}
    assert request.headers["private-token"] == "glpat-reply-token"


def test_a_note_is_updated_and_issue_notes_and_statuses_are_sent(gitlab, client):
    client.update_merge_request_note("acme/platform/billing", 5, 1500, "Edited.")
    client.create_issue_note("acme/platform/billing", 31, "Fixed by !5.")
    client.set_commit_status("acme/platform/billing", HEAD, "running", name="agentsite/review")
    assert [(r.method, r.path) for r in gitlab.requests] == [
        ("PUT", "/api/v4/projects/acme%2Fplatform%2Fbilling/merge_requests/5/notes/1500"),
        ("POST", "/api/v4/projects/acme%2Fplatform%2Fbilling/issues/31/notes"),
        ("POST", f"/api/v4/projects/acme%2Fplatform%2Fbilling/statuses/{HEAD}"),
    ]
    assert gitlab.requests[-1].json() == {"state": "running", "name": "agentsite/review"}


def test_a_wrong_token_is_an_http_error(gitlab):
    with OutboundClient(allow=LOOPBACK) as outbound, pytest.raises(OutboundHTTPError) as caught:
        GitLabClient(f"{gitlab.url}/api/v4", "wrong", outbound=outbound).create_merge_request_note("a/b", 1, "x")
    assert caught.value.status_code == 401


@pytest.mark.parametrize("project", ["billing", "../admin", "acme/../x", "acme/bill ing"])
def test_project_paths_that_would_change_the_url_are_refused(gitlab, client, project):
    with pytest.raises(ValueError, match="not a project path"):
        client.create_merge_request_note(project, 1, "x")
    assert gitlab.requests == []


def test_the_config_never_shows_the_tokens():
    config = GitLabConfig(environ={"GITLAB_TOKEN": "glpat-secret-value", "GITLAB_WEBHOOK_TOKEN": "hook-secret-value"})
    assert config.webhook_token() == "hook-secret-value"
    shown = repr(config) + json.dumps(config.describe()) + repr(config.client())
    assert "secret-value" not in shown
    assert config.describe()["webhook_token_env"] == {"env": "GITLAB_WEBHOOK_TOKEN", "set": True}
    assert config.api_base() == "https://gitlab.com/api/v4"
    with pytest.raises(LookupError, match="GITLAB_TOKEN"):
        GitLabConfig(environ={}).client()
