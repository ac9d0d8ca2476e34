"""An MCP server's OAuth refresh is claimed on the access token's row and runs outside any
transaction: while the token endpoint takes its time, other writers of the database go on
(on SQLite a transaction would hold their write lock), callers that lost the claim take the
winner's token, and a failed refresh leaves the claim to the next caller.

The token endpoint is a loopback server in a thread that answers only when the test says so."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest
from django.db import connection, transaction
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from agents.mcp import McpServer
from agents.mcpauth.stored import NotAuthorized, read, save_authorization
from agents.mcpauth.tokens import refresh
from agents.models import Agent, Secret

transactional = pytest.mark.django_db(transaction=True)
URL = "https://tools.example/mcp"
WAIT = 30  # seconds any thread or answer is waited for at most: a bound against a hang, not a measure


class TokenEndpoint:
    """Counts refresh grants; each waits for `answer` (set by the test) before it is answered with `status`."""

    def __init__(self):
        self.asked = threading.Event()
        self.answer = threading.Event()
        self.grants: list[dict[str, list[str]]] = []
        self.status = 200
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                form = parse_qs(self.rfile.read(int(self.headers.get("content-length", 0))).decode())
                endpoint.grants.append(form)
                endpoint.asked.set()
                endpoint.answer.wait(WAIT)
                number = len(endpoint.grants)
                body: dict[str, Any] = ({"access_token": f"at-{number}", "token_type": "Bearer", "expires_in": 3600,
                                         "refresh_token": f"rt-{number}"} if endpoint.status == 200 else
                                        {"error": "temporarily_unavailable"})
                payload = json.dumps(body).encode()
                self.send_response(endpoint.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:%d/token" % self.httpd.server_address[1]

    def close(self) -> None:
        self.answer.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def endpoint():
    made = TokenEndpoint()
    yield made
    made.close()


@pytest.fixture
def agent(endpoint) -> Agent:
    """An agent authorized for the server, its access token about to expire (30 s, within the refresh margin)."""
    made = Agent.objects.create(slug="guarded", name="Guarded")
    save_authorization(
        made, "guarded", tokens=OAuthToken(access_token="at-0", token_type="Bearer", expires_in=30, refresh_token="rt-0"),
        registration=OAuthClientInformationFull(client_id="client-1", redirect_uris=["http://127.0.0.1:1/callback"],
                                                token_endpoint_auth_method="none"),
        endpoint={"declared": URL, "url": URL, "tokenEndpoint": endpoint.url, "resource": None, "scope": None,
                  "issuer": None, "issRequired": False})
    return made


SERVER = McpServer(name="guarded", url=URL, oauth=True)


def in_thread(work, results: list) -> threading.Thread:
    """Run `work` on its own database connection; its value (or its exception) lands in `results`."""
    def run():
        try:
            results.append(work())
        except Exception as exc:  # noqa: BLE001 (asserted by the test)
            results.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@transactional
def test_a_writer_commits_while_the_token_endpoint_has_not_answered_yet(agent, endpoint):
    refreshed: list = []
    refresher = in_thread(lambda: refresh(agent, SERVER, seen="at-0"), refreshed)
    assert endpoint.asked.wait(WAIT)

    def write() -> bool:
        with transaction.atomic():
            Secret.put(agent, "WRITTEN_DURING_THE_REFRESH", "yes")
        return not endpoint.answer.is_set()

    written: list = []
    in_thread(write, written).join(WAIT)
    endpoint.answer.set()  # the endpoint answers only once the writer has committed
    refresher.join(WAIT)

    assert written == [True]  # committed while the endpoint still held its answer
    assert refreshed == ["at-1"]  # and the refresh, which waited for that, still succeeded
    stored = read(agent, "guarded")
    assert (stored.access_token, stored.refresh_token) == ("at-1", "rt-1")
    assert [grant["refresh_token"] for grant in endpoint.grants] == [["rt-0"]]
    assert Secret.objects.get(agent=agent, name="MCP_OAUTH_GUARDED_ACCESS_TOKEN").refreshing_until is None


@transactional
def test_callers_that_lost_the_claim_take_the_winners_token(agent, endpoint):
    got: list = []
    first = in_thread(lambda: refresh(agent, SERVER, seen="at-0"), got)
    assert endpoint.asked.wait(WAIT)
    others = [in_thread(lambda: refresh(agent, SERVER, seen="at-0", refused=True), got) for _ in range(2)]

    endpoint.answer.set()
    for thread in [first, *others]:
        thread.join(WAIT)

    assert got == ["at-1", "at-1", "at-1"]
    assert len(endpoint.grants) == 1


@transactional
def test_a_failed_refresh_reports_it_and_leaves_the_claim_to_the_next_caller(agent, endpoint):
    endpoint.answer.set()
    endpoint.status = 503

    with pytest.raises(NotAuthorized, match=r"could not be refreshed now .*run manage.py mcp oauth guarded guarded"):
        refresh(agent, SERVER, seen="at-0")
    assert read(agent, "guarded").access_token == "at-0"  # the tokens are kept: the endpoint may come back

    endpoint.status = 200
    assert refresh(agent, SERVER, seen="at-0") == "at-2"
    assert len(endpoint.grants) == 2


@transactional
def test_a_refused_refresh_forgets_the_tokens(agent, endpoint):
    endpoint.answer.set()
    endpoint.status = 400

    with pytest.raises(NotAuthorized, match="is no longer authorized"):
        refresh(agent, SERVER, seen="at-0")

    stored = read(agent, "guarded")
    assert stored.access_token is None and stored.refresh_token is None
