"""MCP servers behind OAuth, against a real one on the official SDK's server-side auth
(tests/sessions/mcp_servers/oauth_server.py: its own authorization server, approving at once):
`manage.py mcp oauth` runs the flow and stores the tokens as the agent's secrets, turns and
direct calls send them, an expiring token is refreshed (and a rotated refresh token kept),
a revoked one withdraws the server's tools, and operators authorize from the playground."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from io import StringIO
from pathlib import Path

import httpx
import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from agents.discovery import deploy_agent_folder, load_agent_folder
from agents.mcpauth.stored import read, secret_prefix
from agents.mcpauth.tokens import refresh
from agents.models import Agent, OAuthFlow, Secret
from agents.serving import free_port
from sessions.mcp.tools import hub
from tests.sessions.test_mcp import call_line, results, start, write_agent

transactional = pytest.mark.django_db(transaction=True)
SERVER = Path(__file__).parent / "mcp_servers" / "oauth_server.py"
PREFIX = secret_prefix("guarded")


@pytest.fixture(autouse=True)
def fresh_connections():
    yield
    forget_connections()


def forget_connections() -> None:
    """As a new worker process would start: no connection open, no tool list known."""
    hub().close_all()
    hub().connections.clear()
    hub().known_tools.clear()
    hub().last_attempt.clear()


def run_server(expires_in: int):
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER), str(port), str(expires_in)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{base}/test/stats", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    return proc, base


# One of each per module: every test deploys its own agent, which registers its own client and gets its
# own tokens, and counts what the server granted from what it had granted before (`grants`).
@pytest.fixture(scope="module")
def oauth_server():
    proc, base = run_server(expires_in=3600)
    yield base
    proc.kill()
    proc.wait(10)


@pytest.fixture(scope="module")
def short_lived_server():
    proc, base = run_server(expires_in=2)
    yield base
    proc.kill()
    proc.wait(10)


def deploy(tmp_path: Path, base: str, **extra) -> Agent:
    return deploy_agent_folder(write_agent(tmp_path / "guarded", {
        "guarded": {"url": f"{base}/mcp", "oauth": True, "timeout": 10, **extra}})).agent


class Lines:
    """A stdout the test reads while the command runs in another thread."""

    def __init__(self):
        self.text = ""
        self.lock = threading.Lock()

    def write(self, s: str) -> None:
        with self.lock:
            self.text += s

    def flush(self) -> None:
        pass

    def wait_for(self, pattern: str, timeout: float = 15) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                found = re.search(pattern, self.text)
            if found:
                return found
            time.sleep(0.05)
        raise AssertionError(f"{pattern!r} never printed; printed:\n{self.text}")


def authorize_with_command(slug: str = "guarded", name: str = "guarded") -> str:
    """Run `mcp oauth --no-browser`, follow the printed URL as a browser would; the command's output."""
    out, failure = Lines(), []

    def run():
        try:
            call_command("mcp", "oauth", slug, name, "--no-browser", "--port", str(free_port()), "--wait", "20",
                         stdout=out, stderr=StringIO())
        except Exception as exc:  # noqa: BLE001 (reported below)
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    url = out.wait_for(r"Open this URL to authorize:\s+(\S+)").group(1)
    out.wait_for(r"Waiting for the browser")
    page = httpx.get(url, follow_redirects=True, timeout=10)  # authorize → 302 to the loopback callback
    assert page.status_code == 200 and "Authorized." in page.text
    thread.join(30)
    assert not failure, failure
    return out.text


def stats(base: str) -> dict:
    return httpx.get(f"{base}/test/stats", timeout=5).json()


def grants(base: str, since: dict) -> dict:
    """What the server granted (and refused) since it reported `since`."""
    return {name: count - since[name] for name, count in stats(base).items()}


@transactional
def test_the_command_runs_the_flow_and_stores_the_tokens_as_the_agents_secrets(tmp_path, oauth_server):
    agent = deploy(tmp_path, oauth_server)
    before = stats(oauth_server)

    printed = authorize_with_command()

    assert "MCP server 'guarded' authorized" in printed and "add, token" in printed
    names = set(Secret.objects.filter(agent=agent).values_list("name", flat=True))
    assert names == {f"{PREFIX}_{p}" for p in ("ACCESS_TOKEN", "REFRESH_TOKEN", "CLIENT_ID", "CLIENT_SECRET",
                                               "CLIENT_INFO", "SERVER")}
    access = Secret.objects.get(agent=agent, name=f"{PREFIX}_ACCESS_TOKEN")
    assert 3500 < (access.expires_at - access.set_at).total_seconds() <= 3600
    stored = read(agent, "guarded")
    assert stored.access_token.startswith("at-") and stored.refresh_token.startswith("rt-")
    assert stored.endpoint["tokenEndpoint"] == f"{oauth_server}/token"
    assert stored.endpoint["declared"] == f"{oauth_server}/mcp" and stored.endpoint["resource"]
    assert stored.registration.client_id == Secret.objects.get(agent=agent, name=f"{PREFIX}_CLIENT_ID").reveal()
    assert stored.access_token not in printed and stored.refresh_token not in printed
    assert grants(oauth_server, before)["registrations"] == 1

    authorize_with_command()  # again on another port: another redirect URI, so another registration
    assert grants(oauth_server, before)["codes"] == 2


@transactional
def test_the_command_refuses_what_it_cannot_authorize(tmp_path, oauth_server):
    deploy_agent_folder(write_agent(tmp_path / "mixed", {
        "plain": {"url": f"{oauth_server}/mcp"}, "guarded": {"url": f"{oauth_server}/mcp", "oauth": True}}))

    def refusal(*args) -> str:
        with pytest.raises(CommandError) as raised:
            call_command("mcp", "oauth", *args, "--no-browser", stdout=StringIO(), stderr=StringIO())
        return str(raised.value)

    assert refusal("nobody", "guarded") == "no agent 'nobody' on this server"
    assert "declares no MCP server 'other'" in refusal("mixed", "other")
    assert "must be a url server with oauth: true" in refusal("mixed", "plain")


@transactional
def test_turns_and_direct_calls_use_the_stored_token(local, sync_turns, tmp_path, oauth_server):
    agent = deploy(tmp_path, oauth_server)
    session_id = start(local, "guarded", call_line("guarded__add", {"a": 1, "b": 2}))
    assert "unknown tool 'guarded__add'" in results(session_id)[0]["error"]  # not authorized: not offered
    info = local.get("/guarded/v1/info").json()
    assert info["mcp"][0]["authorization"] == {"authorized": False, "command": "manage.py mcp oauth guarded guarded"}

    authorize_with_command()

    session_id = start(local, "guarded", call_line("guarded__add", {"a": 40, "b": 2}) + "\n"
                       + call_line("guarded__token", {}))
    by_tool = {r["toolName"]: r for r in results(session_id)}
    assert by_tool["guarded__add"]["output"] == {"result": 42}
    assert by_tool["guarded__token"]["output"] == {"result": read(agent, "guarded").access_token}
    direct = local.post("/guarded/v1/tools/guarded__add/call", json.dumps({"input": {"a": 4, "b": 5}}),
                        content_type="application/json")
    assert direct.status_code == 200 and direct.json()["output"] == {"result": 9}
    response = local.get("/guarded/v1/info")
    assert {"guarded__add", "guarded__token"} <= {t["name"] for t in response.json()["offeredTools"]}
    authorization = response.json()["mcp"][0]["authorization"]
    assert authorization["authorized"] is True and authorization["refreshable"] is True
    assert authorization["expiresAt"].endswith("Z")
    assert read(agent, "guarded").access_token not in response.content.decode()


@transactional
def test_an_expiring_token_is_refreshed_and_the_new_one_is_used(local, sync_turns, tmp_path, short_lived_server):
    agent = deploy(tmp_path, short_lived_server)
    before = stats(short_lived_server)
    authorize_with_command()
    first = read(agent, "guarded")

    # It expires within the refresh margin from the start (2 s): each use refreshes it first.
    session_id = start(local, "guarded", call_line("guarded__token", {}))

    second = read(agent, "guarded")
    assert second.access_token != first.access_token and second.refresh_token != first.refresh_token  # rotated
    assert results(session_id)[0]["output"] == {"result": second.access_token}
    assert second.expires_at > first.expires_at
    assert grants(short_lived_server, before)["refreshes"] >= 1
    time.sleep(2.5)  # the first access token is now expired at the server too
    session_id = start(local, "guarded", call_line("guarded__add", {"a": 1, "b": 1}))
    assert results(session_id)[0]["output"] == {"result": 2}
    assert grants(short_lived_server, before)["refused_refreshes"] == 0


@transactional
def test_a_second_refresher_uses_the_first_ones_tokens(tmp_path, short_lived_server):
    agent = deploy(tmp_path, short_lived_server)
    before = stats(short_lived_server)
    authorize_with_command()
    seen = read(agent, "guarded").access_token
    server = load_agent_folder(tmp_path / "guarded").mcp[0]

    first = refresh(agent, server, seen=seen)
    second = refresh(agent, server, seen=seen)  # it read `seen` before the first stored the new one

    assert first == second == read(agent, "guarded").access_token
    assert grants(short_lived_server, before)["refreshes"] == 1


@transactional
def test_concurrent_refreshers_make_one_refresh(tmp_path, short_lived_server):
    agent = deploy(tmp_path, short_lived_server)
    before = stats(short_lived_server)
    authorize_with_command()
    seen = read(agent, "guarded").access_token
    server = load_agent_folder(tmp_path / "guarded").mcp[0]
    barrier, got = threading.Barrier(3), []

    def refresher():
        try:
            barrier.wait()
            got.append(refresh(agent, server, seen=seen))
        finally:
            connection.close()

    threads = [threading.Thread(target=refresher) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)

    assert len(got) == 3 and set(got) == {read(agent, "guarded").access_token}
    granted = grants(short_lived_server, before)
    assert granted["refreshes"] == 1 and granted["refused_refreshes"] == 0


@transactional
def test_a_revoked_authorization_withdraws_the_tools_and_says_to_run_the_command(local, sync_turns, tmp_path,
                                                                                   oauth_server):
    agent = deploy(tmp_path, oauth_server)
    before = stats(oauth_server)
    authorize_with_command()
    session_id = start(local, "guarded", call_line("guarded__add", {"a": 1, "b": 1}))
    assert results(session_id)[0]["output"] == {"result": 2}

    httpx.post(f"{oauth_server}/test/revoke", timeout=5)
    forget_connections()  # a worker that has not talked to it yet

    session_id = start(local, "guarded", call_line("guarded__add", {"a": 1, "b": 1}))
    assert "unknown tool 'guarded__add'" in results(session_id)[0]["error"]
    assert grants(oauth_server, before)["refused_refreshes"] == 1  # one refresh was tried
    stored = read(agent, "guarded")
    assert stored.access_token is None and stored.refresh_token is None
    info = local.get("/guarded/v1/info").json()
    assert info["mcp"][0]["authorization"] == {"authorized": False, "command": "manage.py mcp oauth guarded guarded"}


@transactional
def test_a_changed_url_needs_a_new_authorization(local, tmp_path, oauth_server):
    deploy(tmp_path, oauth_server)
    authorize_with_command()
    moved = tmp_path / "moved"
    deploy_agent_folder(write_agent(moved / "guarded", {
        "guarded": {"url": f"{oauth_server}/mcp?v=2", "oauth": True}}))

    info = local.get("/guarded/v1/info").json()
    assert info["mcp"][0]["authorization"]["authorized"] is False


@pytest.fixture
def operator_client(db) -> Client:
    user = User.objects.create_user("olga", password="x", is_staff=True)
    client = Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="127.0.0.1")
    client.force_login(user)
    return client


@transactional
def test_an_operator_authorizes_from_the_playground(operator_client, local, sync_turns, tmp_path, oauth_server):
    agent = deploy(tmp_path, oauth_server)
    page = operator_client.get("/playground/guarded").content.decode()
    assert 'data-server="guarded"' in page and "not authorized" in page
    assert 'action="/playground/guarded/mcp/guarded/authorize"' in page

    started = operator_client.post("/playground/guarded/mcp/guarded/authorize")
    assert started.status_code == 302
    to_authorize = started["Location"]
    assert "code_challenge=" in to_authorize and "redirect_uri=" in to_authorize
    flow = OAuthFlow.objects.get(agent=agent)
    assert flow.redirect_uri == "http://127.0.0.1:8000/playground/guarded/mcp-oauth/callback"
    assert flow.verifier() not in flow.verifier_ciphertext  # stored encrypted

    approved = httpx.get(to_authorize, timeout=10)  # the authorization server approves and sends the browser back
    assert approved.status_code == 302
    back = approved.headers["location"]
    assert back.startswith(flow.redirect_uri)
    finished = operator_client.get(back.removeprefix("http://127.0.0.1:8000"))
    assert finished.status_code == 302 and finished["Location"] == "/playground/guarded?authorized=guarded"

    stored = read(agent, "guarded")
    assert stored.access_token and stored.refresh_token and stored.endpoint["declared"] == f"{oauth_server}/mcp"
    assert "authorized" in operator_client.get("/playground/guarded").content.decode()
    session_id = start(local, "guarded", call_line("guarded__add", {"a": 2, "b": 2}))
    assert results(session_id)[0]["output"] == {"result": 4}

    replayed = operator_client.get(back.removeprefix("http://127.0.0.1:8000"))  # single use
    assert replayed.status_code == 400


@transactional
def test_the_playground_flow_is_for_operators_and_expires(operator_client, tmp_path, oauth_server, settings):
    agent = deploy(tmp_path, oauth_server)
    settings.AGENTSITE_PUBLIC_URL = "https://agents.example.com"
    member = Client(HTTP_HOST="127.0.0.1:8000", REMOTE_ADDR="127.0.0.1")
    member.force_login(User.objects.create_user("mo", password="x"))

    assert member.post("/playground/guarded/mcp/guarded/authorize").status_code == 403
    assert member.get("/playground/guarded/mcp-oauth/callback?state=x&code=y").status_code == 403
    assert operator_client.post("/playground/guarded/mcp/nothing/authorize").status_code == 404

    started = operator_client.post("/playground/guarded/mcp/guarded/authorize")
    flow = OAuthFlow.objects.get(agent=agent)
    assert flow.redirect_uri == "https://agents.example.com/playground/guarded/mcp-oauth/callback"
    assert "redirect_uri=https%3A%2F%2Fagents.example.com" in started["Location"]
    forged = operator_client.get(f"/playground/guarded/mcp-oauth/callback?state={flow.state}&code=c"
                                 f"&iss=https://elsewhere.example.com")
    assert forged.status_code == 502 and b"not from" in forged.content
    started = operator_client.post("/playground/guarded/mcp/guarded/authorize")
    flow = OAuthFlow.objects.filter(used_at=None).get(agent=agent)
    OAuthFlow.objects.filter(pk=flow.pk).update(expires_at=flow.created_at)
    late = operator_client.get(f"/playground/guarded/mcp-oauth/callback?state={flow.state}&code=whatever")
    assert late.status_code == 400 and b"older than ten minutes" in late.content


@transactional
def test_a_token_revoked_under_an_open_connection_fails_the_call_with_the_command(local, sync_turns, tmp_path,
                                                                                  oauth_server):
    deploy(tmp_path, oauth_server)
    authorize_with_command()
    start(local, "guarded", call_line("guarded__add", {"a": 1, "b": 1}))

    httpx.post(f"{oauth_server}/test/revoke", timeout=5)
    session_id = start(local, "guarded", call_line("guarded__add", {"a": 1, "b": 1}))

    [result] = results(session_id)
    assert "output" not in result and "run manage.py mcp oauth guarded guarded" in result["error"]
    session_id = start(local, "guarded", call_line("guarded__add", {"a": 1, "b": 1}))
    assert "unknown tool 'guarded__add'" in results(session_id)[0]["error"]


@transactional
def test_the_admins_agent_page_says_whether_each_oauth_server_is_authorized(tmp_path, oauth_server):
    agent = deploy(tmp_path, oauth_server)
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", "root@example.com", "x"))

    before = admin.get(f"/admin/agents/agent/{agent.pk}/change/").content.decode()
    authorize_with_command()
    after = admin.get(f"/admin/agents/agent/{agent.pk}/change/").content.decode()

    assert 'id="mcp-oauth"' in before and "not authorized" in before and "manage.py mcp oauth guarded guarded" in before
    assert "authorized, access token until" in after and read(agent, "guarded").access_token not in after
