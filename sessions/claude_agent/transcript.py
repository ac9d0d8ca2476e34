"""The session's conversation as the official runtime's own transcript, to resume from.

The stored conversation (the neutral shape of agents.providers.base) is the
one record of a session, whichever leg ran its turns. A run on the official
runtime that does not find its child alive writes that conversation as the
runtime's transcript (one JSON line per message, each naming its parent)
and resumes it, each call's tool named as the runtime calls it
(agents.providers.claude_agent_names). Thinking goes back only to the
model that signed it.
"""
from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agents.providers.claude_agent_names import on_the_wire
from agents.providers.messages_api import to_anthropic_messages
from agents.providers.transcript import for_model

def entries(messages: list[dict[str, Any]], session_id: str, cwd: str, model_id: str) -> list[dict[str, Any]]:
    """The transcript lines of `messages` for a runtime session `session_id` working in `cwd`."""
    turns = to_anthropic_messages(for_model(on_the_wire(messages), model_id, model_id))
    now = datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    lines, parent = [], None
    for index, turn in enumerate(turns):
        line_id = str(uuid.uuid4())
        message: dict[str, Any] = turn
        if turn["role"] == "assistant":
            message = {"id": f"msg_{index}", "type": "message", "model": model_id.partition(":")[2],
                       "stop_reason": "end_turn", "stop_sequence": None,
                       "usage": {"input_tokens": 0, "output_tokens": 0}, **turn}
        lines.append({"parentUuid": parent, "isSidechain": False, "type": turn["role"], "message": message,
                      "uuid": line_id, "timestamp": now, "userType": "external", "cwd": cwd,
                      "sessionId": session_id})
        parent = line_id
    return lines


def as_jsonl(lines: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(line) + "\n" for line in lines)


def write(path: Path, text: str) -> None:
    """Put a transcript where the runtime resumes it from."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def recorded_cost(text: str) -> float:
    """The cost the runtime recorded in its transcript (its running total, which it restores when it
    resumes the transcript); 0 for one it did not write or that records none."""
    total = 0.0
    for line in text.splitlines():
        if '"cost-state"' not in line:
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry.get("type") == "cost-state" and isinstance(entry.get("totalCostUSD"), (int, float)):
            total = float(entry["totalCostUSD"])
    return total
