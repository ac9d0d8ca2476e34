"""An agent with GitHub, GitLab and Bitbucket channels, a loopback provider API, and deliveries
to post to them, for the code-host channel tests."""
from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path

import pytest
from django.test import Client

from agents.discovery import deploy_agent_folder
from channels_app import custom_channels
from tests.agents.integrations.conftest import fixture_bytes
from tests.agents.integrations.fakeapi import Answer, FakeAPI

ROOT = Path(__file__).resolve().parents[2]
REVIEWER = ROOT / "examples" / "reviewer"
transactional = pytest.mark.django_db(transaction=True)

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
