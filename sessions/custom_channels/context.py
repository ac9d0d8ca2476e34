"""`ChannelContext`: what channel code runs against (routes, `on_start`, the events map, `wait_until` work).

`principal` is who `send` acts as by default (a route's caller); `session_row`
is set when the context belongs to one session (events-map handlers, work a
session's handler scheduled). A route's `req` is a subclass built by
channels_app.custom_channels, which adds the request and the wire shapes.

Whose sessions a lookup reaches: unless the channel declares `shared_sessions`,
a continuation key is stored hashed with its owner (`owned_key_hash`), so the
same key from another principal opens that principal's own session, and a
session id reaches only the acting principal's sessions (`SessionNotFound`
otherwise). A shared channel's keys and ids reach every session of the channel.

`origin`: set while an events-map handler handles an event of a turn that
descends from agents' messages (and in the `wait_until` work it schedules):
the turns it starts with `send` carry that turn's root and hops, so a channel
relaying agents' turns does not hand them a fresh turn budget
(sessions.messaging.limits).
"""
from __future__ import annotations

import base64
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from django.conf import settings
from django.db import IntegrityError, transaction

from agents.channels import LoadedChannel
from agents.discovery import load_deployment
from agents.models import Agent
from agents.secrets.store import acting_for
from agents.definitions import SessionInfo
from sessions.direct import calls as direct
from sessions.turn import approvals
from sessions.turn.admission import AdmissionError, start_session, stop_session, submit_message
from sessions.custom_channels.state import (
    ChannelError,
    ChannelState,
    SessionHandle,
    SessionNotFound,
    check_json,
    key_hash,
    owned_key_hash,
)
from sessions.eventlog.events import append_events
from sessions.host import Host
from sessions.models import ChannelDelivery, EventType, Session, ToolCall, Turn
from sessions.principal import Principal
from sessions.plumbing.taskqueue import enqueue

# The django-q2 task of `wait_until` (a dotted path: queued tasks outlive a deploy).
BACKGROUND_TASK = "sessions.custom_channels.run_in_background"
# Where `wait_until` functions may live: the agent folder's modules (found in the same
# release by the worker) and the channel libraries the SDK builds channels from.
BACKGROUND_MODULES = ("agentsite_agents.", "agents.integrations.")


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
    origin: dict[str, Any] | None = field(default=None, repr=False)
    log: logging.Logger = field(default_factory=lambda: logging.getLogger("agentsite.channels"), repr=False)

    # -- sessions ------------------------------------------------------------------
    @property
    def session(self) -> SessionInfo | None:
        row = self.session_row
        if row is None:
            return None
        return SessionInfo(id=row.id, agent=self.agent.slug, mode=row.mode, principal_id=row.principal_id,
                           dry_run=row.run_options.dry_run, abs=dict(row.ab_variants or {}))

    @property
    def state(self) -> ChannelState | None:
        return ChannelState(self.session_row.id) if self.session_row is not None else None

    def state_of(self, session_id: str, *, auth: Principal | None = None) -> ChannelState:
        return ChannelState(self._session(session_id, auth).id)

    def send(self, message: str, *, continuation_token: str | None = None, admission: str = "preempt",
             workspace_files: list[dict[str, Any]] | None = None, auth: Principal | None = None,
             state: dict[str, Any] | None = None, title: str = "", purpose: str | None = None) -> SessionHandle:
        """Run a model turn on this channel.

        With `continuation_token` (the channel's conversation key) the turn goes
        to that key's session, created on first use; without, a new session.
        `admission`: "preempt" interrupts a busy session, "coalesce" queues behind it.
        `state` is the starting channel state of a new session (else the channel's
        declared `state`); `purpose="eval"` marks the session as regression traffic.
        Unless the channel's sessions are shared, the key is the acting principal's
        (`auth`, else the request's): another principal's same key is another session.
        """
        principal = principal_of(auth) or self.principal
        if principal is None:
            raise ChannelError("send(...) needs auth=<principal> here: there is no request principal to act as")
        if not isinstance(message, str) or not message.strip():
            raise ChannelError("send(message): the message must be non-empty text")
        if purpose not in (None, "eval"):
            raise ChannelError("purpose must be None or 'eval'")
        files = checked_files(workspace_files)
        digest = self._digest(continuation_token, principal) if continuation_token else ""
        if digest:
            found = self._keyed(continuation_token, principal)
            if found is not None:
                return self._follow_up(found, message, continuation_token, admission, files)
        starting = dict(self._declaration().channel.state) if state is None else state
        check_json("state", starting)
        options: dict[str, Any] = {"purpose": purpose} if purpose else {}
        try:
            admitted = start_session(self.agent, principal, message, title=title, options=options,
                                     channel=self.channel_id, trigger=Turn.Trigger.CHANNEL,
                                     source_ref=self.channel_id, workspace_files=files,
                                     channel_key_hash=digest, channel_state=starting, origin=self.origin)
        except IntegrityError:
            # Another delivery created the key's session first: this message is a follow-up on it.
            found = self._keyed(continuation_token, principal) if digest else None
            if found is None:
                raise
            return self._follow_up(found, message, continuation_token, admission, files)
        return SessionHandle(session_id=admitted.session.id, status=admitted.session.status,
                             continuation_token=continuation_token, created=True, turn_id=admitted.turn.id)

    def receive(self, channel_id: str, message: str, **options: Any) -> SessionHandle:
        """Hand work to another channel of this agent: `send` as that channel."""
        other = ChannelContext(agent=self.agent, channel_id=channel_id, principal=self.principal,
                               base_url=self.base_url, origin=self.origin)
        other._declaration()
        return other.send(message, **options)

    def get_session(self, session_id: str, *, auth: Principal | None = None) -> SessionHandle | None:
        """One of this channel's sessions the acting principal may reach, or None."""
        row = self._reachable(auth).filter(pk=session_id).first()
        if row is None:
            return None
        return SessionHandle(session_id=row.id, status=row.status, continuation_token=None)

    def find_continuation(self, key: str, *, auth: Principal | None = None) -> SessionHandle | None:
        """The session of a continuation key (the acting principal's, unless sessions are shared), if any."""
        row = self._keyed(key, principal_of(auth) or self.principal)
        return None if row is None else SessionHandle(session_id=row.id, status=row.status, continuation_token=key)

    def has_continuation_session(self, key: str, *, auth: Principal | None = None) -> bool:
        return self._keyed(key, principal_of(auth) or self.principal) is not None

    def is_continuation_busy(self, key: str, *, auth: Principal | None = None) -> bool:
        row = self._keyed(key, principal_of(auth) or self.principal)
        return bool(row and row.active_turn_id)

    def interrupt_continuation(self, key: str, *, auth: Principal | None = None) -> bool:
        """Stop the key's turn in flight and the follow-ups queued behind it."""
        row = self._keyed(key, principal_of(auth) or self.principal)
        return bool(row and stop_session(row))

    def resolve_approval(self, session_id: str, call_id: str, decision: str, auth: Principal | None = None,
                         reason: str = "") -> ToolCall:
        """Approve or deny a parked tool call of one of this channel's sessions; the call's row.

        A route's `req` answers with its wire shape (channels_app.custom_channels.RouteRequest)."""
        principal = principal_of(auth) or self.principal
        if principal is None:
            raise ChannelError("resolve_approval(...) needs auth=<principal>: who decided")
        return approvals.resolve_approval(self._session(session_id, principal), call_id, decision, principal, reason)

    def answer_question(self, session_id: str, call_id: str, answer: str, auth: Principal | None = None) -> ToolCall:
        """Answer the model's question (`ask_question`) in one of this channel's sessions; the call's row."""
        principal = principal_of(auth) or self.principal
        if principal is None:
            raise ChannelError("answer_question(...) needs auth=<principal>: who answered")
        return approvals.answer_question(self._session(session_id, principal), call_id, answer, principal)

    def waiting_questions(self, key: str, *, auth: Principal | None = None) -> list[dict[str, Any]]:
        """The questions the model asked in the key's session that wait for an answer, oldest first:
        `[{sessionId, callId, question, options}]`."""
        row = self._keyed(key, principal_of(auth) or self.principal)
        waiting = [] if row is None else approvals.pending_approvals(row).filter(question=True)
        return [{"sessionId": call.session_id, "callId": call.call_id, "question": call.input.get("question", ""),
                 "options": call.input.get("options") or []} for call in waiting]

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
                locked.append_while_idle({"role": "assistant", "content": text})
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
        return ChannelDelivery.claim(self.agent, self.channel_id, key_hash(delivery_id))

    def atomic(self):
        """A database transaction for channel code: what happens inside commits together or not at all."""
        return transaction.atomic()

    def acting(self):
        """The agent's secrets for code on a thread of its own (a connection's): credentials read
        inside are its secrets, then the environment, as in a route or a task."""
        return acting_for(self.agent.slug)

    # -- tools, host, background work, links --------------------------------------------
    def call_tool(self, name: str, input: dict[str, Any] | None = None, *, session_id: str | None = None
                  ) -> dict[str, Any]:
        """A deterministic tool call (no model turn): `{callId, toolName, output, ...}` as the tool route answers."""
        session = self._session(session_id) if session_id else None
        return direct.call_tool(self.agent, name, input or {}, session=session, origin=self.origin)

    @property
    def host(self) -> Host:
        return Host(session=self.session_row, agent=self.agent, origin=self.origin)

    def wait_until(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Work that outlives the response: `function(ctx, *args, **kwargs)` as a django-q2 task.

        `function` is a module-level function of the agent folder (a worker finds it
        by name in the same release); the arguments are JSON values.
        """
        module, qualname = getattr(function, "__module__", ""), getattr(function, "__qualname__", "")
        if not module.startswith(BACKGROUND_MODULES) or "<" in qualname:
            raise ChannelError("wait_until takes a module-level function of the agent folder (def work(ctx, ...)), "
                               "not a lambda, a nested function or a library function")
        check_json("wait_until arguments", [args, kwargs])
        deployment = self.session_row.deployment_id if self.session_row else self.agent.active_deployment_id
        job = {"agent": self.agent.pk, "deployment": deployment, "channel": self.channel_id, "module": module,
               "qualname": qualname, "args": list(args), "kwargs": kwargs, "baseUrl": self.base_url,
               "principal": self.principal.as_dict() if self.principal else None,
               "session": self.session_row.id if self.session_row else None, "origin": self.origin}
        transaction.on_commit(lambda: enqueue(BACKGROUND_TASK, job, task_name=f"channel-work:{job['channel']}"))

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

    def _shared(self) -> bool:
        return bool(self._declaration().channel.shared_sessions)

    def _reachable(self, auth: Principal | dict[str, Any] | None = None):
        """The channel's sessions the acting principal may reach by id: all of them on a shared
        channel, or with no principal to act for (`on_start`: the channel's own code); else its own."""
        owner = principal_of(auth) or self.principal
        rows = self._rows()
        return rows if owner is None or self._shared() else rows.for_principal(owner)

    def _digest(self, key: str, principal: Principal | None) -> str:
        if self._shared():
            return key_hash(key)
        if principal is None:
            raise ChannelError("the continuation keys of this channel are each principal's own (shared_sessions "
                               "is off): pass auth=<principal> to say whose key it is")
        return owned_key_hash(key, principal)

    def _keyed(self, key: str, principal: Principal | None) -> Session | None:
        """The session of `key`: on a shared channel the key's; else the principal's, under its
        owned hash or, keyed before keys were per principal, under the plain one."""
        rows = self._rows().select_related("agent", "deployment")
        if self._shared():
            return rows.filter(channel_key_hash=key_hash(key)).first()
        digest = self._digest(key, principal)
        found = list(rows.for_principal(principal).filter(channel_key_hash__in=[digest, key_hash(key)])[:2])
        return next((r for r in found if r.channel_key_hash == digest), found[0] if found else None)

    def _session(self, session_id: str, auth: Principal | dict[str, Any] | None = None) -> Session:
        row = self._reachable(auth).filter(pk=session_id).select_related("agent", "deployment").first()
        if row is None:
            raise SessionNotFound(f"session {session_id!r} is not a session of channel {self.channel_id!r} "
                                  "that this caller can reach")
        return row

    def _follow_up(self, row: Session, message: str, key: str | None, admission: str,
                   files: list[dict[str, Any]]) -> SessionHandle:
        admitted = submit_message(row, message, admission=admission, trigger=Turn.Trigger.CHANNEL,
                                  source_ref=self.channel_id, workspace_files=files, origin=self.origin)
        return SessionHandle(session_id=row.id, status=admitted.session.status, continuation_token=key,
                             created=False, turn_id=admitted.turn.id)


def principal_of(value: Principal | dict[str, Any] | None) -> Principal | None:
    """`auth=` as a Principal, or a dict with `principal_id` (and `authenticator`, `principal_type`)."""
    if value is None or isinstance(value, Principal):
        return value
    if isinstance(value, dict) and value.get("principal_id"):
        return Principal(authenticator=str(value.get("authenticator", "channel")),
                         principal_id=str(value["principal_id"]),
                         principal_type=str(value.get("principal_type", "user")),
                         attributes=dict(value.get("attributes") or {}))
    raise ChannelError("auth= takes a principal or a dict with principal_id (and authenticator, principal_type)")


def checked_files(files: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
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
