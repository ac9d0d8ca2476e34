"""Channels' connections to their providers (`Channel(connection=...)`: Slack's Socket Mode), each
open in one process of the deployment at a time.

Every web process runs one `Keeper` thread. Every few seconds it lists the channels of the agents'
active releases that declare a connection, and for each it tries to claim the lease
(`ChannelConnection`). The process that wins opens the connection (`connection(ctx)`), renews the
lease every third of AGENTSITE_CHANNEL_LEASE_SECONDS and calls the connection's `tick()` every
second (it reconnects there). A holder whose renewal fails (another process claimed a lease that
had lapsed) closes its connection. A new release reopens the connection with its declaration; one
without the channel, or a deleted agent, closes it and gives the lease up.

A process that stops gives its leases up, so another takes over at once; one that is killed lets
them lapse, and another takes over within the lease's length. Two holders for a moment (a holder
stalled past its lease) are harmless: a provider's deliveries are claimed once (`claim_delivery`).
"""
from __future__ import annotations

import atexit
import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

from django.conf import settings
from django.db import close_old_connections
from django.utils import timezone

from agents.discovery import load_deployment
from agents.models import Agent
from agents.secrets.store import acting_for
from sessions.custom_channels.context import ChannelContext
from sessions.models import ChannelConnection

log = logging.getLogger(__name__)

TICK = 1.0   # seconds between two looks at the connections held
SCAN = 5.0   # seconds between two listings of the channels that declare one
CLAIM = 2.0  # seconds between two claims of a lease another process holds


@dataclass
class Kept:
    """One channel's connection as this process sees it: held (with its open `link`) or not."""

    agent: Agent
    channel_id: str
    deployment_id: int
    factory: Callable[[Any], Any]
    link: Any = None
    up: bool = False
    renewed: float = 0.0
    tried: float = float("-inf")

    @property
    def key(self) -> tuple[int, str]:
        return self.agent.pk, self.channel_id


def holder_name() -> str:
    """This process, as a lease names its holder: host, pid, and a nonce (pids are reused)."""
    return f"{socket.gethostname()[:80]}:{os.getpid()}:{secrets.token_hex(4)}"


class Keeper:
    def __init__(self, holder: str | None = None) -> None:
        self.holder = holder or holder_name()
        self.kept: dict[tuple[int, str], Kept] = {}
        self.stopping = threading.Event()
        self.scanned = float("-inf")
        self.unloadable: set[int] = set()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, name="channel-connections", daemon=True)
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Close every connection held and give its lease up."""
        self.stopping.set()
        if self.thread is not None and self.thread.is_alive():
            self.thread.join(timeout)

    def run(self) -> None:
        try:
            while not self.stopping.wait(TICK):
                try:
                    self.step(time.monotonic())
                except Exception:
                    log.exception("channel connections: a round failed; trying again")
                finally:
                    close_old_connections()
        finally:
            for kept in list(self.kept.values()):
                self._let_go(kept, release=True)
            self.kept.clear()
            close_old_connections()

    def step(self, now: float) -> None:
        if now - self.scanned >= SCAN:
            self.scan()
            self.scanned = now
        for kept in list(self.kept.values()):
            try:
                self.keep(kept, now)
            except Exception:
                log.exception("channel connections: keeping %s/%s failed", kept.agent.slug, kept.channel_id)

    def scan(self) -> None:
        """Keep what the active releases declare: new channels join, changed ones reopen, gone ones go."""
        wanted: dict[tuple[int, str], Kept] = {}
        for agent in Agent.objects.exclude(active_deployment=None).select_related("active_deployment"):
            deployment = agent.active_deployment
            # The manifest says which channels keep a connection: no other release is imported here.
            if not any(c.get("hasConnection") for c in (deployment.manifest or {}).get("channels", [])):
                continue
            try:
                loaded = load_deployment(deployment)
            except Exception:
                if deployment.pk not in self.unloadable:  # said once, not every few seconds
                    self.unloadable.add(deployment.pk)
                    log.exception("channel connections: cannot load the release of %s", agent.slug)
                continue
            for c in loaded.channels.values():
                if c.channel.connection is not None:
                    wanted[(agent.pk, c.id)] = Kept(agent, c.id, deployment.pk, c.channel.connection)
        for key, kept in list(self.kept.items()):
            fresh = wanted.get(key)
            if fresh is None or fresh.deployment_id != kept.deployment_id:
                # A new release keeps the lease (its connection reopens here); a channel gone gives it up.
                self._let_go(kept, release=fresh is None)
                del self.kept[key]
        for key, fresh in wanted.items():
            self.kept.setdefault(key, fresh)

    def keep(self, kept: Kept, now: float) -> None:
        lease = settings.AGENTSITE_CHANNEL_LEASE_SECONDS
        agent_id, channel = kept.key
        if kept.link is None:
            if now - kept.tried < CLAIM:
                return
            kept.tried = now
            at = timezone.now()
            if not ChannelConnection.claim(agent_id, channel, self.holder, at, at + timedelta(seconds=lease)):
                return
            log.info("channel connections: %s/%s is held here (%s)", kept.agent.slug, channel, self.holder)
            kept.renewed = now
            with acting_for(kept.agent.slug):
                kept.link = kept.factory(ChannelContext(agent=kept.agent, channel_id=channel,
                                                        base_url=settings.AGENTSITE_PUBLIC_URL.rstrip("/")))
        elif now - kept.renewed >= lease / 3:
            if not ChannelConnection.renew(agent_id, channel, self.holder, timezone.now() + timedelta(seconds=lease)):
                log.warning("channel connections: %s/%s lost its lease (another process took it over, or the "
                            "agent is gone); closing it here", kept.agent.slug, channel)
                self._let_go(kept, release=False)
                return
            kept.renewed = now
        with acting_for(kept.agent.slug):
            kept.link.tick()
        up = bool(getattr(kept.link, "connected", False))
        if up != kept.up:
            kept.up = up
            ChannelConnection.mark_connected(agent_id, channel, self.holder, timezone.now() if up else None)

    def _let_go(self, kept: Kept, *, release: bool) -> None:
        link, kept.link, kept.up = kept.link, None, False
        if link is None:
            return
        try:
            link.close()
        except Exception:
            log.exception("channel connections: closing %s/%s failed", kept.agent.slug, kept.channel_id)
        if release:
            try:
                ChannelConnection.release(*kept.key, self.holder)
            except Exception:
                log.exception("channel connections: cannot give up the lease of %s/%s", kept.agent.slug,
                              kept.channel_id)


_keeper: Keeper | None = None
_keeper_lock = threading.Lock()


def keep_connections() -> Keeper:
    """Start this process's keeper (once); it stops, giving its leases up, as the process exits."""
    global _keeper
    with _keeper_lock:
        if _keeper is None:
            _keeper = Keeper()
            _keeper.start()
            atexit.register(stop_keeping)
        return _keeper


def stop_keeping() -> None:
    with _keeper_lock:
        keeper = _keeper
    if keeper is not None:
        keeper.stop()
