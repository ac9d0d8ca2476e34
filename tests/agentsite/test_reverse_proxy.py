"""deploy/nginx.conf in front of `serve --production --server uvicorn`: a session over https, as NDJSON,
SSE and a websocket, with a personal token and with a person's login.

nginx ends TLS on a certificate the test makes and forwards to the server on
loopback, which lists 127.0.0.1 in AGENTSITE_TRUSTED_PROXIES: its
X-Forwarded-Proto is what keeps the production server from redirecting to
https forever, and what the client sends in forwarding headers never makes it
the local principal, nor evades a lockout. One server and one nginx serve every test of the module.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import ssl
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
import httpx2
import pytest
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.types import a2a_pb2 as a2a
from django.contrib.auth.models import User
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.agentsite.nginx_support import nginx_binary, run_nginx
from tests.command_line import run_command_line
from tests.server_database import on_server_database
from tests.support import ROOT, Server, child_env, free_port, read_stream_until, run_server

FERNET_KEY = "7oHTbu0fbxZyP3GDBy6-yn-n_p_1XsYM0J7X5TClHzs="  # a fixed, valid Fernet key

WAITING = "session.waiting"
PASSWORD = "ada-logs-in-over-tls-1"


def personal_token(state_root, env: dict[str, str], db_blocker) -> str:
    """A user and a personal token (`createtoken`, its command line in this process) in the server's own database."""
    with on_server_database(state_root, db_blocker, env):
        User.objects.create_user("ada", password=PASSWORD)
        code, out, err = run_command_line("createtoken", "ada", "--name", "nginx")
    assert code == 0, out + err
    return out.strip().splitlines()[-1]


def read_sse_until(client: httpx.Client, url: str, until_type: str, headers: dict[str, str]) -> list[dict]:
    events = []
    with client.stream("GET", url, headers={**headers, "Accept": "text/event-stream"}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if events[-1]["type"] == until_type:
                    return events
    raise AssertionError(f"the SSE stream ended before {until_type}: {events}")


@dataclass
class Site:
    server: Server
    public: str
    https_port: int
    http_port: int
    ca: Path
    token: str

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.public, verify=str(self.ca), timeout=20, **kwargs)

    def websocket_frames(self, path: str, headers: dict[str, str]) -> list[dict]:
        # websockets' asyncio client, not its sync one: that one reads the TLS socket on a thread of its own
        # while the handshake writes on this one, and OpenSSL's connection is not safe for both at once (a
        # full-suite run crashed in it with a segmentation fault).
        return asyncio.run(self._websocket_frames(path, headers))

    async def _websocket_frames(self, path: str, headers: dict[str, str]) -> list[dict]:
        frames: list[dict] = []
        context = ssl.create_default_context(cafile=str(self.ca))
        async with connect(f"wss://localhost:{self.https_port}{path}/ws?startIndex=0", ssl=context,
                           additional_headers=headers, open_timeout=20) as ws:
            while not frames or frames[-1]["type"] != WAITING:
                frames.append(json.loads(await asyncio.wait_for(ws.recv(), 20)))
        return frames


@pytest.fixture(scope="module")
def site(tmp_path_factory, django_db_blocker) -> Iterator[Site]:
    """`serve --production --server uvicorn` behind nginx over TLS, with a person who has a personal token."""
    nginx_binary()
    https_port, http_port, server_port = free_port(), free_port(), free_port()
    public = f"https://localhost:{https_port}"
    # No AGENTSITE_ENV: --production turns it on.
    env = {"AGENTSITE_SECRET_KEY": secrets.token_urlsafe(50),
           "AGENTSITE_SECRETS_KEYS": FERNET_KEY, "AGENTSITE_PUBLIC_URL": public,
           "AGENTSITE_TRUSTED_PROXIES": "127.0.0.1"}
    # What nginx would send: the server is only ready for requests that came in over https.
    as_proxied = {"Host": f"localhost:{https_port}", "X-Forwarded-Proto": "https", "X-Forwarded-For": "127.0.0.1"}
    tmp = tmp_path_factory.mktemp("site")
    with contextlib.ExitStack() as stack:
        # The example agents are deployed in production only when asked.
        server = stack.enter_context(run_server(tmp / "state", "--production", "--examples", "--server", "uvicorn",
                                                "--no-schedules", env=env, port=server_port,
                                                ready_headers=as_proxied))
        ca = stack.enter_context(run_nginx(tmp / "nginx", https_port=https_port, http_port=http_port,
                                           upstream_port=server_port))
        token = personal_token(server.state_root, env, django_db_blocker)
        yield Site(server, public, https_port, http_port, ca, token)


def test_a_session_runs_through_nginx_over_https_with_a_personal_token(site):
    public, server = site.public, site.server
    assert "1 web (uvicorn)" in server.output()
    auth = {"Authorization": f"Bearer {site.token}"}
    with site.client() as client:
        # Forged forwarding headers reach the server from nginx's trusted address, and still
        # do not make a loopback client the local principal.
        assert client.get("/v1/agents").status_code == 401
        assert client.get("/v1/agents", headers={"X-Forwarded-For": "127.0.0.1", "Forwarded": "for=127.0.0.1",
                                                 "X-Real-IP": "127.0.0.1"}).status_code == 401
        created = client.post("/support/v1/session", json={"message": "hello through nginx"}, headers=auth)
        assert created.status_code == 201, created.text
        session_id = created.json()["sessionId"]
        assert created.json()["streamUrl"].startswith(f"{public}/")
        assert "max-age" in created.headers["strict-transport-security"]
        path = f"/support/v1/session/{session_id}"

        client.headers.update(auth)
        ndjson = read_stream_until(client, f"{path}/stream", WAITING)
        sse = read_sse_until(client, f"{path}/stream", WAITING, auth)
        assert [e["type"] for e in sse] == [e["type"] for e in ndjson]
        assert ndjson[0]["type"] == "session.started"

    frames = site.websocket_frames(path, auth)
    assert [e["type"] for e in frames] == [e["type"] for e in ndjson]

    # nginx's plain-http server only redirects; straight to the server, http is redirected too.
    assert httpx.get(f"http://127.0.0.1:{site.http_port}/v1/agents", headers={"Host": "localhost"}).status_code == 301
    direct = httpx.get(f"{server.base_url}/v1/agents", headers={"Host": f"localhost:{site.https_port}"})
    assert direct.status_code == 301 and direct.headers["location"].startswith("https://")


def test_an_mcp_client_asks_through_nginx_and_gets_its_progress_and_links_on_the_public_url(site):
    """The MCP door's location: the answer's SSE stream is not buffered, and the links are the public URL's."""
    progress: list[str] = []

    async def on_progress(value, total, message):
        progress.append(message)

    async def ask():
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {site.token}"}, verify=str(site.ca), timeout=20)
        async with http, Client(streamable_http_client(f"{site.public}/support/mcp", http_client=http)) as client:
            return await client.call_tool("ask", {"message": "hello over MCP"}, progress_callback=on_progress)

    result = asyncio.run(ask())
    assert not result.is_error and result.content[0].text == "You said: hello over MCP"
    session = result.structured_content["sessionId"]
    assert progress[-1] == f"{WAITING} (session {session})"
    assert result.structured_content["playgroundUrl"] == f"{site.public}/playground/support?sessionId={session}"
    with site.client() as client:
        assert client.post("/support/mcp", json={}).status_code == 401


def test_an_a2a_client_reads_the_card_and_streams_through_nginx_on_the_public_url(site):
    """The A2A door's location: the card names the public endpoint, and message/stream's SSE comes through."""
    async def stream():
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {site.token}"}, verify=str(site.ca),
                                     timeout=20) as http:
            card = await A2ACardResolver(http, f"{site.public}/support").get_agent_card()
            client = await create_client(card, ClientConfig(httpx_client=http, streaming=True))
            request = a2a.SendMessageRequest(message=a2a.Message(message_id="m1", role=a2a.ROLE_USER,
                                                                 parts=[a2a.Part(text="hello over A2A")]))
            return card, [response async for response in client.send_message(request)]

    card, responses = asyncio.run(stream())
    assert card.supported_interfaces[0].url == f"{site.public}/support/a2a"
    kinds = [response.WhichOneof("payload") for response in responses]
    assert kinds[0] == "task" and "artifact_update" in kinds
    assert responses[0].task.status.state == a2a.TASK_STATE_SUBMITTED  # however fast the turn ran
    assert responses[-1].status_update.status.state == a2a.TASK_STATE_COMPLETED
    assert responses[-1].status_update.status.message.parts[0].text == "You said: hello over A2A"
    with site.client() as client:
        assert client.post("/support/a2a", json={}).status_code == 401


def test_a_person_logs_in_through_nginx_and_follows_a_session_with_the_login_cookie(site):
    with site.client() as client:
        form = client.get("/accounts/login/")
        assert form.status_code == 200
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form.text).group(1)
        # Django checks an https form's Referer against the host the proxy named.
        logged_in = client.post("/accounts/login/", data={"username": "ada", "password": PASSWORD,
                                                          "csrfmiddlewaretoken": csrf},
                                headers={"Referer": f"{site.public}/accounts/login/"})
        assert logged_in.status_code == 302 and logged_in.headers["location"] == "/playground/", logged_in.text
        cookies = {c.split("=", 1)[0]: c.lower() for c in logged_in.headers.get_list("set-cookie")}
        assert "secure" in cookies["sessionid"] and "httponly" in cookies["sessionid"]
        assert "secure" in cookies["csrftoken"]

        # A browser's cookie on a write needs the CSRF token (rotated by the login) and the site's Origin.
        same_site = {"Origin": site.public}
        refused = client.post("/support/v1/session", json={"message": "hello"}, headers=same_site)
        assert refused.status_code == 403, refused.text
        created = client.post("/support/v1/session", json={"message": "hello, logged in"},
                              headers={**same_site, "X-CSRFToken": client.cookies["csrftoken"]})
        assert created.status_code == 201, created.text
        path = f"/support/v1/session/{created.json()['sessionId']}"
        ndjson = read_stream_until(client, f"{path}/stream", WAITING)
        assert ndjson[-2]["type"] == "turn.completed"
        assert client.get("/support/v1/sessions").json()["sessions"][0]["sessionId"] == created.json()["sessionId"]
        cookie = f"sessionid={client.cookies['sessionid']}"

    frames = site.websocket_frames(path, {"Cookie": cookie, "Origin": site.public})
    assert [e["type"] for e in frames] == [e["type"] for e in ndjson]
    # Without the cookie the same websocket is refused.
    with pytest.raises(ConnectionClosed) as refused:
        site.websocket_frames(path, {"Origin": site.public})
    assert refused.value.rcvd.code == 4401


def test_wrong_tokens_through_nginx_lock_the_client_out_whatever_it_forges(site):
    guess = "ast_0123456789ab_" + "g" * 43  # a token id no row has: one account, as the server counts
    with site.client() as client:
        for n in range(10):  # the default: 10 per address and account in 5 minutes
            forged = {"X-Forwarded-For": f"198.51.100.{n}", "Forwarded": f"for=198.51.100.{n}",
                      "Authorization": f"Bearer {guess}"}
            assert client.get("/v1/agents", headers=forged).status_code == 401
        locked = client.get("/v1/agents", headers={"X-Forwarded-For": "192.0.2.1", "Authorization": f"Bearer {guess}"})
        assert locked.status_code == 429, locked.text
        assert locked.json()["error"]["code"] == "too_many_failures" and 1 <= int(locked.headers["Retry-After"]) <= 300
        # Another account from the same client is not locked out by these.
        assert client.get("/v1/agents", headers={"Authorization": f"Bearer {site.token}"}).status_code == 200


def test_under_uvicorn_a_forwarded_proto_from_an_untrusted_loopback_peer_is_ignored(tmp_path):
    # uvicorn believes X-Forwarded-* from 127.0.0.1 by default; serve turns that off, so the
    # scheme stays http and an https Origin is another site's.
    with run_server(tmp_path / "state", "--no-examples", "--no-workers", "--server", "uvicorn") as server:
        host = server.base_url.removeprefix("http://")
        forged = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}

        as_https = httpx.post(f"{server.base_url}/v1/tokens", json={}, headers={**forged, "Origin": f"https://{host}"})
        as_http = httpx.post(f"{server.base_url}/v1/tokens", json={}, headers={**forged, "Origin": f"http://{host}"})

        assert as_https.status_code == 403 and as_https.json()["error"]["code"] == "foreign_origin", as_https.text
        assert as_http.status_code == 401, as_http.text


def test_serve_refuses_a_trusted_proxy_entry_that_is_not_an_address(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "serve", "--no-examples", "--port", str(free_port())],
                          cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env=child_env(AGENTSITE_STATE_ROOT=str(tmp_path / "state"),
                                        AGENTSITE_TRUSTED_PROXIES="127.0.0.1,nginx.local"))

    assert done.returncode != 0
    assert "AGENTSITE_TRUSTED_PROXIES lists 'nginx.local'" in done.stderr
    assert "Traceback" not in done.stderr
