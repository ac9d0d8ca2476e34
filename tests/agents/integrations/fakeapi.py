"""A loopback HTTP server standing in for a provider's API: scripted routes,
every request recorded (method, path, headers, body)."""
from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def form(self) -> dict[str, list[str]]:
        return parse_qs(self.body.decode())


@dataclass
class Answer:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[Recorded, re.Match], Answer]


class FakeAPI:
    """`route(method, pattern, answer)`: the first route whose regex fully
    matches the path answers; anything else is a 404 that is recorded too."""

    def __init__(self, host: str = "127.0.0.1"):
        self.routes: list[tuple[str, re.Pattern, Answer | Handler]] = []
        self.requests: list[Recorded] = []
        api = self

        class RequestHandler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def handle_any(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                parts = urlsplit(self.path)
                recorded = Recorded(self.command, parts.path, parse_qs(parts.query),
                                    {k.lower(): v for k, v in self.headers.items()}, self.rfile.read(length))
                api.requests.append(recorded)
                answer = Answer(404, {"message": "Not Found"})
                for method, pattern, reply in api.routes:
                    match = pattern.fullmatch(parts.path)
                    if method == self.command and match:
                        answer = reply(recorded, match) if callable(reply) else reply
                        break
                payload = answer.body if isinstance(answer.body, bytes) else \
                    b"" if answer.body is None else json.dumps(answer.body).encode()
                self.send_response(answer.status)
                if answer.body is not None and not isinstance(answer.body, bytes):
                    self.send_header("content-type", "application/json; charset=utf-8")
                for key, value in answer.headers.items():
                    self.send_header(key, value)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = handle_any

        self.httpd = ThreadingHTTPServer((host, 0), RequestHandler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def route(self, method: str, pattern: str, answer: Answer | Handler) -> "FakeAPI":
        self.routes.append((method, re.compile(pattern), answer))
        return self

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "FakeAPI":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
