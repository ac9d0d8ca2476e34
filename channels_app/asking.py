"""A message through a protocol door (an MCP `ask`, an A2A `message/send`), in the database: synchronous,
called from the door's event loop through a thread (`channels.db.database_sync_to_async`), but for
`settled`, which follows the turn on the loop.

A door's message is a message like any other: a new session on the door's channel, or a follow-up on
the caller's own session, admitted by `start_session`/`submit_message` under the same rate limits and
ownership rules as `POST /<slug>/v1/session`. What the door then needs from the log (the reply, the
failure, the calls waiting for a decision) is read here too.
"""
from __future__ import annotations

import json
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, AsyncIterator

from channels.db import database_sync_to_async
from pydantic import BaseModel

from channels_app.bodies import validate_body
from channels_app.errors import APIError
from channels_app.ownership import get_agent, get_owned_session
from channels_app.parsers import bad_text
from channels_app.ratelimits import MESSAGES, SESSIONS, check_rate
from channels_app.stream import follow_up_start, one_turn
from sessions.eventlog.events import Line
from sessions.eventlog.events import read_lines
from sessions.models import EventType, ToolCall, Turn
from sessions.principal import Principal
from sessions.turn.admission import AdmissionError, start_session, submit_message
from sessions.turn.approvals import answer_question, resolve_approval

# What says how the turn ended: its last reply, its failure, or the session's state after it.
OUTCOME_TYPES = frozenset({EventType.MESSAGE_COMPLETED, EventType.TURN_FAILED, EventType.SESSION_WAITING,
                           EventType.SESSION_COMPLETED, EventType.SESSION_FAILED})


@dataclass(frozen=True)
class Asked:
    """A message admitted: where its turn's events begin in the session's log."""

    slug: str
    session_id: str
    turn_id: str
    start: int
    continuation_token: str
    mode: str


@dataclass
class Outcome:
    """How a turn the door followed ended, read from its events."""

    status: str  # "completed" | "failed" | "awaiting_approval" | "interrupted"
    reply: str = ""
    error: str = ""
    pending: list[dict[str, Any]] = field(default_factory=list)


def checked(model: type[BaseModel], data: dict[str, Any], where: str) -> Any:
    """A door's input as `model`, else the 400 the HTTP routes give (`invalid_text`, `invalid_request`)."""
    if (refused := bad_text(data, where)) is not None:
        raise APIError(400, refused.code, refused.message, refused.details)
    return validate_body(model, data, where)


def ask(principal: Principal, slug: str, message: str, session_id: str | None, token: str | None,
        channel: str, origin: dict[str, Any] | None = None) -> Asked:
    """Admit `message` for agent `slug`: a new session on `channel`, or a follow-up on the caller's
    `session_id`. `origin`: what the turn carries of an agent that sent it (its hops, for the loop guard).

    A follow-up on a session whose turn waits for a decision is refused (409 `awaiting_approval`): the
    message would interrupt the parked turn, and the person asking has a decision to make first.
    """
    agent = get_agent(slug)
    if not session_id:
        check_rate(principal, SESSIONS)
        admitted = start_session(agent, principal, message, channel=channel, origin=origin)
        return Asked(slug, admitted.session.id, admitted.turn.id, 0, admitted.continuation_token,
                     admitted.session.mode)
    session = get_owned_session(slug, session_id, principal)
    parked = Turn.objects.filter(session_id=session.id, status=Turn.Status.AWAITING_APPROVAL).first()
    if parked is not None and (waiting := pending_calls(parked.id)):
        raise APIError(409, "awaiting_approval", "the session's turn waits on a person "
                       f"({', '.join(call['toolName'] for call in waiting)}): decide or answer first, then ask again",
                       {"turnId": parked.id, "pendingApprovals": waiting})
    check_rate(principal, MESSAGES)
    admitted = submit_message(session, message, continuation_token=token or None, origin=origin)
    turn = admitted.turn.id
    return Asked(slug, session.id, turn, follow_up_start(session.id, turn), admitted.continuation_token,
                 session.mode)


def pending_calls(turn_id: str) -> list[dict[str, Any]]:
    """The turn's calls waiting on a person: what they are asked about (`kind` question: the model's
    question, its text and options in `input`; approval: a call to approve or deny)."""
    rows = ToolCall.objects.filter(turn_id=turn_id, status=ToolCall.Status.AWAITING_APPROVAL).order_by("id")
    return [waiting_call(row.call_id, row.tool, row.input, row.question) for row in rows]


def waiting_call(call_id: str, tool_name: str, input: Any, question: bool) -> dict[str, Any]:
    return {"callId": call_id, "toolName": tool_name, "input": input, "kind": "question" if question else "approval"}


def decide(principal: Principal, asked: Asked, decisions: dict[str, tuple[str, str]],
           answers: dict[str, str] | None = None) -> None:
    """Record the person's decisions (call id → (approve|deny, reason)) and answers (call id → text) on
    the calls `asked`'s turn waits on, as the HTTP routes record them. A call decided meanwhile
    elsewhere keeps that decision; an id the turn is not waiting on is left alone.
    """
    session = get_owned_session(asked.slug, asked.session_id, principal)
    waiting = {call["callId"] for call in pending_calls(asked.turn_id)}
    acts = [(call_id, lambda c=call_id, d=decided: resolve_approval(session, c, d[0], principal, d[1]))
            for call_id, decided in decisions.items()]
    acts += [(call_id, lambda c=call_id, a=answer: answer_question(session, c, a, principal))
             for call_id, answer in (answers or {}).items()]
    for call_id, act in acts:
        if call_id not in waiting:
            continue
        try:
            act()
        except AdmissionError as exc:
            if exc.code != "already_resolved":
                raise


def state(turn_id: str) -> tuple[str | None, list[dict[str, Any]]]:
    """The turn's status (None: gone with its session) and the calls it waits on."""
    status = Turn.objects.filter(pk=turn_id).values_list("status", flat=True).first()
    return status, pending_calls(turn_id) if status == Turn.Status.AWAITING_APPROVAL else []


def outcome(session_id: str, turn_id: str, start: int, pending: list[dict[str, Any]]) -> Outcome:
    """The turn's ending as its events from `start` tell it: its last reply, or why it has none."""
    if pending:
        return Outcome("awaiting_approval", pending=pending)
    reply, error, status = "", "", ""
    for line in read_lines(session_id, start):
        if line.type not in OUTCOME_TYPES:
            continue
        data = json.loads(line.json)
        if data.get("turnId") != turn_id:
            continue
        payload = data.get("data") or {}
        if line.type == EventType.MESSAGE_COMPLETED:
            reply = payload.get("text") or ""
        elif line.type == EventType.TURN_FAILED:
            status = "interrupted" if payload.get("code") == "interrupted" else "failed"
            error = payload.get("error") or "the turn failed"
        elif not status:
            status = "completed"
    if not status:  # the session was deleted under the turn
        return Outcome("failed", error="the session was deleted before its turn ended")
    return Outcome(status, reply=reply, error=error)


async def settled(asked: Asked, start: int | None = None,
                  waiting: list[dict[str, Any]] | None = None) -> AsyncIterator[list[Line]]:
    """The turn's events from `start` (default: where it began) until it ends or waits on people;
    then `waiting` (when given) holds the calls it waits on.

    A turn whose calls were all decided but that is still held back (the running-turn cap, or no
    worker has resumed it yet) is followed on: it is neither ended nor waiting on anyone.
    """
    start = asked.start if start is None else start
    while True:
        async with aclosing(one_turn(asked.session_id, start, asked.turn_id, asked.mode)) as batches:
            async for batch in batches:
                if batch:
                    start = batch[-1].index + 1
                    yield batch
        status, pending = await database_sync_to_async(state)(asked.turn_id)
        if status is None or status in Turn.FINISHED or pending:
            if waiting is not None:
                waiting.extend(pending)
            return
