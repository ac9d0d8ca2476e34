"""The access matrix against a production server behind nginx, on SQLite and on PostgreSQL + Redis.

One `serve --production --server uvicorn` and one nginx per database serve the
whole module: each route family's first request (`tests/channels_app/access_matrix.py`)
is asked over https as every caller, the session websocket included; then the
Host checks a hostile caller tries: another host through nginx, and a loopback
`Host` straight to the server, which over HTTP is a 400 and must not make a
websocket the local principal.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from django.contrib.auth.models import Group, User
from websockets.asyncio.client import connect as connect_async
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect

from agents.discovery import deploy_agent_folder
from sessions.models import PersonalToken
from sessions.principal import OPERATORS_GROUP
from tests.agentsite.nginx_support import nginx_binary, run_nginx
from tests.channels_app.access_matrix import CALLERS, FAMILIES, SESSION, Family
from tests.server_database import on_server_database
from tests.support import ROOT, Server, backend_env, free_port, run_server

FERNET_KEY = "7oHTbu0fbxZyP3GDBy6-yn-n_p_1XsYM0J7X5TClHzs="
METRICS_TOKEN = "scraper-secret-live-0123456789abcdef"



def cast() -> dict[str, str]:
    """The cast in the server's own database: two agents, three people, and their tokens."""
    for name in ("support", "notes"):
        deploy_agent_folder(ROOT / "examples" / name)
    mia, max_, olga = (User.objects.create_user(n, password="pw") for n in ("mia", "max", "olga"))
    olga.groups.add(Group.objects.get_or_create(name=OPERATORS_GROUP)[0])
    return {
        "owner": PersonalToken.issue(mia, "t")[1], "member": PersonalToken.issue(max_, "t")[1],
        "operator": PersonalToken.issue(olga, "t")[1],
        "scoped_here": PersonalToken.issue(olga, "here", agents=["support"])[1],
        "scoped_elsewhere": PersonalToken.issue(olga, "elsewhere", agents=["notes"])[1],
    }


@dataclass
class Site:
    server: Server
    public: str
    https_port: int
    ca: Path
    secrets: dict[str, str | None]
    session: str

    def headers(self, caller: str) -> dict[str, str]:
        secret = self.secrets[caller]
        return {"Authorization": f"Bearer {secret}"} if secret else {}

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.public, verify=str(self.ca), timeout=30)

    def socket_answer(self, path: str, headers: dict[str, str], host: str = "localhost") -> int:
        """200 when the socket opens and replays, else the status its close code (4000 + it) or its
        refused handshake carries. `host` is the Host it names; it always reaches nginx.

        A handshake left unanswered for 30 s is asked once more: one such stall was seen in a
        full-suite run on SQLite and is not yet explained (the answer, when it comes, is checked)."""
        try:
            return self._socket_answer(path, headers, host)
        except TimeoutError:
            return self._socket_answer(path, headers, host)

    def _socket_answer(self, path: str, headers: dict[str, str], host: str) -> int:
        # websockets' asyncio client, not its sync one, which reads the TLS socket on a thread of its own while
        # this one writes: OpenSSL's connection is not safe for both at once (a full-suite run crashed in it).
        return asyncio.run(self._socket_answer_async(path, headers, host))

    async def _socket_answer_async(self, path: str, headers: dict[str, str], host: str) -> int:
        context = ssl.create_default_context(cafile=str(self.ca))
        sock = socket.create_connection(("127.0.0.1", self.https_port), timeout=30)
        try:
            async with connect_async(f"wss://{host}:{self.https_port}{path}?startIndex=0", sock=sock, ssl=context,
                                     server_hostname="localhost", additional_headers=headers,
                                     open_timeout=30) as ws:
                json.loads(await asyncio.wait_for(ws.recv(), 30))
                return 200
        except ConnectionClosed as closed:
            return closed.rcvd.code - 4000
        except InvalidStatus as refused:
            return refused.response.status_code


@pytest.fixture(scope="module", params=["sqlite", "postgres+redis"])
def site(request, tmp_path_factory, django_db_blocker) -> Iterator[Site]:
    nginx_binary()
    backend = request.param
    https_port, http_port, server_port = free_port(), free_port(), free_port()
    public = f"https://localhost:{https_port}"
    tmp = tmp_path_factory.mktemp(f"doors-{backend.replace('+', '-')}")
    with contextlib.ExitStack() as stack:
        env = {**backend_env(stack, backend, migrated=True), "AGENTSITE_SECRET_KEY": secrets.token_urlsafe(50),
               "AGENTSITE_SECRETS_KEYS": FERNET_KEY, "AGENTSITE_PUBLIC_URL": public,
               "AGENTSITE_TRUSTED_PROXIES": "127.0.0.1", "AGENTSITE_METRICS_TOKEN": METRICS_TOKEN}
        as_proxied = {"Host": f"localhost:{https_port}", "X-Forwarded-Proto": "https", "X-Forwarded-For": "127.0.0.1"}
        server = stack.enter_context(run_server(tmp / "state", "--production", "--server", "uvicorn", "--no-examples",
                                                "--no-schedules", env=env, port=server_port, ready_headers=as_proxied))
        ca = stack.enter_context(run_nginx(tmp / "nginx", https_port=https_port, http_port=http_port,
                                           upstream_port=server_port))
        with on_server_database(server.state_root, django_db_blocker, env):
            tokens = {"anonymous": None, **cast(), "metrics": METRICS_TOKEN}
        with httpx.Client(base_url=public, verify=str(ca), timeout=30) as client:
            created = client.post("/support/v1/session", json={"message": "hello"},
                                  headers={"Authorization": f"Bearer {tokens['owner']}"})
        assert created.status_code == 201, created.text
        yield Site(server, public, https_port, ca, tokens, created.json()["sessionId"])


@pytest.mark.timeout(300)
def test_each_caller_gets_the_matrix_answer_from_a_production_server_behind_nginx(site):
    seen, wanted = {}, {}
    with site.client() as client:
        for family in FAMILIES:
            method, path = family.requests[0].split(" ", 1)
            path = path.replace(SESSION, site.session)
            for caller in CALLERS:
                wanted[(family.name, caller)] = family.expected(family.requests[0], caller)
                if family.socket:
                    seen[(family.name, caller)] = site.socket_answer(path, site.headers(caller))
                else:
                    seen[(family.name, caller)] = client.request(method, path, headers=site.headers(caller)).status_code
    assert {k: v for k, v in seen.items() if v != wanted[k]} == {}


def scoped_answer(site: Site, family: Family, caller: str) -> str:
    with site.client() as client:
        return client.get(family.requests[0].split(" ", 1)[1], headers=site.headers(caller)).text


def test_a_token_scoped_elsewhere_reads_no_word_of_support_in_the_filtered_answers(site):
    for family in (f for f in FAMILIES if f.names_support):
        assert family.names_support in scoped_answer(site, family, "operator"), family.name
        assert family.names_support not in scoped_answer(site, family, "scoped_elsewhere"), family.name


def test_a_websocket_naming_another_host_is_refused_as_http_is(site):
    path = f"/support/v1/session/{site.session}/ws"
    owner = site.headers("owner")
    with site.client() as client:
        assert client.get("/v1/agents", headers={**owner, "Host": "evil.example"}).status_code == 400
    assert site.socket_answer(path, owner, host="evil.example") == 403
    assert site.socket_answer(path, owner) == 200


def test_from_loopback_a_loopback_host_is_400_over_http_and_never_the_local_principals_socket(site):
    upstream = site.server.base_url.removeprefix("http://")
    assert httpx.get(f"{site.server.base_url}/v1/agents", headers={"Host": upstream}, timeout=30).status_code == 400
    with pytest.raises(InvalidStatus) as refused:
        with connect(f"ws://{upstream}/support/v1/session/{site.session}/ws?startIndex=0", open_timeout=30) as ws:
            ws.recv(timeout=30)
    assert refused.value.response.status_code == 403
