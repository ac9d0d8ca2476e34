"""Custom channels at run time: the sessions they own, their state, their events map.

A channel (`agent/channels/<id>.py`, see agents.channels) reaches sessions
through a `ChannelContext`: the routes get one per request (with the
request's parts, built by channels_app.custom_channels), `on_start` one per
web process, the events map and `wait_until` work one per task.

Continuation keys are the channel's own (`pr:owner/repo#12`,
`C123:1712345.678`): the same key reaches the same durable session. The key's
hash is on the session under a unique constraint (agent, channel, key), so
of two deliveries racing with a new key one inserts the session and the
other's insert fails and becomes a follow-up on it.

Delivery of events to the events map (`deliver_channel_events`, a django-q2
task enqueued after commit by sessions.channel_delivery): one delivery at a
time per session, under a lease on the session row; it calls the handlers in
index order and moves `channel_cursor` past each event it handed over. If its
worker dies, the lease lapses and the recovery sweep enqueues a new delivery,
which starts at the event the dead one was on: at least once, and exactly once
unless a worker dies inside a handler. A delivery whose enqueue was lost (a
crash between commit and enqueue) is made good by the session's next one, or
by `rescan_undelivered`, which the recovery sweep runs every
AGENTSITE_CHANNEL_RESCAN_SECONDS.
"""
from __future__ import annotations

import base64
import hashlib
import importlib
import json
import logging
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone
from django.utils.module_loading import import_string
from django_q.tasks import async_task

from agents.channels import LoadedChannel
from agents.discovery import load_deployment
from agents.models import Agent, Deployment
from agents.sdk import SessionInfo
from sessions import approvals, direct
from sessions.admission import AdmissionError, start_session, stop_session, submit_message
from sessions.broker import shared_broker
from sessions.channel_delivery import enqueue_delivery
from sessions.events import append_events, read_events
from sessions.host import Host
from sessions.models import ChannelDelivery, Event, EventType, Session, Turn
from sessions.principal import Principal

log = logging.getLogger(__name__)

BACKGROUND_TASK = "sessions.custom_channels.run_in_background"
# Where `wait_until` functions may live: the agent folder's modules (found in the same
# release by the worker) and the channel libraries the SDK builds channels from.
BACKGROUND_MODULES = ("agentsite_agents.", "agents.integrations.")
# A delivery renews its lease after each event it hands over; one handler running longer
# than this may see the events after it handed over twice (a second delivery takes over).
DELIVERY_LEASE = timedelta(seconds=120)
DELIVERY_BATCH = 200


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class ChannelError(Exception):
    """A channel handler asked for something that cannot be (an unknown session, a bad argument)."""


@dataclass(frozen=True)
class SessionHandle:
    """What `send` and `get_session` return."""

    session_id: str
    status: str
    continuation_token: str | None
    created: bool = False
    turn_id: str = ""

    @property
    def state(self) -> "ChannelState":
        return ChannelState(self.session_id)


class ChannelState:
    """A session's channel state: JSON on the session row, changed under its row lock.

    `get()` reads it; `set(value)` replaces it; `update(changes)` merges keys;
    `modify(fn)` replaces it with `fn(current)`, read and written in one transaction
    (so two deliveries changing it at once do not lose either change).
    """

    def __init__(self, session_id: str):
        self.session_id = session_id

    def get(self) -> dict[str, Any]:
        value = Session.objects.filter(pk=self.session_id).values_list("channel_state", flat=True).first()
        if value is None:
            raise ChannelError(f"session {self.session_id!r} does not exist")
        return value

    def set(self, value: dict[str, Any]) -> dict[str, Any]:
        return self.modify(lambda _: value)

    def update(self, changes: dict[str, Any]) -> dict[str, Any]:
        return self.modify(lambda current: {**current, **changes})

    def modify(self, fn: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any]:
        with transaction.atomic():
            row = Session.objects.select_for_update().filter(pk=self.session_id).only("channel_state").first()
            if row is None:
                raise ChannelError(f"session {self.session_id!r} does not exist")
            value = fn(dict(row.channel_state or {}))
            _check_json("channel state", value)
            Session.objects.filter(pk=self.session_id).update(channel_state=value)
        return value


@dataclass(frozen=True)
class ChannelHandle:
    """The `channel` argument of an events-map handler."""

    id: str
    session_id: str

    @property
    def state(self) -> ChannelState:
        return ChannelState(self.session_id)


@dataclass
class ChannelContext:
    """What channel code gets: start and continue sessions, call tools, host services, background work.

    `principal` is who `send` acts as by default (a route's caller); `session`
    is set when the context belongs to one session (events-map handlers).
    """

    agent: Agent
    channel_id: str
    principal: Principal | None = None
    base_url: str = ""
    session_row: Session | None = field(default=None, repr=False)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("agentsite.channels"), repr=False)

    # -- sessions ------------------------------------------------------------------
    @property
    def session(self) -> SessionInfo | None:
        row = self.session_row
        if row is None:
            return None
        return SessionInfo(id=row.id, agent=self.agent.slug, mode=row.mode, principal_id=row.principal_id,
                           dry_run=row.run_options.dry_run)

    @property
    def state(self) -> ChannelState | None:
        return ChannelState(self.session_row.id) if self.session_row is not None else None

    def state_of(self, session_id: str) -> ChannelState:
        return ChannelState(self._session(session_id).id)

    def send(self, message: str, *, continuation_token: str | None = None, admission: str = "preempt",
             workspace_files: list[dict[str, Any]] | None = None, auth: Principal | None = None,
             state: dict[str, Any] | None = None, title: str = "", purpose: str | None = None) -> SessionHandle:
        """Run a model turn on this channel.

        With `continuation_token` (the channel's conversation key) the turn goes
        to that key's session, created on first use; without, a new session.
        `admission`: "preempt" interrupts a busy session, "coalesce" queues behind it.
        `state` is the starting channel state of a new session (else the channel's
        declared `state`); `purpose="eval"` marks the session as regression traffic.
        """
        principal = _principal(auth) or self.principal
        if principal is None:
            raise ChannelError("send(...) needs auth=<principal> here: there is no request principal to act as")
        if not isinstance(message, str) or not message.strip():
            raise ChannelError("send(message): the message must be non-empty text")
        if purpose not in (None, "eval"):
            raise ChannelError("purpose must be None or 'eval'")
        files = _checked_files(workspace_files)
        digest = key_hash(continuation_token) if continuation_token else ""
        if digest:
            found = self._keyed(digest)
            if found is not None:
                return self._follow_up(found, message, continuation_token, admission, files)
        starting = dict(self._declaration().channel.state) if state is None else state
        _check_json("state", starting)
        options: dict[str, Any] = {"purpose": purpose} if purpose else {}
        try:
            admitted = start_session(self.agent, principal, message, title=title, options=options,
                                     channel=self.channel_id, trigger=Turn.Trigger.CHANNEL,
                                     source_ref=self.channel_id, workspace_files=files,
                                     channel_key_hash=digest, channel_state=starting)
        except IntegrityError:
            # Another delivery created the key's session first: this message is a follow-up on it.
            found = self._keyed(digest) if digest else None
            if found is None:
                raise
            return self._follow_up(found, message, continuation_token, admission, files)
        return SessionHandle(session_id=admitted.session.id, status=admitted.session.status,
                             continuation_token=continuation_token, created=True, turn_id=admitted.turn.id)

    def receive(self, channel_id: str, message: str, **options: Any) -> SessionHandle:
        """Hand work to another channel of this agent: `send` as that channel."""
        other = ChannelContext(agent=self.agent, channel_id=channel_id, principal=self.principal,
                               base_url=self.base_url)
        other._declaration()
        return other.send(message, **options)

    def get_session(self, session_id: str) -> SessionHandle | None:
        row = self._rows().filter(pk=session_id).first()
        if row is None:
            return None
        return SessionHandle(session_id=row.id, status=row.status, continuation_token=None)

    def find_continuation(self, key: str) -> SessionHandle | None:
        """The session of a continuation key, if it has one."""
        row = self._keyed(key_hash(key))
        return None if row is None else SessionHandle(session_id=row.id, status=row.status, continuation_token=key)

    def has_continuation_session(self, key: str) -> bool:
        return self._keyed(key_hash(key)) is not None

    def is_continuation_busy(self, key: str) -> bool:
        row = self._keyed(key_hash(key))
        return bool(row and row.active_turn_id)

    def interrupt_continuation(self, key: str) -> bool:
        """Stop the key's turn in flight and the follow-ups queued behind it."""
        row = self._keyed(key_hash(key))
        return bool(row and stop_session(row))

    def resolve_approval(self, session_id: str, call_id: str, decision: str, auth: Principal | None = None,
                         reason: str = "") -> dict[str, Any]:
        """Approve or deny a parked tool call of one of this channel's sessions."""
        principal = _principal(auth) or self.principal
        if principal is None:
            raise ChannelError("resolve_approval(...) needs auth=<principal>: who decided")
        row = approvals.resolve_approval(self._session(session_id), call_id, decision, principal, reason)
        return {"callId": row.call_id, "toolName": row.tool, "status": row.status}

    def emit_assistant_message(self, session_id: str, text: str) -> int:
        """Append an assistant message without a model turn (host work that produced the text).

        It is in the event log (`message.completed`, `source: channel`) and, when no
        turn is running, in the conversation the next turn sees. Returns its event index.
        """
        if not isinstance(text, str) or not text:
            raise ChannelError("emit_assistant_message: text must be non-empty")
        row = self._session(session_id)
        hooks = row.hooks()  # loaded before the write lock is taken
        with transaction.atomic():
            locked = Session.objects.select_for_update().filter(pk=row.pk).first()
            if locked is None:
                raise ChannelError(f"session {session_id!r} does not exist")
            event = append_events(row.id, [(EventType.MESSAGE_COMPLETED, {"text": text, "source": "channel"})],
                                  hooks=hooks)[0]
            if locked.active_turn_id is None:
                conversation = list(Session.objects.filter(pk=row.pk).values_list("conversation", flat=True)[0] or [])
                Session.objects.filter(pk=row.pk, active_turn__isnull=True).update(
                    conversation=conversation + [{"role": "assistant", "content": text}])
        return event.index

    # -- deliveries -----------------------------------------------------------------
    def delivery_seen(self, delivery_id: str) -> bool:
        """Whether this channel already acted on the delivery `delivery_id` (a cheap early answer)."""
        return ChannelDelivery.objects.filter(agent=self.agent, channel=self.channel_id,
                                              key_hash=key_hash(delivery_id)).exists()

    def claim_delivery(self, delivery_id: str) -> bool:
        """Record that this channel acts on `delivery_id`; False if it already did (a redelivery).

        Inside `with ctx.atomic():` the claim and what follows (`send`, `wait_until`)
        commit together: a failure after the claim leaves it unclaimed, so the
        provider's retry is acted on, and two racing copies start one turn.
        """
        if not isinstance(delivery_id, str) or not delivery_id:
            raise ChannelError("claim_delivery: the delivery id must be non-empty text")
        try:
            with transaction.atomic():
                ChannelDelivery.objects.create(agent=self.agent, channel=self.channel_id,
                                               key_hash=key_hash(delivery_id))
        except IntegrityError:
            return False
        return True

    def atomic(self):
        """A database transaction for channel code: what happens inside commits together or not at all."""
        return transaction.atomic()

    # -- tools, host, background work, links --------------------------------------------
    def call_tool(self, name: str, input: dict[str, Any] | None = None, *, session_id: str | None = None
                  ) -> dict[str, Any]:
        """A deterministic tool call (no model turn): `{callId, toolName, output, ...}` as the tool route answers."""
        session = self._session(session_id) if session_id else None
        return direct.call_tool(self.agent, name, input or {}, session=session)

    @property
    def host(self) -> Host:
        return Host(session=self.session_row, agent=self.agent)

    def wait_until(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Work that outlives the response: `function(ctx, *args, **kwargs)` as a django-q2 task.

        `function` is a module-level function of the agent folder (a worker finds it
        by name in the same release); the arguments are JSON values.
        """
        module, qualname = getattr(function, "__module__", ""), getattr(function, "__qualname__", "")
        if not module.startswith(BACKGROUND_MODULES) or "<" in qualname:
            raise ChannelError("wait_until takes a module-level function of the agent folder (def work(ctx, ...)), "
                               "not a lambda, a nested function or a library function")
        _check_json("wait_until arguments", [args, kwargs])
        deployment = self.session_row.deployment_id if self.session_row else self.agent.active_deployment_id
        job = {"agent": self.agent.pk, "deployment": deployment, "channel": self.channel_id, "module": module,
               "qualname": qualname, "args": list(args), "kwargs": kwargs, "baseUrl": self.base_url,
               "principal": self.principal.as_dict() if self.principal else None,
               "session": self.session_row.id if self.session_row else None}
        transaction.on_commit(lambda: _enqueue_background(job))

    def session_urls(self, session_id: str) -> dict[str, str]:
        """Absolute playground, stream and events URLs of a session on this mount."""
        row = self._session(session_id)
        origin = (settings.AGENTSITE_PUBLIC_URL or self.base_url).rstrip("/")
        base = f"{origin}/{self.agent.slug}/v1/session/{row.id}"
        return {"playgroundUrl": f"{origin}/playground/{self.agent.slug}?sessionId={row.id}",
                "streamUrl": f"{base}/stream", "eventsUrl": f"{base}/events"}

    @property
    def config(self) -> Any:
        """The channel's declared `config` (a provider channel's settings: `slack_channel(...)`), or None."""
        return self._declaration().channel.config

    # -- lookups ------------------------------------------------------------------
    def _declaration(self) -> LoadedChannel:
        deployment = self.session_row.deployment if self.session_row else self.agent.active_deployment
        if deployment is None:
            raise AdmissionError("agent_not_deployed", f"agent {self.agent.slug!r} has no active deployment", 409)
        found = load_deployment(deployment).channels.get(self.channel_id)
        if found is None:
            raise ChannelError(f"agent {self.agent.slug!r} has no channel {self.channel_id!r}")
        return found

    def _rows(self):
        return Session.objects.filter(agent=self.agent, channel=self.channel_id)

    def _keyed(self, digest: str) -> Session | None:
        return self._rows().filter(channel_key_hash=digest).select_related("agent", "deployment").first()

    def _session(self, session_id: str) -> Session:
        row = self._rows().filter(pk=session_id).select_related("agent", "deployment").first()
        if row is None:
            raise ChannelError(f"session {session_id!r} is not a session of channel {self.channel_id!r}")
        return row

    def _follow_up(self, row: Session, message: str, key: str | None, admission: str,
                   files: list[dict[str, Any]]) -> SessionHandle:
        admitted = submit_message(row, message, admission=admission, trigger=Turn.Trigger.CHANNEL,
                                  source_ref=self.channel_id, workspace_files=files)
        return SessionHandle(session_id=row.id, status=admitted.session.status, continuation_token=key,
                             created=False, turn_id=admitted.turn.id)


def _principal(value: Principal | dict[str, Any] | None) -> Principal | None:
    """`auth=` as a Principal, or a dict with `principal_id` (and `authenticator`, `principal_type`)."""
    if value is None or isinstance(value, Principal):
        return value
    if isinstance(value, dict) and value.get("principal_id"):
        return Principal(authenticator=str(value.get("authenticator", "channel")),
                         principal_id=str(value["principal_id"]),
                         principal_type=str(value.get("principal_type", "user")),
                         attributes=dict(value.get("attributes") or {}))
    raise ChannelError("auth= takes a principal or a dict with principal_id (and authenticator, principal_type)")


def _checked_files(files: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """`workspace_files` as a turn stores them: {path, content, encoding ("utf-8" or "base64")}.

    Paths are checked again against the workspace when the turn writes them.
    """
    checked = []
    for i, sent in enumerate(files or []):
        if not (isinstance(sent, dict) and isinstance(sent.get("path"), str) and sent["path"]
                and isinstance(sent.get("content"), str)):
            raise ChannelError(f"workspace_files[{i}] must be a dict with a path and a text content")
        encoding = sent.get("encoding", "utf-8")
        if encoding not in ("utf-8", "base64"):
            raise ChannelError(f"workspace_files[{i}].encoding must be 'utf-8' or 'base64'")
        size = len(base64.b64decode(sent["content"], validate=True) if encoding == "base64"
                   else sent["content"].encode("utf-8"))
        if size > settings.AGENTSITE_WORKSPACE_FILE_MAX_BYTES:
            raise ChannelError(f"workspace_files[{i}] ({sent['path']}) is {size} bytes, more than "
                               f"{settings.AGENTSITE_WORKSPACE_FILE_MAX_BYTES}")
        checked.append({"path": sent["path"], "content": sent["content"], "encoding": encoding})
    return checked


def _check_json(what: str, value: Any) -> None:
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise ChannelError(f"{what} must be JSON values: {exc}") from None


# -- tasks ------------------------------------------------------------------------------

def deliver_channel_events(session_id: str) -> int:
    """The django-q2 task: hand the session's undelivered events to its channel's events map.

    1. Take the session's delivery lease (a conditional update: free or lapsed); held: the
       delivery holding it will see these events too (step 4), so stop here.
    2. Read the events from `channel_cursor` on, and call each handler the event's type
       selects, in index order; a failing one is logged.
    3. After each event that had handlers, move the cursor past it and renew the lease: a
       worker that dies mid-delivery leaves the cursor at the event it was on, and the
       recovery sweep enqueues a delivery for the lapsed lease, which starts there.
    4. Release the lease, then look again: events stored while it was held (whose own
       delivery found it held) are delivered now.
    Returns how many events were handed over.
    """
    delivered = 0
    while True:
        row = Session.objects.select_related("agent", "deployment").filter(pk=session_id).first()
        if row is None:
            return delivered
        try:
            channel = load_deployment(row.deployment).channels.get(row.channel)
        except Exception:
            log.exception("cannot load the channel of %s", session_id)
            return delivered
        if channel is None or row.channel_cursor >= row.next_event_index:
            return delivered
        now = timezone.now()
        free = Q(channel_lease_until__isnull=True) | Q(channel_lease_until__lt=now)
        if not Session.objects.filter(free, pk=session_id).update(channel_lease_until=now + DELIVERY_LEASE):
            return delivered
        try:
            delivered += _deliver_claimed(row, channel)
        finally:
            Session.objects.filter(pk=session_id).update(channel_lease_until=None)


def _deliver_claimed(row: Session, channel: LoadedChannel) -> int:
    """Step 2 and 3 of `deliver_channel_events`, under the lease."""
    ctx = ChannelContext(agent=row.agent, channel_id=row.channel, session_row=row,
                         principal=Principal(authenticator=row.authenticator, principal_id=row.principal_id,
                                             principal_type=row.principal_type))
    handle = ChannelHandle(id=row.channel, session_id=row.id)
    cursor = Session.objects.filter(pk=row.pk).values_list("channel_cursor", flat=True).first() or 0
    delivered = 0
    while True:
        events = read_events(row.id, cursor, limit=DELIVERY_BATCH)
        if not events:
            return delivered
        for envelope in events:
            handlers = channel.handlers_for(envelope["type"])
            for handler in handlers:
                try:
                    handler(envelope, handle, ctx)
                except Exception:
                    log.exception("channel %s: the %s handler failed on %s#%s", row.channel, envelope["type"],
                                  row.id, envelope["index"])
            cursor = envelope["index"] + 1
            delivered += 1
            if handlers:
                Session.objects.filter(pk=row.pk).update(channel_cursor=cursor,
                                                         channel_lease_until=timezone.now() + DELIVERY_LEASE)
        Session.objects.filter(pk=row.pk).update(channel_cursor=cursor)


def prune_deliveries(now=None) -> int:
    """The recovery sweep's part: forget delivery ids older than AGENTSITE_CHANNEL_DELIVERY_DAYS."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.AGENTSITE_CHANNEL_DELIVERY_DAYS)
    return ChannelDelivery.objects.filter(created_at__lt=cutoff).delete()[0]


# Channels whose sessions the HTTP API and the timers open: they have no events map.
BUILT_IN_CHANNELS = ("http", "schedule", "reminder", "tool")


def rescan_undelivered(limit: int = 500) -> int:
    """Enqueue a delivery for each custom-channel session with events past its cursor and no
    delivery running: the ones whose enqueue was lost. A session whose channel wants none of
    them has its cursor moved to the end instead. Returns how many deliveries it enqueued."""
    behind = (Session.objects.exclude(channel__in=BUILT_IN_CHANNELS)
              .filter(channel_cursor__lt=F("next_event_index"), channel_lease_until__isnull=True)
              .select_related("deployment").only("id", "channel", "channel_cursor", "next_event_index",
                                                 "deployment")[:limit])
    enqueued = 0
    for row in behind:
        try:
            channel = load_deployment(row.deployment).channels.get(row.channel)
        except Exception:
            log.exception("cannot load the channel of %s", row.id)
            continue
        types = set(Event.objects.filter(session_id=row.id, index__gte=row.channel_cursor)
                    .values_list("type", flat=True).distinct()) if channel is not None else set()
        if any(channel.handlers_for(t) for t in types):
            enqueue_delivery(row.id)
            enqueued += 1
        else:
            Session.objects.filter(pk=row.id, channel_cursor=row.channel_cursor).update(
                channel_cursor=row.next_event_index)
    return enqueued


def redeliver_lapsed(now=None) -> int:
    """The recovery sweep's part: enqueue a delivery for each session whose delivery lease lapsed
    (its worker died mid-delivery). Claiming is conditional, so a duplicate task is harmless."""
    now = now or timezone.now()
    lapsed = list(Session.objects.filter(channel_lease_until__lt=now).values_list("id", flat=True)[:500])
    for session_id in lapsed:
        enqueue_delivery(session_id)
    return len(lapsed)


def _enqueue_background(job: dict[str, Any]) -> None:
    if getattr(settings, "AGENTSITE_INLINE_TURNS", False):
        import_string(BACKGROUND_TASK)(job)
        return
    async_task(BACKGROUND_TASK, job, task_name=f"channel-work:{job['channel']}", broker=shared_broker())


def run_in_background(job: dict[str, Any]) -> None:
    """The django-q2 task of `wait_until`: find the function in its release and call it."""
    try:
        deployment = Deployment.objects.select_related("agent").get(pk=job["deployment"])
        load_deployment(deployment)  # imports the release's modules under their names
        target: Any = sys.modules.get(job["module"]) or importlib.import_module(job["module"])
        for part in job["qualname"].split("."):
            target = getattr(target, part)
        session = Session.objects.select_related("agent", "deployment").filter(pk=job["session"]).first() \
            if job.get("session") else None
        principal = Principal(**{"authenticator": job["principal"]["authenticator"],
                                 "principal_id": job["principal"]["principalId"],
                                 "principal_type": job["principal"]["principalType"],
                                 "attributes": job["principal"].get("attributes") or {}}) \
            if job.get("principal") else None
        ctx = ChannelContext(agent=deployment.agent, channel_id=job["channel"], principal=principal,
                             base_url=job.get("baseUrl", ""), session_row=session)
        target(ctx, *job["args"], **job["kwargs"])
    except Exception:
        log.exception("background work %s.%s of channel %s failed", job.get("module"), job.get("qualname"),
                      job.get("channel"))
