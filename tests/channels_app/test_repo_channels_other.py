"""GitLab and Bitbucket channels in-process, the code-host channels in /info and the host
services, the reviewer example, and `manage.py github replay`'s deliveries."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from agents.discovery import deploy_agent_folder
from sessions.host import Host
from sessions.models import Session
from tests.agents.integrations.conftest import fixture_bytes

from .repo_channel_support import (  # noqa: F401 (api, calls, repos: fixtures)
    LOCAL, REMOTE, REVIEWER, SECRET, api, calls, comment, pull_request, repos, requests_to, sign, transactional,
)

pytestmark = transactional


# -- GitLab and Bitbucket -------------------------------------------------------------------

def gitlab(client: Client, body: bytes, token: str = SECRET, event: str = "Note Hook", uuid: str = "g-1"):
    return client.post("/repos/v1/channels/gitlab", body, content_type="application/json",
                       HTTP_X_GITLAB_EVENT=event, HTTP_X_GITLAB_TOKEN=token, HTTP_X_GITLAB_EVENT_UUID=uuid)


def test_a_gitlab_note_with_the_right_token_is_answered_with_a_note(repos, api):
    response = gitlab(Client(**REMOTE), fixture_bytes("gitlab/note.merge_request.json"))

    assert response.status_code == 202, response.content
    notes = [r for r in api.requests if r.path.endswith("/notes")]
    assert len(notes) == 1 and notes[0].json()["body"].startswith("You said: GitLab note (created) on merge request")
    assert notes[0].headers["private-token"] == "glpat-value"
    assert "/projects/" in notes[0].path and "%2F" in notes[0].path


def test_a_gitlab_delivery_with_a_wrong_token_is_401(repos):
    response = gitlab(Client(**REMOTE), fixture_bytes("gitlab/note.merge_request.json"), token="wrong")

    assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_signature"
    assert Session.objects.count() == 0


def test_a_failed_gitlab_pipeline_on_a_merge_request_reaches_on_pipeline_with_commit_statuses(repos, api):
    response = gitlab(Client(**REMOTE), fixture_bytes("gitlab/pipeline.failed.json"), event="Pipeline Hook")

    assert response.status_code == 202, response.content
    statuses = [r for r in api.requests if "/statuses/" in r.path]
    assert {r.path for r in statuses} == {
        "/projects/acme%2Fplatform%2Fbilling/statuses/da1560886d4f094c3e6c9ef40349f7d38b5d27d7"}
    assert [(r.json()["state"], r.json()["name"]) for r in statuses] == [("running", "review/repos"),
                                                                         ("success", "review/repos")]
    notes = [r for r in api.requests if r.path.endswith("/merge_requests/5/notes")]
    assert len(notes) == 1 and "GitLab pipeline (failed) on merge request acme/platform/billing!5" in notes[0].json()["body"]


def bitbucket(client: Client, body: bytes, signature: str, key: str = "pullrequest:comment_created"):
    return client.post("/repos/v1/channels/bitbucket", body, content_type="application/json",
                       HTTP_X_EVENT_KEY=key, HTTP_X_HUB_SIGNATURE=signature, HTTP_X_REQUEST_UUID="b-1")


def test_a_bitbucket_cloud_comment_with_a_good_signature_is_answered_with_a_comment(repos, api):
    body = fixture_bytes("bitbucket/cloud.pullrequest_comment_created.json")

    response = bitbucket(Client(**REMOTE), body, sign(body))

    assert response.status_code == 202, response.content
    posted = [r for r in api.requests if "/pullrequests/" in r.path]
    assert len(posted) == 1 and posted[0].json()["content"]["raw"].startswith("You said: Bitbucket")


def test_a_bitbucket_delivery_with_a_bad_signature_is_401(repos):
    body = fixture_bytes("bitbucket/cloud.pullrequest_comment_created.json")

    response = bitbucket(Client(**REMOTE), body, sign(body, "another-secret"))

    assert response.status_code == 401 and Session.objects.count() == 0


# -- /info and host services ------------------------------------------------------------------

def test_info_lists_each_provider_channel_with_its_config_but_no_secret(repos):
    info = Client(**LOCAL).get("/repos/v1/info")

    channels = {c["id"]: c for c in info.json()["channels"]}
    assert {channels[k]["kind"] for k in ("github", "gitlab", "bitbucket")} == {"github", "gitlab", "bitbucket"}
    github_info = channels["github"]
    assert [(r["method"], r["url"], r["rawBody"]) for r in github_info["routes"]] == [
        ("POST", "/repos/v1/channels/github", True)]
    assert github_info["auth"] == [{"kind": "public_endpoint"}]
    assert github_info["config"]["webhookSecretEnv"] == {"env": "GITHUB_WEBHOOK_SECRET", "set": True}
    assert channels["gitlab"]["config"]["webhookTokenEnv"] == {"env": "GITLAB_WEBHOOK_TOKEN", "set": True}
    text = info.content.decode()
    for secret in (SECRET, "ghp_test_token_value", "glpat-value", "bb-token-value"):
        assert secret not in text


def test_host_clients_use_the_agents_channel_credentials(repos, api, monkeypatch):
    host = Host(session=None, agent=repos)

    assert host.github.api_url == api.url
    assert host.github.create_comment("octo-org/widgets", 3, "from a tool")["id"] == 501
    monkeypatch.delenv("GITLAB_TOKEN")
    with pytest.raises(LookupError, match="GITLAB_TOKEN"):
        host.gitlab


# -- the example --------------------------------------------------------------------------------

def test_the_reviewer_example_reviews_opened_pull_requests_and_answers_mentions(repos, api):
    deploy_agent_folder(REVIEWER)
    client = Client(**REMOTE)

    def deliver(event: str, body: bytes, delivery: str):
        return client.post("/reviewer/v1/channels/github", body, content_type="application/json",
                           HTTP_X_GITHUB_EVENT=event, HTTP_X_GITHUB_DELIVERY=delivery,
                           HTTP_X_HUB_SIGNATURE_256=sign(body))

    opened = deliver("pull_request", pull_request(), "r-1")
    unrelated = deliver("issue_comment", comment("nice work"), "r-2")
    mention = deliver("issue_comment", comment("@reviewer-bot is the backoff right?"), "r-3")
    own = deliver("issue_comment", comment("@reviewer-bot said so", login="reviewer-bot"), "r-4")

    assert opened.status_code == 202 and mention.status_code == 202
    assert mention.json()["sessionId"] == opened.json()["sessionId"]
    assert unrelated.json()["skipped"] == own.json()["skipped"] == "the hook returned None"
    assert len(requests_to(api, "POST", "/issues/12/comments")) == 2


# -- replay's deliveries --------------------------------------------------------------------------

def test_replay_names_the_event_after_the_file_or_its_sidecar_and_signs_the_exact_bytes(tmp_path):
    from agents.management.commands.github import deliveries, delivery_headers

    (tmp_path / "pull_request.opened.json").write_bytes(b'{"action": "opened"}')
    (tmp_path / "recorded.json").write_bytes(b"{}")
    (tmp_path / "recorded.headers.json").write_text(json.dumps({"X-GitHub-Event": "issues",
                                                                "X-GitHub-Delivery": "recorded-id"}))
    files = deliveries(tmp_path)

    assert [f.name for f in files] == ["pull_request.opened.json", "recorded.json"]
    fresh = delivery_headers(files[0], files[0].read_bytes(), SECRET, keep_id=False)
    assert fresh["x-github-event"] == "pull_request"
    assert fresh["x-hub-signature-256"] == sign(b'{"action": "opened"}')
    assert fresh["x-github-delivery"] != delivery_headers(files[0], b"", None, keep_id=False)["x-github-delivery"]
    kept = delivery_headers(files[1], b"{}", None, keep_id=True)
    assert (kept["x-github-event"], kept["x-github-delivery"]) == ("issues", "recorded-id")
    assert "x-hub-signature-256" not in kept


@pytest.mark.parametrize("url", ["https://me:S3cret/Passw0rd@127.0.0.1:9/webhook/v1/channels/github/events",
                                 "https://me:S3cret-Passw0rd@127.0.0.1:9/webhook/v1/channels/github/events",
                                 "https://me:S3cret-Passw0rd@127.0.0.1:S3cret-Passw0rd/webhook"])
def test_replay_never_prints_the_password_of_its_url(tmp_path, url):
    from io import StringIO

    from django.core.management import CommandError, call_command

    (tmp_path / "push.json").write_bytes(b"{}")
    out = StringIO()
    with pytest.raises(CommandError) as failed:
        call_command("github", "replay", str(tmp_path), "--url", url, stdout=out, stderr=StringIO())

    said = out.getvalue() + str(failed.value)
    assert "127.0.0.1:9/webhook/v1/channels/github/events" in said or "push.json  error" in said
    assert "S3cret" not in said and "Passw0rd" not in said


def test_a_misspelt_hook_fails_validation_naming_the_file_and_the_hooks(tmp_path):
    from agents.discovery import AgentFolderError, load_agent_folder

    base = tmp_path / "typo" / "agent"
    (base / "channels").mkdir(parents=True)
    (base / "instructions.md").write_text("Echo.\n")
    (base / "channels" / "github.py").write_text(
        "from agents.sdk import github_channel\nchannel = github_channel(on_pull_requests=lambda c, e: None)\n")

    with pytest.raises(AgentFolderError) as refused:
        load_agent_folder(tmp_path / "typo")

    assert "agent/channels/github.py" in str(refused.value)
    assert "does not take on_pull_requests: its hooks are on_pull_request" in str(refused.value)
