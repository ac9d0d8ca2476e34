"""Slack in Socket Mode: the app connects out over a websocket, so a server with no public URL
takes Slack.

`slack_channel(socket_mode=True)` declares the channel's connection; the server keeps it open in
one process of the deployment at a time (sessions.custom_channels.connections) and calls `tick()`
there every second (connecting on a thread of its own). A `SocketModeLink` asks Slack's Web API for a websocket address
(`apps.connections.open`, with the app-level token the config names) and connects through
slack_sdk's built-in Socket Mode client; when the connection drops it connects again, waiting
twice as long after each attempt (1 s up to a minute) until a connection stays up. Slack's own `disconnect` notices (a
connection being refreshed) make the client move to a new address at once.

Each envelope is handled as the Events API and interactivity routes handle their requests (the
same engagement rules, delivery claim and background work), then acknowledged: Slack sends an
envelope not acknowledged within three seconds again, to whichever connection is open, and the
delivery claim makes a second copy a no-op. An envelope whose handling failed is not
acknowledged, so Slack's retry gets another go.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from typing import Any, Callable

from django.db import close_old_connections

from agents.integrations.events import PayloadError
from agents.integrations.outbound import OutboundRefused, check_url
from agents.integrations.slack.client import SlackChannelConfig

log = logging.getLogger(__name__)

FIRST_WAIT, LONGEST_WAIT = 1.0, 60.0  # seconds between attempts to connect
STEADY = 30.0  # seconds a connection stays up before a drop is retried at once again
# Slack's envelope types this channel acts on; the others ("slash_commands", "hello") are acknowledged.
EVENTS, INTERACTIVE = "events_api", "interactive"

Handle = Callable[[SlackChannelConfig, Any, str, dict[str, Any]], str]


class SocketModeLink:
    """One channel's Socket Mode connection, in the process holding it."""

    def __init__(self, config: SlackChannelConfig, handle: Handle, ctx: Any) -> None:
        self.config, self.handle, self.ctx = config, handle, ctx
        self.client: Any = None
        self.closed = False
        self.lock = threading.Lock()
        self.attempt: threading.Thread | None = None
        self.wait = FIRST_WAIT
        self.next_try = self.up_since = 0.0

    def __repr__(self) -> str:
        return f"SocketModeLink({self.ctx.agent.slug}/{self.ctx.channel_id})"

    @property
    def connected(self) -> bool:
        client = self.client
        return client is not None and client.is_connected()

    @property
    def attempting(self) -> bool:
        return self.attempt is not None and self.attempt.is_alive()

    def tick(self) -> None:
        """Start an attempt to connect if not connected, once the wait since the last one has passed.

        The attempt runs on a thread of its own: asking Slack for an address and opening the
        websocket may take seconds, and the caller (the keeper) must go on renewing its leases.
        Each attempt doubles the wait (a connection that keeps dropping backs off like one that
        cannot open); a connection up for STEADY seconds resets it.
        """
        now = time.monotonic()
        if self.closed or self.attempting:
            return
        if self.connected:
            if now - self.up_since >= STEADY:
                self.wait = FIRST_WAIT
            return
        if now < self.next_try:
            return
        self.attempt = threading.Thread(target=self._attempt, name=f"slack-connect-{self!r}", daemon=True)
        self.attempt.start()

    def close(self) -> None:
        """Stop for good. The client closes on a thread of its own: it waits for the envelopes being
        handled, and the keeper calling this must not."""
        with self.lock:
            self.closed = True
            client, self.client = self.client, None
        if client is not None:
            threading.Thread(target=client.close, name=f"slack-close-{self!r}", daemon=True).start()

    def _attempt(self) -> None:
        delay = self.wait * random.uniform(0.5, 1.0)
        self.wait = min(self.wait * 2, LONGEST_WAIT)
        try:
            self._connect()
        except Exception as exc:
            log.warning("slack socket mode %r: cannot connect (%s); trying again in %.0f s", self, exc, delay)
        else:
            self.up_since = time.monotonic()
            log.info("slack socket mode %r: connected", self)
        finally:
            self.next_try = time.monotonic() + delay

    def _connect(self) -> None:
        token = self.config.secret("app_token_env")
        if not token:
            raise LookupError(f"no Slack app-level token: set {self.config.app_token_env} (a secret of the agent)")
        stale = None
        with self.lock:
            if self.closed:
                return
            if self.client is None or self.client.app_token != token:  # a rotated token: a new client
                stale, self.client = self.client, self._client(token)
            client = self.client
        if stale is not None:
            stale.close()
        # The SDK moves to a new address on its own when Slack asks (a `disconnect` notice): one at a time.
        with client.connect_operation_lock:
            url = client.issue_new_wss_url()
            scheme, _, rest = url.partition(":")
            try:
                check_url(("https" if scheme == "wss" else "http") + ":" + rest)
            except OutboundRefused as exc:  # its query is a ticket: not for the log
                raise ConnectionError(f"the websocket address Slack gave is refused: {exc.reason}") from None
            client.wss_uri = url
            client.connect()
        if self.closed:  # closed while connecting
            client.close()
            return
        if not client.is_connected():
            raise ConnectionError("the websocket did not open")

    def _client(self, token: str) -> Any:
        base = self.config.api_base()
        # The SDK does its own HTTP: the outbound guard checks the Web API's address here, and the
        # websocket's each time this link connects (Slack's refreshes reuse the checked API).
        check_url(base)
        # Imported when a connection opens: only a Socket Mode channel needs the SDK's client.
        from slack_sdk import WebClient
        from slack_sdk.socket_mode.builtin import SocketModeClient

        client = SocketModeClient(app_token=token, web_client=WebClient(base_url=base, timeout=10),
                                  auto_reconnect_enabled=False, concurrency=4, logger=log)
        client.socket_mode_request_listeners.append(self._on_envelope)
        return client

    def _on_envelope(self, client: Any, request: Any) -> None:
        """Handle one envelope (on one of the client's threads), then acknowledge it."""
        close_old_connections()
        try:
            with self.ctx.acting():
                outcome = self.handle(self.config, self.ctx, request.type, dict(request.payload or {}))
        except PayloadError as exc:
            outcome = f"refused: {exc}"  # sent again it would fail again
        except Exception:
            log.exception("slack socket mode %r: envelope %s (%s, attempt %s) failed; not acknowledged, so Slack "
                          "sends it again", self, request.envelope_id, request.type, request.retry_attempt)
            return
        finally:
            close_old_connections()
        client.send_socket_mode_response({"envelope_id": request.envelope_id})
        log.info("slack socket mode %r: envelope %s (%s): %s", self, request.envelope_id, request.type, outcome)
