"""Secrets on a real server (`manage.py serve --dev`): a GitHub channel whose webhook secret is
an agent secret set with `manage.py secrets set` while the server runs, changed without a
restart (the command line runs in this test's process, on the server's database); and a marker
value, used by a channel and by a turn, that shows nowhere it should not: the server's log, the
sessions' event logs, the agent's info, the admin, the OpenAPI document, the secret routes and
`secrets list`. The server logs JSON (AGENTSITE_LOG_FORMAT=json): its access and turn lines, too, hold
neither the secret nor a marker in a turn's message or a tool's input."""
from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from typing import Iterator

import httpx
import pytest
from cryptography.fernet import Fernet
from django.contrib.auth.models import User

from tests.agents.integrations.conftest import fixture_bytes
from tests.agents.integrations.fakeapi import Answer, FakeAPI
from tests.command_line import run_command_line
from tests.server_database import on_server_database
from tests.support import Server, run_server

MARKER = "MARKER-5e1f3c9a0b7d42e6"
# What a caller typed, which the server's log must not hold either (the events do).
TYPED = "TYPED-7c2d94e1a03b"
KEY = Fernet.generate_key().decode()
PASSWORD = "ops-password-for-the-live-test"

CHANNEL = ("from agents.sdk import default_auth, github_channel\n\n"
           "channel = github_channel(webhook_secret_env='VAULT_HOOK_SECRET', token_env='VAULT_GITHUB_TOKEN',\n"
           "                         on_pull_request=lambda ctx, e: {'auth': default_auth(e)})\n")
# A tool that reads a credential in a turn and says only its fingerprint.
TOOL = '''\
import hashlib

from pydantic import BaseModel

from agents.sdk import tool
from agents.secrets.lookup import credential


class Input(BaseModel):
    name: str


@tool(description="The sha256 of a credential, to check it is set.", effect="read")
def fingerprint(input: Input, ctx) -> dict:
    return {"sha256": hashlib.sha256((credential(input.name) or "").encode()).hexdigest()}
'''


@pytest.fixture(scope="module")
def api() -> Iterator[FakeAPI]:
    with FakeAPI() as fake:
        fake.route("POST", r"/repos/.+/issues/\d+/comments", Answer(201, {"id": 501}))
        yield fake


@pytest.fixture(scope="module")
def server(tmp_path_factory, api) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("agents")
    base = agents / "vault" / "agent"
    (base / "channels").mkdir(parents=True)
    (base / "tools").mkdir()
    (base / "instructions.md").write_text("Echo.\n")
    (base / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo")\n')
    (base / "channels" / "github.py").write_text(CHANNEL)
    (base / "tools" / "fingerprint.py").write_text(TOOL)
    env = {"GITHUB_API_URL": api.url, "AGENTSITE_OUTBOUND_ALLOW": "127.0.0.1/32", "AGENTSITE_SECRETS_KEYS": KEY,
           "AGENTSITE_LOG_FORMAT": "json"}
    with run_server(tmp_path_factory.mktemp("secrets-live"), "--agents", str(agents), "--no-examples", "--dev",
                    env=env) as running:
        yield running


@pytest.fixture(scope="module")
def http(server) -> Iterator[httpx.Client]:
    """One client for the module's requests (a new one per request loads the CA bundle, ~40 ms of CPU)."""
    with server.client(timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def manage(server, django_db_blocker):
    """`manage.py *args` on the server's database, with its key; its stdout."""
    def run(*args: str, stdin: str = "") -> str:
        with on_server_database(server.state_root, django_db_blocker, {"AGENTSITE_SECRETS_KEYS": KEY}):
            code, out, err = run_command_line(*args, stdin=stdin)
        assert code == 0, err
        return out
    return run


def set_secret(manage, name: str, value: str) -> None:
    manage("secrets", "set", "vault", name, stdin=value)


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def pull_request(number: int) -> bytes:
    data = json.loads(fixture_bytes("github/pull_request.opened.json"))
    data["number"] = data["pull_request"]["number"] = number
    return json.dumps(data).encode()


def deliver(http: httpx.Client, number: int, secret: str, delivery: str) -> httpx.Response:
    body = pull_request(number)
    headers = {"Content-Type": "application/json", "X-GitHub-Event": "pull_request", "X-GitHub-Delivery": delivery,
               "X-Hub-Signature-256": sign(body, secret)}
    return http.post("/vault/v1/channels/github", content=body, headers=headers)


def wait_for(api: FakeAPI, path: str, timeout: float = 60) -> list:
    deadline = time.monotonic() + timeout
    while True:
        found = [r for r in api.requests if r.method == "POST" and r.path == path]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_a_webhook_secret_set_and_changed_while_the_server_runs_counts_at_once(http, manage):
    set_secret(manage, "VAULT_HOOK_SECRET", "first-hook-secret\n")

    assert deliver(http, 201, "first-hook-secret", "rot-1").status_code == 202
    assert deliver(http, 202, "not-the-secret", "rot-2").status_code == 401

    set_secret(manage, "VAULT_HOOK_SECRET", "second-hook-secret")
    old = deliver(http, 203, "first-hook-secret", "rot-3")
    assert old.status_code == 401 and old.json()["error"]["code"] == "invalid_signature"
    assert deliver(http, 204, "second-hook-secret", "rot-4").status_code == 202

    # The same through REST, as the loopback caller of the embedded default.
    put = http.put("/v1/agents/vault/secrets/VAULT_HOOK_SECRET", json={"value": "third"})
    assert put.status_code == 200, put.text
    assert deliver(http, 205, "second-hook-secret", "rot-5").status_code == 401
    assert deliver(http, 206, "third", "rot-6").status_code == 202


def operator(server: Server, manage, django_db_blocker) -> tuple[str, httpx.Client]:
    """A superuser in the server's database: its personal token, and a client logged in to the admin."""
    with on_server_database(server.state_root, django_db_blocker):
        User.objects.create_superuser("ops", "ops@example.com", PASSWORD)
    token = manage("createtoken", "ops", "--name", "live").strip().splitlines()[-1]
    browser = httpx.Client(base_url=server.base_url, timeout=30, follow_redirects=True)
    form = browser.get("/admin/login/")
    csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
    logged_in = browser.post("/admin/login/?next=/admin/", data={
        "csrfmiddlewaretoken": csrf, "username": "ops", "password": PASSWORD, "next": "/admin/"})
    assert logged_in.status_code == 200 and "Log out" in logged_in.text, logged_in.text[:500]
    return token, browser


def events_of(http: httpx.Client, token: str, session_id: str, until: str = "turn.completed",
              timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = http.get(f"/vault/v1/session/{session_id}/events", headers={"Authorization": f"Bearer {token}"}).text
        if f'"type":"{until}"' in text.replace(" ", "") or time.monotonic() > deadline:
            return text
        time.sleep(0.2)


def test_a_marker_used_by_a_channel_and_a_turn_shows_nowhere(server, http, api, manage, django_db_blocker):
    set_secret(manage, "VAULT_HOOK_SECRET", "leak-hook-secret")
    set_secret(manage, "VAULT_GITHUB_TOKEN", MARKER + "\n")
    token, browser = operator(server, manage, django_db_blocker)
    bearer = {"Authorization": f"Bearer {token}"}

    # A channel uses it: the reply to the pull request is posted with the token.
    assert deliver(http, 301, "leak-hook-secret", "leak-1").status_code == 202
    [comment] = wait_for(api, "/repos/octo-org/widgets/issues/301/comments")
    assert comment.headers["authorization"] == f"Bearer {MARKER}"

    # A turn uses it: a tool reads it and answers with its fingerprint.
    started = http.post("/vault/v1/session", headers=bearer, json={
        "message": f'{TYPED}-message\n/call fingerprint {{"name": "VAULT_GITHUB_TOKEN", "note": "{TYPED}-input"}}'})
    assert started.status_code == 201, started.text
    turn_events = events_of(http, token, started.json()["sessionId"])
    assert hashlib.sha256(MARKER.encode()).hexdigest() in turn_events
    assert f"{TYPED}-message" in turn_events and f"{TYPED}-input" in turn_events

    seen: dict[str, str] = {"turn events": turn_events}
    sessions = http.get("/vault/v1/sessions", params={"all": "1"}, headers=bearer).json()
    assert len(sessions["sessions"]) >= 2
    for s in sessions["sessions"]:
        seen[f"events of {s['sessionId']}"] = events_of(http, token, s["sessionId"], timeout=5)
    for path in ("/vault/v1/info", "/api/schema/", "/v1/agents/vault/secrets",
                 "/v1/agents/vault/secrets/VAULT_GITHUB_TOKEN", "/v1/agents"):
        answer = http.get(path, headers=bearer)
        assert answer.status_code == 200, (path, answer.text)
        seen[path] = answer.text
    assert "VAULT_GITHUB_TOKEN" in seen["/v1/agents/vault/secrets"]

    listed = browser.get("/admin/agents/secret/")
    seen["admin secrets"] = listed.text
    for pk in set(re.findall(r"/admin/agents/secret/(\d+)/change/", listed.text)):
        seen[f"admin secret {pk}"] = browser.get(f"/admin/agents/secret/{pk}/change/").text
    agents = browser.get("/admin/agents/agent/")
    seen["admin agents"] = agents.text
    [agent_pk] = set(re.findall(r"/admin/agents/agent/(\d+)/change/", agents.text))
    seen["admin agent"] = browser.get(f"/admin/agents/agent/{agent_pk}/change/").text
    assert "VAULT_GITHUB_TOKEN" in seen["admin secrets"] and "VAULT_GITHUB_TOKEN" in seen["admin agent"]
    assert len([k for k in seen if k.startswith("admin secret ")]) == 2

    seen["secrets list"] = manage("secrets", "list", "vault")
    seen["secrets list --json"] = manage("secrets", "list", "vault", "--json")
    assert "VAULT_GITHUB_TOKEN" in seen["secrets list"]
    seen["server log"] = server.output()

    assert [where for where, text in seen.items() if MARKER in text] == []
    lines = [json.loads(line) for line in seen["server log"].splitlines()]
    turn_lines = [line for line in lines if line["logger"] == "agentsite.turns"]
    assert started.json()["sessionId"] in {line["sessionId"] for line in turn_lines}
    assert any(line["logger"] == "agentsite.access" and line["route"] == "<slug:slug>/v1/channels/<str:channel_id>"
               for line in lines)
    assert TYPED not in seen["server log"]
