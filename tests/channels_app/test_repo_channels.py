"""GitHub, GitLab and Bitbucket channels in-process: what a delivery gets back,
which turns it starts, and the replies that reach a (loopback) provider API."""
from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import pytest
from django.test import Client

from agents.discovery import deploy_agent_folder
from channels_app import custom_channels
from sessions.host import Host
from sessions.models import Session, Turn
from tests.agents.integrations.conftest import fixture_bytes
from tests.agents.integrations.fakeapi import Answer, FakeAPI

ROOT = Path(__file__).resolve().parents[2]
REVIEWER = ROOT / "examples" / "reviewer"
transactional = pytest.mark.django_db(transaction=True)
pytestmark = transactional

SECRET = "webhook-secret-for-tests"
LOCAL = {"HTTP_HOST": "127.0.0.1:8000", "REMOTE_ADDR": "127.0.0.1"}
REMOTE = {"HTTP_HOST": "agents.example.com", "REMOTE_ADDR": "203.0.113.9"}

GITHUB_CHANNEL = '''\
import json
from agents.sdk import default_auth, github_channel

CALLS = {calls!r}


def record(what):
    with open(CALLS, "a") as f:
        f.write(json.dumps(what) + "\\n")


def triage(ctx, event):
    record({{"task": event.kind, "conclusion": event.conclusion, "channel": ctx.channel_id}})


def pull_request(ctx, event):
    if event.action == "closed":
        return None
    return {{"auth": default_auth(event),
             "workspace_files": lambda ev: [{{"path": "pr.json", "content": json.dumps({{"number": ev.number}})}}]}}


def comment(ctx, event):
    if "broken" in event.comment:
        return {{"auth": default_auth(event), "task": triage}}
    return {{"auth": default_auth(event), "message": "Answer: " + event.comment}}


def check_run(ctx, event):
    return {{"task": triage}} if event.conclusion == "failure" else None


def status(ctx, event):
    return {{"task": lambda c, ev: record({{"status": ev.conclusion, "by": "lambda"}})}}


channel = github_channel(on_pull_request=pull_request, on_comment=comment, on_check_run=check_run,
                         on_status=status, commit_status=True)
'''

GITLAB_CHANNEL = '''\
from agents.sdk import default_auth, gitlab_channel

channel = gitlab_channel(on_pull_request=lambda ctx, e: {"auth": default_auth(e)},
                         on_comment=lambda ctx, e: {"auth": default_auth(e)},
                         on_pipeline=lambda ctx, e: {"auth": default_auth(e)} if e.conclusion == "failed" else None,
                         commit_status="review/{slug}")
'''

BITBUCKET_CHANNEL = '''\
from agents.sdk import bitbucket_channel, default_auth

channel = bitbucket_channel(on_pull_request=lambda ctx, e: {"auth": default_auth(e)},
                            on_comment=lambda ctx, e: {"auth": default_auth(e)})
'''


def write_agent(root: Path, calls: Path) -> Path:
    (root / "agent" / "channels").mkdir(parents=True)
    (root / "agent" / "instructions.md").write_text("Echo.\n")
    (root / "agent" / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo")\n')
    (root / "agent" / "channels" / "github.py").write_text(GITHUB_CHANNEL.format(calls=str(calls)))
    (root / "agent" / "channels" / "gitlab.py").write_text(GITLAB_CHANNEL)
    (root / "agent" / "channels" / "bitbucket.py").write_text(BITBUCKET_CHANNEL)
    return root


@pytest.fixture
def api():
    with FakeAPI() as fake:
        fake.route("POST", r"/repos/.+/issues/\d+/comments", Answer(201, {"id": 501, "html_url": "https://x/c"}))
        fake.route("POST", r"/repos/.+/statuses/\w+", Answer(201, {"id": 1}))
        fake.route("POST", r"/projects/[^/]+/merge_requests/\d+/notes", Answer(201, {"id": 601}))
        fake.route("POST", r"/projects/[^/]+/statuses/\w+", Answer(201, {"id": 2}))
        fake.route("POST", r"/repositories/[^/]+/[^/]+/pullrequests/\d+/comments", Answer(201, {"id": 701}))
        yield fake


@pytest.fixture
def calls(tmp_path) -> Path:
    return tmp_path / "calls.jsonl"


@pytest.fixture
def repos(tmp_path, calls, api, settings, monkeypatch, sync_turns):
    settings.AGENTSITE_AUTH_POLICIES = None
    settings.AGENTSITE_AUTH = "local_dev_strict"
    settings.AGENTSITE_DEV = False
    settings.AGENTSITE_OUTBOUND_ALLOW = ["127.0.0.1/32"]
    for name, value in {"GITHUB_WEBHOOK_SECRET": SECRET, "GITHUB_TOKEN": "ghp_test_token_value",
                        "GITHUB_API_URL": api.url, "GITLAB_WEBHOOK_TOKEN": SECRET, "GITLAB_TOKEN": "glpat-value",
                        "GITLAB_API_URL": api.url, "BITBUCKET_WEBHOOK_SECRET": SECRET,
                        "BITBUCKET_TOKEN": "bb-token-value", "BITBUCKET_API_URL": api.url}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("GITHUB_APP_ID", raising=False)
    monkeypatch.delenv("BITBUCKET_USERNAME", raising=False)
    custom_channels._mounted.clear()
    return deploy_agent_folder(write_agent(tmp_path / "repos", calls)).agent


def recorded(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def github(client: Client, event: str, body: bytes, *, delivery: str = "d-1", signature: str | None = "sign",
           **headers):
    extra = {"HTTP_X_GITHUB_EVENT": event, "HTTP_X_GITHUB_DELIVERY": delivery, **headers}
    if signature == "sign":
        extra["HTTP_X_HUB_SIGNATURE_256"] = sign(body)
    elif signature is not None:
        extra["HTTP_X_HUB_SIGNATURE_256"] = signature
    return client.post("/repos/v1/channels/github", body, content_type="application/json", **extra)


def pull_request(action: str = "opened", sha: str = "6dcb09b5b57875f334f61aebed695e2e4193db5e") -> bytes:
    data = json.loads(fixture_bytes("github/pull_request.opened.json"))
    data["action"] = action
    data["pull_request"]["head"]["sha"] = sha
    return json.dumps(data).encode()


def comment(text: str, sender_type: str = "User", login: str = "hubot") -> bytes:
    data = json.loads(fixture_bytes("github/issue_comment.created.json"))
    data["comment"]["body"] = text
    data["sender"].update(type=sender_type, login=login)
    return json.dumps(data).encode()


def requests_to(api: FakeAPI, method: str, fragment: str) -> list:
    return [r for r in api.requests if r.method == method and fragment in r.path]


# -- GitHub: verification -----------------------------------------------------------------

def test_a_signed_pull_request_starts_a_turn_and_the_reply_is_a_comment(repos, api):
    response = github(Client(**REMOTE), "pull_request", pull_request())

    assert response.status_code == 202, response.content
    answer = response.json()
    assert answer["created"] is True and answer["deliveryId"] == "d-1"
    session = Session.objects.get(pk=answer["sessionId"])
    assert session.channel == "github" and session.principal_id == "github:mona"
    assert session.channel_state["repo"] == "octo-org/widgets" and session.channel_state["number"] == 12
    comments = requests_to(api, "POST", "/issues/12/comments")
    assert [c.path for c in comments] == ["/repos/octo-org/widgets/issues/12/comments"]
    body = comments[0].json()["body"]
    assert body.startswith("You said: GitHub pull_request (opened) on pull request octo-org/widgets#12 by @mona.")
    assert "Title: Add retry to the sprocket fetcher" in body
    assert comments[0].headers["authorization"] == "Bearer ghp_test_token_value"


def test_a_commit_status_is_pending_during_the_turn_then_success(repos, api):
    github(Client(**REMOTE), "pull_request", pull_request())

    statuses = [r.json() for r in requests_to(api, "POST", "/statuses/6dcb09b5b57875f334f61aebed695e2e4193db5e")]
    assert [s["state"] for s in statuses] == ["pending", "success"]
    assert {s["context"] for s in statuses} == {"agentsite/repos"}


@pytest.mark.parametrize("tamper", ["body", "signature", "sha1-only", "missing"])
def test_a_delivery_that_fails_verification_is_401_and_starts_nothing(repos, tamper):
    body = pull_request()
    if tamper == "body":
        response = github(Client(**REMOTE), "pull_request", body.replace(b'"opened"', b'"closed"', 1),
                          signature=sign(body))
    elif tamper == "signature":
        good = sign(body)
        response = github(Client(**REMOTE), "pull_request", body, signature=good[:-1] + ("0" if good[-1] != "0" else "1"))
    elif tamper == "sha1-only":
        sha1 = "sha1=" + hmac.new(SECRET.encode(), body, hashlib.sha1).hexdigest()
        response = github(Client(**REMOTE), "pull_request", body, signature=None, HTTP_X_HUB_SIGNATURE=sha1)
    else:
        response = github(Client(**LOCAL), "pull_request", body, signature=None)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_signature"
    assert Session.objects.count() == 0


def test_githubs_published_test_vector_is_verified_by_the_channel(repos, monkeypatch):
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "It's a Secret to Everybody")
    vector = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

    verified = github(Client(**REMOTE), "push", b"Hello, World!", signature=vector)
    tampered = github(Client(**REMOTE), "push", b"Hello, World?", signature=vector)

    # Verified, then refused because "Hello, World!" is no JSON event: 400, not 401.
    assert verified.status_code == 400 and verified.json()["error"]["code"] == "invalid_payload"
    assert tampered.status_code == 401


def test_without_a_secret_only_a_loopback_caller_of_a_dev_server_is_admitted(repos, settings, monkeypatch):
    monkeypatch.delenv("GITHUB_WEBHOOK_SECRET")

    refused = github(Client(**LOCAL), "pull_request", pull_request(), signature=None)
    settings.AGENTSITE_DEV = True
    remote = github(Client(**REMOTE), "pull_request", pull_request(), signature=None)
    proxied = github(Client(**LOCAL), "pull_request", pull_request(), signature=None,
                     HTTP_X_FORWARDED_FOR="203.0.113.9")
    admitted = github(Client(**LOCAL), "pull_request", pull_request(), signature=None)

    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "webhook_secret_not_configured"
    assert "GITHUB_WEBHOOK_SECRET" in refused.json()["error"]["message"]
    assert remote.status_code == 401 and proxied.status_code == 401
    assert admitted.status_code == 202, admitted.content


# -- GitHub: deliveries, hooks, conversations ---------------------------------------------

def test_a_redelivery_starts_no_second_turn(repos):
    client = Client(**REMOTE)
    first = github(client, "pull_request", pull_request(), delivery="same")
    again = github(client, "pull_request", pull_request(), delivery="same")

    assert first.status_code == 202
    assert again.status_code == 200 and again.json() == {"duplicate": True, "deliveryId": "same"}
    assert Turn.objects.count() == 1


def test_a_ping_is_answered(repos):
    response = github(Client(**REMOTE), "ping", b'{"zen": "Design for failure.", "hook_id": 1}')

    assert response.status_code == 200 and response.json() == {"pong": True}


def test_a_comment_continues_the_pull_requests_session_with_the_hooks_message(repos, api):
    client = Client(**REMOTE)
    opened = github(client, "pull_request", pull_request(), delivery="d-1").json()
    pushed = github(client, "pull_request", pull_request("synchronize", sha="a" * 40), delivery="d-2").json()
    asked = github(client, "issue_comment", comment("@widgets-bot what about retries?"), delivery="d-3").json()

    assert opened["sessionId"] == pushed["sessionId"] == asked["sessionId"]
    assert (pushed["created"], asked["created"]) == (False, False)
    session = Session.objects.get(pk=opened["sessionId"])
    assert session.channel_state["head_sha"] == "a" * 40
    bodies = [r.json()["body"] for r in requests_to(api, "POST", "/issues/12/comments")]
    assert len(bodies) == 3 and bodies[-1] == "You said: Answer: @widgets-bot what about retries?"


def test_the_agents_own_bot_comment_is_skipped(repos, api):
    response = github(Client(**REMOTE), "issue_comment", comment("Looks good.", "Bot", "widgets-bot[bot]"))

    assert response.status_code == 200
    assert response.json()["skipped"] == "bot sender widgets-bot[bot]"
    assert Session.objects.count() == 0


def test_a_hook_returning_none_skips_the_delivery(repos):
    response = github(Client(**REMOTE), "pull_request", pull_request("closed"))

    assert response.status_code == 200 and response.json()["skipped"] == "the hook returned None"
    assert Session.objects.count() == 0


def test_a_task_runs_on_a_worker_with_the_parsed_event(repos, calls):
    response = github(Client(**REMOTE), "check_run", fixture_bytes("github/check_run.completed.json"))

    assert response.status_code == 202 and response.json() == {"task": True, "deliveryId": "d-1"}
    assert recorded(calls) == [{"task": "check_run", "conclusion": "failure", "channel": "github"}]
    assert Session.objects.count() == 0


def test_a_task_given_as_a_lambda_is_found_by_asking_the_hook_again(repos, calls):
    response = github(Client(**REMOTE), "status", fixture_bytes("github/status.json"))

    assert response.status_code == 202
    assert recorded(calls) == [{"status": "failure", "by": "lambda"}]


def test_a_hook_answer_that_is_neither_a_turn_nor_a_task_is_a_500(repos, calls):
    response = github(Client(**REMOTE), "issue_comment", comment("this is broken"))

    assert response.status_code == 500 and response.json()["error"]["code"] == "internal_error"
    assert Session.objects.count() == 0 and recorded(calls) == []


def test_workspace_files_may_be_a_function_of_the_event(repos):
    from sessions.workspaces import workspace_dir

    answer = github(Client(**REMOTE), "pull_request", pull_request()).json()
    assert json.loads((workspace_dir(answer["sessionId"]) / "pr.json").read_text()) == {"number": 12}


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
