"""What a conversation keeps, loses and changes when it goes to another model.

The stored conversation is provider-neutral (agents.providers.base), but three
things in it belong to the model or provider that wrote them:

- reasoning: a thinking block's signature is proof from the model that wrote
  it, checked by that model only. A handoff always changes the model, so every
  thinking block (its text and signature) is dropped; an unsigned reasoning
  text (an OpenAI-compatible server's) was never sent back to any model, and
  goes with the others so the transcript says exactly what the target sees.
  An assistant message that held nothing but thinking goes with it. Within a
  session, a turn that fell over to a fallback holds thinking of two models:
  each model call is sent only the thinking its own model signed (`for_model`).
- tool-call ids: each provider checks the ids it is handed back. Anthropic
  takes `^[a-zA-Z0-9_-]{1,64}$`, OpenAI at most 40 characters. An id the
  target would refuse is replaced by one derived from it (the same for the
  call and its result, so the pair still matches).
- images: the neutral shape carries text; a message whose content is a list
  of parts with images keeps them for providers that read images and loses
  them (a placeholder says so) for one that does not.

The source's prompt cache never carries over: caches are kept per model.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

ANTHROPIC_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
OPENAI_ID_MAX = 40
# Providers with a prompt cache the session may have warmed.
CACHING = frozenset({"anthropic", "openai", "claude-agent"})
# Providers whose models read image parts.
READS_IMAGES = frozenset({"anthropic", "openai", "claude-agent"})
# The official Claude Agent SDK's runtime calls the Messages API: Anthropic's rules for ids apply.
WIRE = {"claude-agent": "anthropic"}
IMAGE_PLACEHOLDER = "[image not carried over: the model this session moved to does not read images]"


def provider_of(model_id: str) -> str:
    return (model_id or "").partition(":")[0]


def id_accepted(call_id: str, provider: str) -> bool:
    """Whether `provider` takes `call_id` back as a tool-call id."""
    provider = WIRE.get(provider, provider)
    if provider == "anthropic":
        return bool(ANTHROPIC_ID.match(call_id or ""))
    if provider == "openai":
        return 0 < len(call_id or "") <= OPENAI_ID_MAX
    return True


def remapped_id(call_id: str) -> str:
    """A stable id every provider accepts, derived from the old one (so a call and its result agree)."""
    return "call_" + hashlib.sha256((call_id or "").encode()).hexdigest()[:24]


def _image_parts(content: Any) -> int:
    if not isinstance(content, list):
        return 0
    return sum(1 for part in content if isinstance(part, dict) and str(part.get("type", "")).startswith("image"))


def _text_only(content: list[Any]) -> str:
    texts = []
    for part in content:
        if isinstance(part, dict) and str(part.get("type", "")).startswith("image"):
            texts.append(IMAGE_PLACEHOLDER)
        elif isinstance(part, dict):
            texts.append(str(part.get("text", "")))
        else:
            texts.append(str(part))
    return "\n".join(t for t in texts if t)


@dataclass
class Inventory:
    """Counts of what a conversation holds, and what moving it to `target` changes."""

    messages: int = 0
    user_messages: int = 0
    assistant_messages: int = 0
    tool_calls: int = 0
    tool_results: int = 0
    thinking: int = 0
    signed: int = 0
    images: int = 0
    remapped: set[str] = field(default_factory=set)


def take_inventory(conversation: list[dict[str, Any]], target: str) -> Inventory:
    provider = provider_of(target)
    seen = Inventory(messages=len(conversation))
    for message in conversation:
        role = message.get("role")
        seen.images += _image_parts(message.get("content"))
        if role == "user":
            seen.user_messages += 1
        elif role == "tool":
            seen.tool_results += 1
            if not id_accepted(message.get("callId", ""), provider):
                seen.remapped.add(message.get("callId", ""))
        elif role == "assistant":
            if _only_thinking(message):  # nothing of it is left once its thinking is dropped
                seen.messages -= 1
            else:
                seen.assistant_messages += 1
            if message.get("reasoning") or message.get("reasoningSignature"):
                seen.thinking += 1
                seen.signed += bool(message.get("reasoningSignature"))
            for call in message.get("toolCalls") or []:
                seen.tool_calls += 1
                if not id_accepted(call.get("id", ""), provider):
                    seen.remapped.add(call.get("id", ""))
    return seen


def _only_thinking(message: dict[str, Any]) -> bool:
    return not message.get("content") and not message.get("toolCalls")


THINKING = ("reasoning", "reasoningSignature", "reasoningModel")


def materialize(conversation: list[dict[str, Any]], from_model: str, to_model: str) -> list[dict[str, Any]]:
    """The conversation re-made for `to_model` by a handoff: what `review` lists as lost is dropped, what it
    lists as transformed is changed, everything else is kept as it was (a new list; the input is not changed)."""
    return _remade(conversation, to_model, lambda message: False)


def for_model(conversation: list[dict[str, Any]], model_id: str, owner: str) -> list[dict[str, Any]]:
    """The conversation as a call of `model_id` may send it: thinking only where `model_id` signed it.

    An assistant message names the model of its thinking in `reasoningModel`;
    one without it was written by `owner`, the model the conversation is kept
    for (a session's, a subagent's). Ids and images are made as for a handoff.
    """
    return _remade(conversation, model_id, lambda message: message.get("reasoningModel", owner) == model_id)


def _remade(conversation: list[dict[str, Any]], to_model: str, keeps_thinking) -> list[dict[str, Any]]:
    """A new list; a message that needs no change is the input's own (which is not changed)."""
    provider = provider_of(to_model)
    images_readable = provider in READS_IMAGES
    out: list[dict[str, Any]] = []
    for message in conversation:
        made = message
        if made.get("role") == "assistant":
            if any(key in made for key in THINKING) and not keeps_thinking(made):
                made = {key: value for key, value in made.items() if key not in THINKING}
            if _only_thinking(made) and not made.get("reasoningSignature"):
                continue  # an empty assistant turn: OpenAI refuses one
            calls = made.get("toolCalls")
            if calls and not all(id_accepted(call.get("id", ""), provider) for call in calls):
                made = {**made, "toolCalls": [
                    call if id_accepted(call.get("id", ""), provider) else {**call, "id": remapped_id(call.get("id", ""))}
                    for call in calls]}
        elif made.get("role") == "tool" and not id_accepted(made.get("callId", ""), provider):
            made = {**made, "callId": remapped_id(made.get("callId", ""))}
        if not images_readable and _image_parts(made.get("content")):
            made = {**made, "content": _text_only(made["content"])}
        out.append(made)
    return out
