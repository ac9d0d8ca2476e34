"""A stored session as an eval case: a file (its first message and sent files, and the tools its first
turn called as `called_tool` gates), or data for the admin's eval cases (every turn a step, with the
same gates), for a person to tighten before keeping it."""
from __future__ import annotations

import pprint
import re

from sessions.eventlog.events import read_events
from sessions.models import Session, Turn
from sessions.eventlog.trajectory import build_trajectory


def case_id_for(session: Session) -> str:
    """A file name from the session's title: `evals/<this>_eval.py`."""
    words = re.sub(r"[^a-z0-9]+", "_", (session.title or session.id).lower()).strip("_")
    return (words[:40].rstrip("_") or "captured") if not words[:1].isdigit() else f"case_{words[:40]}"


def case_file_text(session: Session) -> str:
    """The text of a `*_eval.py` file that replays the session's first turn and gates on its calls."""
    first = Turn.objects.filter(session=session).order_by("created_at", "id").first()
    trajectory = build_trajectory(read_events(session.id))
    turn = trajectory["turns"][0] if trajectory["turns"] else {"toolCalls": [], "status": "", "reply": ""}
    message = first.message if first else (turn.get("input") or "")
    files = [{k: f[k] for k in ("path", "content", "encoding") if k in f} for f in (first.workspace_files if first else [])]
    lines = [
        f'"""Captured from session {session.id} of agent {session.agent.slug}: tighten the gates before keeping it',
        '(gate decisions and shape, not exact wording)."""',
        "from agents.sdk import includes",
        "",
        f"MESSAGE = {message!r}",
    ]
    if files:
        lines.append("FILES = " + pprint.pformat(files, width=100, sort_dicts=False))
    lines += ["", "", "def test(t):"]
    lines.append("    t.send(MESSAGE, workspace_files=FILES)" if files else "    t.send(MESSAGE)")
    if turn.get("status") == Turn.Status.COMPLETED:
        lines.append("    t.succeeded()")
    else:
        lines.append(f"    # the captured turn ended {turn.get('status') or 'unfinished'}: t.succeeded() would fail")
    for name in dict.fromkeys(call["toolName"] for call in turn.get("toolCalls", [])):
        lines.append(f"    t.called_tool({name!r})")
    reply = (turn.get("reply") or "").strip()
    if reply:
        lines.append(f"    # the reply was: {reply.splitlines()[0][:100]!r}")
        lines.append("    # t.check(t.reply, includes(...))")
    return "\n".join(lines) + "\n"


PEOPLES = (Turn.Trigger.USER, Turn.Trigger.CHANNEL)  # the turns a person (or a channel's person) started


def case_steps(session: Session) -> list[dict]:
    """Every turn a person or channel started as a step of a stored case (agents.evals.stored): its message,
    the text files sent with it, `succeeded` when it completed and `calledTool` for each tool it called."""
    messages = {turn.id: turn for turn in Turn.objects.filter(session=session)}
    steps = []
    for turn in build_trajectory(read_events(session.id))["turns"]:
        sent = messages.get(turn["turnId"])
        if sent is None or sent.trigger not in PEOPLES or not sent.message:
            continue  # a reminder's, a schedule's, another agent's or a tool's turn: no message of the case's
        message = sent.message
        files = {f["path"]: f["content"] for f in sent.workspace_files
                 if f.get("encoding", "utf-8") != "base64"}
        expect = [{"gate": "succeeded"}] if turn.get("status") == Turn.Status.COMPLETED else []
        expect += [{"gate": "calledTool", "tool": name}
                   for name in dict.fromkeys(call["toolName"] for call in turn.get("toolCalls", []))]
        steps.append({"message": message, **({"files": files} if files else {}), "expect": expect})
    return steps
