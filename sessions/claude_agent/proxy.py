"""The runtime's one way to its model: a proxy on a unix socket in its run home that adds the key.

The runtime's process, and every process it starts, is given neither the
model's key nor a network (the sandbox has none unless the agent asks for
it): it calls the Messages API over this socket with a placeholder key, and
the proxy, in the worker, forwards the call to the model's server with the
real one and streams the answer back. Only the API's own paths are
forwarded. The proxy lives as long as the run.
"""
from __future__ import annotations

import logging
import os
import socketserver
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://api.anthropic.com"
# What the runtime holds instead of the key: worthless outside the socket, which takes any.
PLACEHOLDER_KEY = "agentsite-run-proxy"
FORWARDED = frozenset({"/v1/messages", "/v1/messages/count_tokens", "/v1/models"})
# Never forwarded from the runtime: the proxy sets them (the key) or the connection does.
DROPPED = frozenset({"host", "content-length", "x-api-key", "authorization", "connection", "accept-encoding",
                     "transfer-encoding", "keep-alive"})
TIMEOUT_SECONDS, CONNECT_SECONDS = 600.0, 30.0


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class ModelProxy:
    def __init__(self, socket_path: Path, base_url: str | None, key: str | None):
        self.socket_path = socket_path
        self.base_url = (base_url or DEFAULT_BASE_URL).rstrip("/")
        self.key = key or ""
        import httpx  # here, not at the top: a worker that runs no such session does not load it for this

        self.http = httpx
        self.client = httpx.Client(timeout=httpx.Timeout(TIMEOUT_SECONDS, connect=CONNECT_SECONDS))
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args) -> None:  # noqa: A002  the access log is the worker's spans
                return

            def address_string(self) -> str:
                return "runtime"

            def do_GET(self) -> None:
                proxy.forward(self)

            def do_POST(self) -> None:
                proxy.forward(self)

        self.server = _Server(str(socket_path), Handler)
        os.chmod(socket_path, 0o666)  # the sandbox's uid connects to it (its folder is the run's own)
        self.thread = threading.Thread(target=self.server.serve_forever, name="claude-agent-proxy", daemon=True)

    def __enter__(self) -> "ModelProxy":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.client.close()

    client: "httpx.Client"

    def forward(self, request: BaseHTTPRequestHandler) -> None:
        path = request.path
        if path.split("?")[0] not in FORWARDED:
            request.send_error(404, "not a Messages API path")
            return
        length = int(request.headers.get("content-length") or 0)
        body = request.rfile.read(length) if length else b""
        headers = {k: v for k, v in request.headers.items() if k.lower() not in DROPPED}
        if self.key:
            headers["x-api-key"] = self.key
        try:
            with self.client.stream(request.command, self.base_url + path, headers=headers, content=body) as answer:
                request.send_response(answer.status_code)
                for name, value in answer.headers.items():
                    if name.lower() not in DROPPED and name.lower() != "content-encoding":  # sent decoded
                        request.send_header(name, value)
                request.send_header("connection", "close")  # the body ends when the connection does
                request.end_headers()
                for chunk in answer.iter_bytes():
                    request.wfile.write(chunk)
                    request.wfile.flush()
        except self.http.HTTPError as exc:
            log.warning("the model's server could not be reached for the runtime: %s", exc)
            try:
                request.send_error(502, "the model's server could not be reached")
            except OSError:
                return
        except OSError:  # the runtime went away mid-answer (interrupted)
            return
        request.close_connection = True
