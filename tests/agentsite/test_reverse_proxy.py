"""deploy/nginx.conf in front of a production server: a session over https, as NDJSON, SSE and a websocket.

nginx ends TLS on a certificate the test makes and forwards to the server on
loopback, which lists 127.0.0.1 in AGENTSITE_TRUSTED_PROXIES: its
X-Forwarded-Proto is what keeps the production server from redirecting to
https forever, and what the client sends in forwarding headers never makes it
the local principal.
"""
from __future__ import annotations

import json
import secrets
import ssl
import subprocess
import sys

import httpx
from websockets.sync.client import connect

from tests.agentsite.nginx_support import nginx_binary, run_nginx
from tests.support import ROOT, child_env, free_port, read_stream_until, run_server

WAITING = "session.waiting"


def personal_token(state_root, env: dict[str, str]) -> str:
    """A user and a personal token (`createtoken`) in the server's own database (its state root)."""
    script = ("from django.contrib.auth.models import User; from django.core.management import call_command; "
              "User.objects.create_user('ada', password='unused-password-1'); "
              "call_command('createtoken', 'ada', '--name', 'nginx')")
    done = subprocess.run([sys.executable, str(ROOT / "manage.py"), "shell", "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=child_env(AGENTSITE_STATE_ROOT=str(state_root), **env))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


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


def test_a_session_runs_through_nginx_over_https_with_a_personal_token(tmp_path):
    nginx_binary()
    https_port, http_port, server_port = free_port(), free_port(), free_port()
    public = f"https://localhost:{https_port}"
    env = {"AGENTSITE_ENV": "production", "AGENTSITE_SECRET_KEY": secrets.token_urlsafe(50),
           "AGENTSITE_PUBLIC_URL": public, "AGENTSITE_TRUSTED_PROXIES": "127.0.0.1"}
    # What nginx would send: the server is only ready for requests that came in over https.
    as_proxied = {"Host": f"localhost:{https_port}", "X-Forwarded-Proto": "https", "X-Forwarded-For": "127.0.0.1"}

    with run_server(tmp_path / "state", "--no-schedules", env=env, port=server_port, ready_headers=as_proxied) as server, \
            run_nginx(tmp_path / "nginx", https_port=https_port, http_port=http_port, upstream_port=server_port) as ca:
        token = personal_token(server.state_root, env)
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=public, verify=str(ca), timeout=20) as client:
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

        context = ssl.create_default_context(cafile=str(ca))
        frames = []
        with connect(f"wss://localhost:{https_port}{path}/ws?startIndex=0", ssl=context, additional_headers=auth,
                     open_timeout=20) as ws:
            while not frames or frames[-1]["type"] != WAITING:
                frames.append(json.loads(ws.recv(timeout=20)))
        assert [e["type"] for e in frames] == [e["type"] for e in ndjson]

        # nginx's plain-http server only redirects; straight to the server, http is redirected too.
        assert httpx.get(f"http://127.0.0.1:{http_port}/v1/agents", headers={"Host": "localhost"}).status_code == 301
        direct = httpx.get(f"{server.base_url}/v1/agents", headers={"Host": f"localhost:{https_port}"})
        assert direct.status_code == 301 and direct.headers["location"].startswith("https://")


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
