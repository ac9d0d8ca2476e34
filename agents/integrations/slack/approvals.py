"""Approval cards in Slack: the Block Kit of a card (Approve / Deny, then who decided; or the
model's question with a button per option, then the answer) and the click that comes back through
interactivity, read and checked against the approvers."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Collection, Literal, Mapping
from urllib.parse import parse_qs

from agents.integrations.events import PayloadError, dig, load_json, text

APPROVE, DENY = "approval_approve", "approval_deny"
ANSWER = "question_answer"  # a question's option button: its value carries the answer
# Slack caps a section's text at 3000 characters and a button value at 2000.
SECTION_LIMIT = 3000


def escape(value: str) -> str:
    """Slack's three control characters, escaped for mrkdwn and plain text."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def approval_blocks(*, session_id: str, call_id: str, tool: str, summary: str) -> list[dict[str, Any]]:
    """A card asking to approve or deny one parked tool call. Both buttons
    carry the session and call ids; the action id says which was pressed."""
    value = json.dumps({"session": session_id, "call": call_id}, separators=(",", ":"))
    if len(value) > 2000:
        raise ValueError("session and call ids too long for a Slack button value")
    heading = f"*{escape(tool)}* is waiting for approval:\n"
    body = escape(summary).replace("```", "'''")
    room = SECTION_LIMIT - len(heading) - 8
    if len(body) > room:
        body = body[: room - 1] + "…"
    return [
        {"type": "section", "text": {"type": "mrkdwn", "text": f"{heading}```{body}```"}},
        {"type": "actions", "block_id": f"approval:{call_id}"[:255], "elements": [
            {"type": "button", "action_id": APPROVE, "style": "primary", "value": value,
             "text": {"type": "plain_text", "text": "Approve"}},
            {"type": "button", "action_id": DENY, "style": "danger", "value": value,
             "text": {"type": "plain_text", "text": "Deny"}},
        ]},
    ]


def decided_blocks(*, tool: str, decision: str, user_id: str = "", by: str = "") -> list[dict[str, Any]]:
    """What an approval card becomes once decided: no buttons, who decided
    (a Slack user, or `by` for a decision made elsewhere, e.g. the HTTP API)."""
    verb = "Approved" if decision == "approve" else "Denied"
    who = f"<@{user_id}>" if user_id else escape(by or "someone")
    return [{"type": "context", "elements": [
        {"type": "mrkdwn", "text": f"{verb} by {who}: *{escape(tool)}*"}]}]


def question_blocks(*, session_id: str, call_id: str, question: str, options: list[str],
                    mention: bool = False) -> list[dict[str, Any]]:
    """A card with the model's question: a button per option (its value: the ids and the option), and
    a line saying a reply in the thread answers it too (`mention`: one that mentions the app)."""
    heading = "*The agent asks:* "
    body = escape(question)
    if len(body) > SECTION_LIMIT - len(heading):
        body = body[: SECTION_LIMIT - len(heading) - 1] + "…"
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": heading + body}}]
    buttons = []
    for option in options[:25]:  # Slack's most elements in an actions block
        value = json.dumps({"session": session_id, "call": call_id, "answer": option}, separators=(",", ":"))
        if len(value) > 2000:
            raise ValueError("session and call ids too long for a Slack button value")
        buttons.append({"type": "button", "action_id": f"{ANSWER}:{len(buttons)}", "value": value,
                        "text": {"type": "plain_text", "text": option[:75]}})
    if buttons:
        blocks.append({"type": "actions", "block_id": f"question:{call_id}"[:255], "elements": buttons})
    blocks.append({"type": "context", "elements": [
        {"type": "mrkdwn", "text": "Or reply in this thread with your answer"
                                   + (", mentioning this app." if mention else ".")}]})
    return blocks


def answered_blocks(*, question: str, answer: str, user_id: str = "", by: str = "") -> list[dict[str, Any]]:
    """What a question card becomes once answered: the question, the answer and who gave it."""
    who = f"<@{user_id}>" if user_id else escape(by or "someone")
    said = f"*The agent asked:* {escape(question)}\n>{escape(answer)}"
    if len(said) > SECTION_LIMIT:
        said = said[: SECTION_LIMIT - 1] + "…"
    return [{"type": "section", "text": {"type": "mrkdwn", "text": said}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": f"Answered by {who}"}]}]


def parse_interaction(body: bytes) -> dict[str, Any]:
    """An interactivity request's `payload=` form field, decoded."""
    form = parse_qs(body.decode("utf-8", "replace"))
    if "payload" not in form:
        raise PayloadError("an interactivity request without a payload field")
    return load_json(form["payload"][0])


@dataclass(frozen=True)
class ApprovalAction:
    session_id: str
    call_id: str
    decision: Literal["approve", "deny", "answer"]  # answer: an option of a question, `answer`
    user_id: str
    user_team: str
    team_id: str
    channel: str
    message_ts: str
    thread_ts: str | None
    response_url: str = field(default="", repr=False, compare=False)
    answer: str = ""


def parse_approval_action(payload: Mapping[str, Any]) -> ApprovalAction | None:
    """The approve/deny click (or a question's option) in a block_actions payload, or None if it has none."""
    if payload.get("type") != "block_actions":
        return None
    for action in payload.get("actions") or []:
        action_id = action.get("action_id") if isinstance(action, Mapping) else None
        answers = isinstance(action_id, str) and action_id.startswith(ANSWER + ":")
        if action_id not in (APPROVE, DENY) and not answers:
            continue
        try:
            value = json.loads(action.get("value") or "")
            session_id, call_id = value["session"], value["call"]
            answer = str(value["answer"]) if answers else ""
        except (ValueError, TypeError, KeyError) as exc:
            raise PayloadError("an approval button whose value is not the session and call ids") from exc
        return ApprovalAction(
            session_id=str(session_id), call_id=str(call_id), answer=answer,
            decision="answer" if answers else "approve" if action_id == APPROVE else "deny",
            user_id=text(dig(payload, "user", "id")), user_team=text(dig(payload, "user", "team_id")),
            team_id=text(dig(payload, "team", "id")),
            channel=text(dig(payload, "channel", "id")) or text(dig(payload, "container", "channel_id")),
            message_ts=text(dig(payload, "container", "message_ts")) or text(dig(payload, "message", "ts")),
            thread_ts=text(dig(payload, "container", "thread_ts")) or text(dig(payload, "message", "thread_ts")) or None,
            response_url=text(payload.get("response_url")),
        )
    return None


def approver_allowed(action: ApprovalAction, allowed: Collection[str], *, home_team_id: str | None = None) -> bool:
    """Whether the user who clicked may decide. `allowed` holds user ids, or
    "*" for anyone in the home workspace; empty allows nobody."""
    return may_decide(action.user_id, action.user_team, allowed, home_team_id or action.team_id)


def may_decide(user_id: str, user_team: str, allowed: Collection[str], home_team_id: str) -> bool:
    """Whether `user_id` (of workspace `user_team`) may decide in a thread of `home_team_id`'s."""
    if user_team and home_team_id and user_team != home_team_id:
        return False
    return "*" in allowed or user_id in allowed


def unescaped(value: str) -> str:
    """Text as a person typed it, from a message's text as Slack sends it (its three escapes undone)."""
    return value.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
