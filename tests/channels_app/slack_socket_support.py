"""A loopback Slack for Socket Mode: its Web API's `apps.connections.open` (the app-level token
checked) gives the address of a loopback websocket, which sends envelopes as Slack does: each to
an open connection, and again (`retry_attempt` + 1) when it is not acknowledged within three
seconds or its connection closes, until a connection acknowledges it."""
from __future__ import annotations

import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection, serve

from tests.agents.integrations.fakeapi import Answer, Recorded

from .slack_support import FakeSlack

APP_TOKEN = "xapp-1-A0MDYCDME-1-8f742231b10e8888abcd99yyyzzz85a5"
ACK_WINDOW = 3.0  # seconds Slack waits for an acknowledgement before sending an envelope again


@dataclass
class Link:
    """One websocket connection an app opened."""

    number: int
    connection: ServerConnection
    closed: bool = False


@dataclass
class Envelope:
    id: str
    kind: str
    payload: dict[str, Any]
    deliveries: list[int] = field(default_factory=list)  # the links it was sent to, in order
    sent_at: float = 0.0
    acked_by: int | None = None


class SocketSlack(FakeSlack):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[Link] = []
        self.envelopes: dict[str, Envelope] = {}
        self.lock = threading.Lock()
        self.opened = 0  # apps.connections.open calls answered
        self._numbers = itertools.count(1)
        self._ids = itertools.count(1)
        self._stopping = threading.Event()
        self.ws = serve(self._serve, "127.0.0.1", 0)
        self.route("POST", r"/api/apps\.connections\.open", self._open)
        self._threads = [threading.Thread(target=self.ws.serve_forever, daemon=True),
                         threading.Thread(target=self._deliver, daemon=True)]

    def __enter__(self) -> "SocketSlack":
        super().__enter__()
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self.ws.shutdown()
        super().__exit__(*exc)

    # -- what a test does --------------------------------------------------------------
    def send(self, payload: dict[str, Any], kind: str = "events_api") -> str:
        """Queue an envelope (`events_api` with an event_callback, `interactive` with a click)."""
        envelope = Envelope(f"env-{next(self._ids):04d}", kind, payload)
        with self.lock:
            self.envelopes[envelope.id] = envelope
        return envelope.id

    def open_links(self) -> list[Link]:
        with self.lock:
            return [link for link in self.links if not link.closed]

    def refresh(self) -> None:
        """Ask every open connection to move to a new address, as Slack does every few hours."""
        for link in self.open_links():
            link.connection.send(json.dumps({"type": "disconnect", "reason": "refresh_requested",
                                             "debug_info": {"host": "loopback"}}))

    def unacknowledged(self) -> list[Envelope]:
        with self.lock:
            return [e for e in self.envelopes.values() if e.acked_by is None]

    # -- Slack's side --------------------------------------------------------------------
    def _open(self, request: Recorded, match: Any) -> Answer:
        if request.headers.get("authorization") != f"Bearer {APP_TOKEN}":
            return Answer(200, {"ok": False, "error": "invalid_auth"})
        self.opened += 1
        port = self.ws.socket.getsockname()[1]
        return Answer(200, {"ok": True, "url": f"ws://127.0.0.1:{port}/link/{next(self._numbers)}"})

    def _serve(self, connection: ServerConnection) -> None:
        link = Link(int(urlsplit(connection.request.path).path.rsplit("/", 1)[-1]), connection)
        with self.lock:
            self.links.append(link)
        try:
            connection.send(json.dumps({"type": "hello", "num_connections": len(self.open_links()),
                                        "connection_info": {"app_id": "A0MDYCDME"}}))
            for raw in connection:
                answer = json.loads(raw)
                with self.lock:
                    envelope = self.envelopes.get(answer.get("envelope_id", ""))
                    if envelope is not None and envelope.acked_by is None:
                        envelope.acked_by = link.number
        except ConnectionClosed:
            pass  # the app went away (or was killed): its unacknowledged envelopes go to the next one
        finally:
            link.closed = True

    def _deliver(self) -> None:
        while not self._stopping.wait(0.05):
            now = time.monotonic()
            with self.lock:
                live = [link for link in self.links if not link.closed]
                due = [e for e in self.envelopes.values() if e.acked_by is None and (
                    not e.deliveries or now - e.sent_at > ACK_WINDOW
                    or any(link.closed for link in self.links if link.number == e.deliveries[-1]))]
            if not live:
                continue
            for envelope in due:
                link = live[-1]
                body = {"envelope_id": envelope.id, "type": envelope.kind, "payload": envelope.payload,
                        "accepts_response_payload": False, "retry_attempt": len(envelope.deliveries),
                        "retry_reason": "timeout" if envelope.deliveries else ""}
                envelope.deliveries.append(link.number)
                envelope.sent_at = now
                try:
                    link.connection.send(json.dumps(body))
                except ConnectionClosed:
                    link.closed = True
