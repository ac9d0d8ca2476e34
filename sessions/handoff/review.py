"""The review of a handoff: what moving a session to another model keeps, loses and changes.

Read-only. Its id is a hash of its content and of where the session stands
(its next event index and the length of its conversation), so a review goes
stale as soon as the session moves on: any new event, message or credential
change gives another id, and `perform` refuses a stale one.
"""
from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from agents.providers import get_provider
from agents.providers.base import params_for
from agents.providers.transcript import CACHING, READS_IMAGES, provider_of, take_inventory
from agents.secrets.store import acting_for
from sessions.handoff.runtimes import across_runtimes
from sessions.models import Session


if TYPE_CHECKING:
    from agents.models import Deployment

RefusalCode = Literal["no_credential", "model_not_allowed", "same_model"]


class Refusal(TypedDict):
    code: RefusalCode
    message: str
    alternatives: list[str]


def missing_configuration(model_id: str, params: dict[str, Any]) -> str:
    """What the target's provider says it lacks to be called ("" when nothing: its key, or for
    an OpenAI-compatible server a base URL). Call it inside `acting_for(slug)` so an agent's
    own secrets count."""
    try:
        provider, _ = get_provider(model_id)
    except ValueError:  # a provider this server does not have
        return "its key"
    return provider.missing_configuration(params)


def ready_models(deployment: Deployment) -> list[str]:
    """The release's models that are configured on this server: those a handoff to can succeed."""
    manifest = deployment.manifest or {}
    params = dict(manifest.get("params") or {})
    declared_for = manifest.get("model", "")  # another provider's model does not take that one's server and key
    with acting_for(deployment.agent.slug):
        return [m for m in deployment.models if not missing_configuration(m, params_for(m, params, declared_for))]


def _refusal(session: Session, source: str, to_model: str, missing: str, alternatives: list[str]) -> Refusal | None:
    allowed = session.deployment.models
    if to_model == source:
        return {"code": "same_model", "message": f"the session already runs on {to_model!r}",
                "alternatives": alternatives}
    if to_model not in allowed:
        return {"code": "model_not_allowed",
                "message": f"model {to_model!r} is not one this agent may run on; choose one of: {', '.join(allowed)}",
                "alternatives": alternatives}
    if missing:
        return {"code": "no_credential",
                "message": f"{to_model!r} is not configured on this server: set {missing} "
                           "(an agent secret or the environment)" + (
                               f", or choose one of: {', '.join(alternatives)}" if alternatives else ""),
                "alternatives": alternatives}
    return None


def _lost(session: Session, source: str, to_model: str, seen) -> list[dict[str, Any]]:
    lost: list[dict[str, Any]] = []
    if seen.thinking:
        lost.append({"kind": "thinking", "count": seen.thinking, "detail": (
            f"{seen.thinking} thinking block(s) ({seen.signed} with a signature) are dropped: a signature is "
            f"proof from the model that wrote it, which {to_model} cannot check, and reasoning is not sent to "
            "another model")})
    if provider_of(source) in CACHING and seen.messages and source != to_model:
        lost.append({"kind": "cache", "count": seen.messages, "detail": (
            f"the prompt cache {provider_of(source)} keeps for {source} does not carry over: the first turn on "
            f"{to_model} reads all {seen.messages} message(s) uncached")})
    if seen.images and provider_of(to_model) not in READS_IMAGES:
        lost.append({"kind": "images", "count": seen.images, "detail": (
            f"{seen.images} image(s) are replaced by a placeholder: {to_model} does not read images")})
    return lost


def review_content(session: Session, to_model: str) -> dict[str, Any]:
    source = session.bound_model
    conversation = list(session.conversation or [])
    manifest = session.deployment.manifest or {}
    params = dict(manifest.get("params") or {})
    declared_for = manifest.get("model", "")  # another provider's model does not take that one's server and key
    with acting_for(session.agent.slug):
        missing = missing_configuration(to_model, params_for(to_model, params, declared_for))
        alternatives = [m for m in session.deployment.models
                        if m != source and not missing_configuration(m, params_for(m, params, declared_for))]
    seen = take_inventory(conversation, to_model)
    runtime = (session.deployment.manifest or {}).get("runtime") or {}
    lost, transformed = across_runtimes(conversation, source, to_model)
    return {
        "sessionId": session.id,
        "from": source,
        "to": to_model,
        "configured": not missing,
        "refusal": _refusal(session, source, to_model, missing, alternatives),
        "carriesOver": {
            "messages": seen.messages, "userMessages": seen.user_messages,
            "assistantMessages": seen.assistant_messages, "toolCalls": seen.tool_calls,
            "toolResults": seen.tool_results,
            "workspace": {"kind": runtime.get("kind", "local"), "carried": True},
        },
        "lost": _lost(session, source, to_model, seen) + lost,
        "transformed": ([{"kind": "toolCallIds", "count": len(seen.remapped), "detail": (
            f"{len(seen.remapped)} tool-call id(s) are in a form {provider_of(to_model)} refuses; each is "
            "replaced by one derived from it, in the call and in its result alike")}] if seen.remapped else [])
        + transformed,
        "atIndex": session.next_event_index,
    }


# Read from the serving process's credentials: another web host may see them otherwise, and
# the handoff checks them again itself, so they do not make a review stale.
LOCAL_FIELDS = ("configured", "refusal")


def review_id(content: dict[str, Any], next_event_index: int, conversation_length: int) -> str:
    content = {k: v for k, v in content.items() if k not in LOCAL_FIELDS}
    canonical = json.dumps({"review": content, "nextEventIndex": next_event_index,
                            "conversationLength": conversation_length},
                           sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def review(session: Session, to_model: str) -> dict[str, Any]:
    """What handing `session` over to `to_model` would keep, lose and change, and whether it may (read-only)."""
    content = review_content(session, to_model)
    content_id = review_id(content, session.next_event_index, len(session.conversation or []))
    return {**content, "reviewId": content_id}
