"""What the A2A methods do to sessions and turns, in the database: synchronous, called from the door's
event loop through a thread. Refusals are the APIErrors of the HTTP routes; the handler says them in
A2A's words.

A context is a session (a message without one starts a session on the `a2a` channel), a task is a
turn. A message on a task that waits for a decision is the decision; on any other task it is refused,
since a turn that ended takes no more input: a follow-up is a new message in the task's context.
"""
from __future__ import annotations

import json
from typing import Any

from a2a.types import a2a_pb2 as a2a
from google.protobuf.json_format import MessageToDict

from channels_app import asking
from channels_app.bodies import MessageBody
from channels_app.door_admission import Caller
from channels_app.doors import is_operator
from channels_app.errors import APIError
from channels_app.a2a_door.tasklog import STATE_OF_STATUS, TaskLog
from channels_app.replies.sessions import SessionLinks
from sessions.models import Event, Session, Turn
from sessions.turn.admission import stop_turn
from sessions.turn.approvals import checked_answer

CHANNEL = "a2a"
DECISIONS = {"approve": "approve", "approved": "approve", "yes": "approve",
             "deny": "deny", "denied": "deny", "no": "deny"}
PAGE_SIZE, PAGE_MAX = 50, 100


def _parts(message: a2a.Message) -> tuple[str, list[Any]]:
    """The message's text (its text parts, one per line) and its data parts; other parts are refused."""
    if message.role == a2a.ROLE_AGENT:
        raise APIError(400, "invalid_request", "the message's role must be user")
    texts: list[str] = []
    data: list[Any] = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            data.append(MessageToDict(part)["data"])
        else:
            raise APIError(415, "unsupported_content", f"a {kind} part is not accepted: send text or data parts")
    return "\n".join(texts), data


def _text(message: a2a.Message) -> str:
    """The message as the agent reads it: its text, and each data part as a line of JSON; checked as
    `POST /<slug>/v1/session` checks its `message` (400 `invalid_text`, `invalid_request`)."""
    text, data = _parts(message)
    text = "\n".join([text, *(json.dumps(item) for item in data)]) if data else text
    return asking.checked(MessageBody, {"message": text}, "message").message


def send(caller: Caller, slug: str, message: a2a.Message) -> asking.Asked:
    """A new task: the message in its context (the caller's session) or in a new one."""
    return asking.ask(caller.principal, slug, _text(message), message.context_id or None, None, CHANNEL,
                      sent_by_agent(message))


def sent_by_agent(message: a2a.Message) -> dict[str, Any] | None:
    """What an agentsite peer says of the message (`metadata.agentsite`: its agent, hops and root): the
    turn carries the hops on, so the hop limit holds across servers."""
    said = MessageToDict(message.metadata).get("agentsite") if message.HasField("metadata") else None
    if not isinstance(said, dict) or not isinstance(said.get("hops"), (int, float)):
        return None
    return {"hops": max(0, int(said["hops"])), "root": str(said.get("root") or "")[:40],
            "peer": str(said.get("agent") or "")[:64], "via": CHANNEL}


def answer(caller: Caller, slug: str, message: a2a.Message) -> asking.Asked:
    """The decision a message on task `message.task_id` gives to the calls it waits on."""
    turn = _turn(caller, slug, message.task_id, operators=False)
    if message.context_id and message.context_id != turn.session_id:
        raise APIError(400, "invalid_request", f"task {turn.pk} is not in context {message.context_id}")
    pending = asking.pending_calls(turn.pk)
    if not pending:
        state = "waits for no decision" if turn.status not in Turn.FINISHED else f"is {turn.status}"
        raise APIError(409, "task_not_waiting", f"task {turn.pk} {state}: send a message without taskId in "
                                                f"context {turn.session_id} to go on")
    asked = _asked(slug, turn)
    asking.decide(caller.principal, asked, *_decisions(message, pending))
    return asked


def _decisions(message: a2a.Message, pending: list[dict[str, Any]]) -> tuple[dict[str, tuple[str, str]],
                                                                              dict[str, str]]:
    """The message's decisions on the calls waiting for approval and answers to the questions waiting.

    Data parts: `{"decision": "approve"|"deny", "callId"?, "reason"?}` (no callId: every call waiting for
    approval) and `{"answer": "…", "callId"?}` (no callId: the one question waiting). Text alone is the
    answer when one question is all the task waits on, and approve or deny when only calls waiting for
    approval do; with a question among others, each is answered by a data part.
    """
    text, data = _parts(message)
    waiting = [call["callId"] for call in pending]
    questions = [call["callId"] for call in pending if call["kind"] == "question"]
    gated = [call_id for call_id in waiting if call_id not in questions]
    decided: dict[str, tuple[str, str]] = {}
    answers: dict[str, str] = {}
    for item in data:
        call = item.get("callId") if isinstance(item, dict) else None
        if call is not None and call not in waiting:
            raise APIError(400, "invalid_decision", f"the task waits on no call {call!r}: it waits on "
                                                    f"{', '.join(waiting)}")
        if isinstance(item, dict) and "answer" in item:
            answers[_question_of(call, questions)] = checked_answer(item["answer"])
            continue
        decision = DECISIONS.get(str(item.get("decision", "")).lower()) if isinstance(item, dict) else None
        if decision is None or call in questions or not (call or gated):
            raise APIError(400, "invalid_decision", 'a data part must be {"decision": "approve"|"deny"} for a '
                                                    'call waiting for approval, or {"answer": "…"} for a question')
        for call_id in [call] if call else gated:
            decided[call_id] = (decision, str(item.get("reason") or ""))
    if not data:
        if questions == waiting and len(questions) == 1:
            return {}, {questions[0]: checked_answer(text)}
        decision = DECISIONS.get(text.strip().lower().rstrip(".!"))
        if decision is None or questions:
            raise APIError(400, "invalid_decision", f"the task waits on {', '.join(waiting)}: answer approve or "
                                                    "deny for a call, and a question with a data part "
                                                    '{"callId", "answer"}')
        decided = {call_id: (decision, "") for call_id in waiting}
    return decided, answers


def _question_of(call: str | None, questions: list[str]) -> str:
    if call in questions or (call is None and len(questions) == 1):
        return call or questions[0]
    raise APIError(400, "invalid_decision", "an answer goes to a question the task waits on: "
                                            f"name it with callId (questions waiting: {', '.join(questions) or 'none'})")


def _turn(caller: Caller, slug: str, task_id: str, *, operators: bool = True) -> Turn:
    """Task `task_id` of agent `slug`, if the caller owns its session or (`operators`) is an operator,
    as for the HTTP routes that read or stop a session. Another's task is not found, as one that does
    not exist."""
    turn = Turn.objects.select_related("session").filter(pk=task_id, session__agent__slug=slug).first()
    if turn is None or not (turn.session.is_owned_by(caller.principal)
                            or (operators and is_operator(caller.principal))):
        raise APIError(404, "task_not_found", f"no task {task_id!r} on agent {slug!r}")
    return turn


def _asked(slug: str, turn: Turn) -> asking.Asked:
    return asking.Asked(slug, turn.session_id, turn.pk, 0, "", turn.session.mode)


def task(caller: Caller, slug: str, task_id: str) -> asking.Asked:
    return _asked(slug, _turn(caller, slug, task_id))


def stop(caller: Caller, slug: str, task_id: str) -> asking.Asked:
    """Ask the task's turn to stop (409 `task_not_cancelable` once it has ended); an operator stopping
    another's is recorded (`operator.acted`)."""
    turn = _turn(caller, slug, task_id)
    if turn.status in Turn.FINISHED:
        raise APIError(409, "task_not_cancelable", f"task {task_id} is already {turn.status}")
    stop_turn(turn, by=caller.principal)
    return _asked(slug, turn)


def opened(caller: Caller, asked: asking.Asked, upto: int | None = None) -> tuple[TaskLog, int]:
    """The task folded from its events so far (or below log index `upto`: a task just sent is folded
    as submitted, so its stream shows all it does however fast it runs), and the log's index where
    what follows begins."""
    end = upto if upto is not None else \
        Session.objects.filter(pk=asked.session_id).values_list("next_event_index", flat=True).first() or 0
    message = Turn.objects.filter(pk=asked.turn_id).values_list("message", flat=True).first() or ""
    links = SessionLinks.at(caller.origin, asked.slug, asked.session_id)
    log = TaskLog(asked.turn_id, asked.session_id, message,
                  metadata={"agentsite": {"sessionId": asked.session_id, "playgroundUrl": links.playground_url}})
    rows = Event.objects.filter(session_id=asked.session_id, turn_id=asked.turn_id, index__lt=end).order_by("index")
    for row in rows:
        log.feed(row.envelope())
    return log, end


def listed(caller: Caller, slug: str, request: a2a.ListTasksRequest) -> a2a.ListTasksResponse:
    """The caller's tasks on this agent, newest first, in pages (`page_token`: where the page starts)."""
    turns = Turn.objects.filter(session__agent__slug=slug, session__principal_id=caller.principal.principal_id,
                                session__authenticator=caller.principal.authenticator)
    if request.context_id:
        turns = turns.filter(session_id=request.context_id)
    if request.status:
        statuses = [status for status, state in STATE_OF_STATUS.items() if state == request.status]
        turns = turns.filter(status__in=statuses)
    size = min(request.page_size if request.HasField("page_size") else PAGE_SIZE, PAGE_MAX)
    if size < 1:
        raise APIError(400, "invalid_request", f"pageSize must be 1 to {PAGE_MAX}")
    try:
        offset = int(request.page_token or 0)
    except ValueError:
        offset = -1
    if offset < 0:
        raise APIError(400, "invalid_page_token", "pageToken is not one this server gave")
    total = turns.count()
    page = list(turns.select_related("session").order_by("-created_at", "-id")[offset:offset + size])
    history = request.history_length if request.HasField("history_length") else None
    tasks = []
    for turn in page:
        log, _ = opened(caller, _asked(slug, turn))
        tasks.append(log.snapshot(history))
    following = str(offset + size) if offset + size < total else ""
    return a2a.ListTasksResponse(tasks=tasks, next_page_token=following, page_size=size, total_size=total)
