from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re

import pytest

from agents.integrations.bitbucket import BitbucketClient, BitbucketConfig, normalize_event, parse_delivery, \
    verify_signature
from agents.integrations.events import EventKind, PayloadError, SignatureError, Subject
from agents.integrations.outbound import OutboundClient

from .conftest import LOOPBACK, fixture_bytes, fixture_json
from .fakeapi import Answer, FakeAPI, Recorded

SECRET = "bb-hook-secret-91c2"


def signed(body: bytes, secret: str = SECRET) -> dict[str, str]:
    return {"X-Hub-Signature": "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()}


def cloud(key: str, fixture: str) -> tuple[dict[str, str], bytes]:
    body = fixture_bytes(fixture)
    return {"X-Event-Key": key, "X-Request-UUID": "4b8c3a1e-2f0d-4c6b-9a8e-7d6c5b4a3f2e",
            "X-Hook-UUID": "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d", **signed(body)}, body


def data_center(key: str, fixture: str) -> tuple[dict[str, str], bytes]:
    body = fixture_bytes(fixture)
    return {"X-Event-Key": key, "X-Request-Id": "d1e2f3a4-b5c6-4d7e-8f9a-0b1c2d3e4f5a", **signed(body)}, body


@pytest.mark.parametrize("make, key, fixture", [
    (cloud, "pullrequest:created", "bitbucket/cloud.pullrequest_created.json"),
    (data_center, "pr:opened", "bitbucket/dc.pr_opened.json"),
])
def test_both_editions_sign_with_a_sha256_x_hub_signature(make, key, fixture):
    headers, body = make(key, fixture)
    verify_signature(SECRET, headers, body)
    with pytest.raises(SignatureError, match="does not match"):
        verify_signature(SECRET, headers, body + b" ")
    tampered = {**headers, "X-Hub-Signature": headers["X-Hub-Signature"][:-2] + "00"}
    with pytest.raises(SignatureError, match="does not match"):
        verify_signature(SECRET, tampered, body)


def test_a_missing_sha1_or_unconfigured_signature_is_refused():
    body = b"{}"
    with pytest.raises(SignatureError, match="no X-Hub-Signature"):
        verify_signature(SECRET, {}, body)
    sha1 = "sha1=" + hmac.new(SECRET.encode(), body, hashlib.sha1).hexdigest()
    with pytest.raises(SignatureError, match="sha256=<hex>"):
        verify_signature(SECRET, {"X-Hub-Signature": sha1}, body)
    with pytest.raises(SignatureError, match="no webhook secret"):
        verify_signature(None, signed(body), body)


def test_a_cloud_pull_request_created_normalizes():
    event = parse_delivery(*cloud("pullrequest:created", "bitbucket/cloud.pullrequest_created.json"))
    assert (event.provider, event.kind, event.event, event.action) == ("bitbucket", EventKind.PULL_REQUEST,
                                                                       "pullrequest:created", "opened")
    assert event.delivery_id == "4b8c3a1e-2f0d-4c6b-9a8e-7d6c5b4a3f2e"
    assert (event.repo, event.subject, event.number) == ("acme-team/payments-api", Subject.PULL_REQUEST, 5)
    assert (event.sender_login, event.sender_type) == ("priya", "User")
    assert (event.head_sha, event.ref) == ("4e5f6a7b8c9d", "retry-soft-declines")
    assert event.title == "Retry declined card payments once" and event.body.startswith("Soft declines")
    assert event.html_url == "https://bitbucket.org/acme-team/payments-api/pull-requests/5"
    assert event.continuation_key == "pr:acme-team/payments-api#5"


def test_a_cloud_pull_request_updated_normalizes():
    event = parse_delivery(*cloud("pullrequest:updated", "bitbucket/cloud.pullrequest_created.json"))
    assert (event.kind, event.action) == (EventKind.PULL_REQUEST, "updated")


def test_a_cloud_comment_continues_the_pull_request():
    event = parse_delivery(*cloud("pullrequest:comment_created", "bitbucket/cloud.pullrequest_comment_created.json"))
    assert (event.kind, event.action, event.number) == (EventKind.COMMENT, "created", 5)
    assert event.comment == "@payments-bot is a retry safe for 3-D Secure payments?"
    assert event.comment_id == 512340987 and event.html_url.endswith("#comment-512340987")
    assert event.sender_login == "tom"
    assert event.continuation_key == "pr:acme-team/payments-api#5"


def test_a_cloud_push_normalizes():
    event = parse_delivery(*cloud("repo:push", "bitbucket/cloud.repo_push.json"))
    assert (event.kind, event.ref, event.head_sha) == (EventKind.PUSH, "main", "1f2e3d4c5b6a79881726354453627180a9b8c7d6")
    assert event.title == "Merged in retry-soft-declines (pull request #5)"
    assert event.continuation_key == "commit:acme-team/payments-api@1f2e3d4c5b6a79881726354453627180a9b8c7d6"


def test_a_data_center_pull_request_opened_normalizes():
    event = parse_delivery(*data_center("pr:opened", "bitbucket/dc.pr_opened.json"))
    assert (event.kind, event.event, event.action) == (EventKind.PULL_REQUEST, "pr:opened", "opened")
    assert event.delivery_id == "d1e2f3a4-b5c6-4d7e-8f9a-0b1c2d3e4f5a"
    assert (event.repo, event.number) == ("ENERGY/tariffs", 42)
    assert (event.sender_login, event.sender_type) == ("jlee", "User")
    assert (event.head_sha, event.ref) == ("b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2", "cache-tariffs")
    assert event.title == "Cache tariff lookups"
    assert event.html_url == "https://bitbucket.corp.example/projects/ENERGY/repos/tariffs/pull-requests/42"
    assert event.continuation_key == "pr:ENERGY/tariffs#42"


def test_a_data_center_comment_continues_the_pull_request():
    event = parse_delivery(*data_center("pr:comment:added", "bitbucket/dc.pr_comment_added.json"))
    assert (event.kind, event.action, event.comment_id) == (EventKind.COMMENT, "created", 8071)
    assert event.comment == "@tariff-bot what happens when a table changes mid-hour?"
    assert event.sender_login == "mvoss"
    assert event.continuation_key == "pr:ENERGY/tariffs#42"


def test_data_center_new_commits_are_a_synchronize_and_service_users_are_bots():
    data = fixture_json("bitbucket/dc.pr_opened.json")
    data["actor"]["type"] = "SERVICE"
    event = normalize_event("pr:from_ref_updated", data)
    assert event.action == "synchronize" and event.sender_is_bot


def test_a_data_center_push_normalizes():
    data = {"eventKey": "repo:refs_changed", "actor": {"name": "jlee", "type": "NORMAL"},
            "repository": {"slug": "tariffs", "project": {"key": "ENERGY"}},
            "changes": [{"ref": {"id": "refs/heads/master", "displayId": "master", "type": "BRANCH"},
                         "refId": "refs/heads/master", "fromHash": "0f1e2d3c", "toHash": "b3c4d5e6f7a8", "type": "UPDATE"}]}
    event = normalize_event("repo:refs_changed", data)
    assert (event.kind, event.repo, event.ref, event.continuation_key) == (
        EventKind.PUSH, "ENERGY/tariffs", "refs/heads/master", "commit:ENERGY/tariffs@b3c4d5e6f7a8")


def test_a_delivery_without_an_event_key_is_refused():
    with pytest.raises(PayloadError, match="X-Event-Key"):
        parse_delivery({}, b"{}")


class FakeBitbucket(FakeAPI):
    def __init__(self, authorization: str):
        super().__init__()
        comment_versions: dict[int, int] = {}

        def authorized(request: Recorded) -> bool:
            return request.headers.get("authorization") == authorization

        def cloud_comment(request: Recorded, match: re.Match) -> Answer:
            if not authorized(request):
                return Answer(401, {"type": "error", "error": {"message": "Unauthorized"}})
            return Answer(201, {"id": 512341000, "type": "pullrequest_comment", "content": request.json()["content"]})

        def dc_comment(request: Recorded, match: re.Match) -> Answer:
            if not authorized(request):
                return Answer(401, {"errors": [{"message": "Authentication failed."}]})
            comment_id = int(match["comment"] or 8100)
            if request.method == "GET":
                return Answer(200, {"id": comment_id, "version": comment_versions.get(comment_id, 3)})
            if request.method == "PUT":
                sent = request.json()
                if sent.get("version") != comment_versions.get(comment_id, 3):
                    return Answer(409, {"errors": [{"message": "The comment version is out of date."}]})
                comment_versions[comment_id] = sent["version"] + 1
            return Answer(201 if request.method == "POST" else 200, {"id": comment_id, "version": 0,
                                                                     "text": request.json()["text"]})

        cloud_path = r"/2\.0/repositories/(?P<ws>[^/]+)/(?P<repo>[^/]+)/pullrequests/(?P<id>\d+)/comments(?:/(?P<comment>\d+))?"
        dc_path = r"/rest/api/1\.0/projects/(?P<key>[^/]+)/repos/(?P<slug>[^/]+)/pull-requests/(?P<id>\d+)/comments(?:/(?P<comment>\d+))?"
        for method in ("POST", "PUT"):
            self.route(method, cloud_path, cloud_comment)
        for method in ("POST", "PUT", "GET"):
            self.route(method, dc_path, dc_comment)


@pytest.fixture
def outbound():
    with OutboundClient(allow=LOOPBACK) as client:
        yield client


def test_a_cloud_comment_arrives_with_its_text_auth_and_path(outbound):
    with FakeBitbucket("Bearer bb-access-token") as fake:
        config = BitbucketConfig(api_url=f"{fake.url}/2.0", environ={"BITBUCKET_TOKEN": "bb-access-token"})
        client = config.client(outbound=outbound)
        client.create_pull_request_comment("acme-team/payments-api", 5, "Yes: 3-D Secure retries re-challenge.")
        client.update_pull_request_comment("acme-team/payments-api", 5, 512341000, "Edited.")
    create, update = fake.requests
    assert (create.method, create.path) == ("POST", "/2.0/repositories/acme-team/payments-api/pullrequests/5/comments")
    assert create.json() == {"content": {"raw": "Yes: 3-D Secure retries re-challenge."}}
    assert create.headers["authorization"] == "Bearer bb-access-token"
    assert (update.method, update.path) == ("PUT", "/2.0/repositories/acme-team/payments-api/pullrequests/5/comments/512341000")
    assert update.json() == {"content": {"raw": "Edited."}}


def test_a_data_center_comment_arrives_and_an_edit_carries_the_current_version(outbound):
    basic = "Basic " + base64.b64encode(b"tariff-bot:dc-http-token").decode()
    with FakeBitbucket(basic) as fake:
        config = BitbucketConfig(edition="datacenter", api_url=f"{fake.url}/rest/api/1.0",
                                 environ={"BITBUCKET_TOKEN": "dc-http-token", "BITBUCKET_USERNAME": "tariff-bot"})
        client = config.client(outbound=outbound)
        client.create_pull_request_comment("ENERGY/tariffs", 42, "The cache is keyed by table version.")
        client.update_pull_request_comment("ENERGY/tariffs", 42, 8100, "Keyed by table version, so no stale reads.")
    assert [(r.method, r.path) for r in fake.requests] == [
        ("POST", "/rest/api/1.0/projects/ENERGY/repos/tariffs/pull-requests/42/comments"),
        ("GET", "/rest/api/1.0/projects/ENERGY/repos/tariffs/pull-requests/42/comments/8100"),
        ("PUT", "/rest/api/1.0/projects/ENERGY/repos/tariffs/pull-requests/42/comments/8100"),
    ]
    assert fake.requests[0].json() == {"text": "The cache is keyed by table version."}
    assert fake.requests[0].headers["authorization"] == basic
    assert fake.requests[2].json() == {"text": "Keyed by table version, so no stale reads.", "version": 3}


@pytest.mark.parametrize("repo", ["payments-api", "../x", "acme/../y", "a/b/c"])
def test_repository_names_that_would_change_the_path_are_refused(repo):
    client = BitbucketClient("cloud", "https://api.bitbucket.org/2.0", "t")
    with pytest.raises(ValueError, match="not a repository name"):
        client.create_pull_request_comment(repo, 1, "x")


def test_the_config_never_shows_secrets_and_data_center_needs_a_url():
    config = BitbucketConfig(environ={"BITBUCKET_WEBHOOK_SECRET": "hook-secret-value", "BITBUCKET_TOKEN": "tok-secret-value"})
    assert config.webhook_secret() == "hook-secret-value"
    assert "secret-value" not in repr(config) + json.dumps(config.describe()) + repr(config.client())
    assert config.api_base() == "https://api.bitbucket.org/2.0"
    with pytest.raises(LookupError, match="Data Center needs api_url"):
        BitbucketConfig(edition="datacenter", environ={"BITBUCKET_TOKEN": "t"}).client()
