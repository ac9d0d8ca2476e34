"""The Messages API's shape of a conversation, without its SDK: the anthropic provider sends it, and
the Claude Agent SDK's runtime resumes a transcript written in it (sessions.claude_agent)."""
from __future__ import annotations

from typing import Any


def to_anthropic_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Neutral messages → Messages API turns, merging neighbours of the same role."""
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in messages:
        if m["role"] == "user":
            add("user", [{"type": "text", "text": m["content"]}])
        elif m["role"] == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": m["callId"], "content": m["content"],
                          "is_error": bool(m.get("isError"))}])
        elif m["role"] == "assistant":
            blocks: list[dict[str, Any]] = []
            if m.get("reasoning") and m.get("reasoningSignature"):
                # With thinking on, a tool-use turn must hand its thinking back unchanged.
                blocks.append({"type": "thinking", "thinking": m["reasoning"], "signature": m["reasoningSignature"]})
            if m.get("content"):
                blocks.append({"type": "text", "text": m["content"]})
            for call in m.get("toolCalls") or []:
                payload = call["input"] if isinstance(call["input"], dict) else {"input": call["input"]}
                blocks.append({"type": "tool_use", "id": call["id"], "name": call["name"], "input": payload})
            add("assistant", blocks)
    return out
