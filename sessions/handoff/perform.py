"""Performing a reviewed handoff: all of it, or nothing.

1. Refuse what the review refuses (400 `model_not_allowed`, 409 `same_model`,
   424 `no_credential` with the configured alternatives).
2. Take the session's execution lock as a direct tool call does, with a turn
   of its own (trigger `handoff`): 409 `session_busy` while a turn runs. Under
   the lock, review again: 409 `review_stale` unless the caller's review id is
   the fresh one. The write-ahead `Handoff` row (pending, with the review)
   commits with the lock.
3. Re-make the transcript for the target (`materialize`) and confirm the
   target takes it: one real call with the whole history and a one-token
   answer. A token count would be cheaper, but only Anthropic has one;
   the same short call works for every provider and also proves the key and
   the model name. Nothing is held open meanwhile.
4. Commit in one transaction: the session's model and conversation, a
   `session.handoff` event, the record completed, the lock released (turns
   queued behind the handoff then run on the target).

On any failure the session keeps its model and conversation, the record
ends failed, a `session.handoff` event says why, the lock is released, and
the caller gets 502 `handoff_failed`. A process that dies half-way leaves a
pending record and a running turn: the recovery sweep ends both (`abandon`).
"""
from __future__ import annotations

import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from agents.discovery import load_deployment
from agents.providers import get_provider, parse_model_id
from agents.providers.base import ModelRequest, ProviderError, ToolSpec, client_params, params_for
from agents.providers.transcript import materialize
from agents.secrets.store import acting_for
from sessions import tracing
from sessions.turn import extensions, lifecycle
from sessions.turn.admission import AdmissionError
from sessions.eventlog.events import operator_acted
from sessions.experiments.enrollment import overrides
from sessions.handoff.review import review
from sessions.models import EventType, Handoff, Session, Turn
from sessions.plumbing.processes import process_id

if TYPE_CHECKING:
    from sessions.principal import Principal

log = logging.getLogger(__name__)

REFUSAL_STATUS = {"model_not_allowed": 400, "same_model": 409, "no_credential": 424}
CONFIRM_TIMEOUT = 60.0
LEASE_MARGIN = 30.0
PROBE = "(A check that this conversation can continue here: answer with one word.)"
LOST_ERROR = "handoff abandoned: the process performing it stopped; the session stays on its model"


def refuse(reviewed: dict[str, Any], allowed: list[str]) -> None:
    """Raise the review's refusal, if it has one, as the AdmissionError the routes answer with."""
    refusal = reviewed.get("refusal")
    if refusal is None:
        return
    details: dict[str, Any] = {"alternatives": refusal["alternatives"]}
    if refusal["code"] == "model_not_allowed":
        details["allowed"] = allowed
    raise AdmissionError(refusal["code"], refusal["message"], REFUSAL_STATUS[refusal["code"]], details)


def event_data(handoff: Handoff, by: dict[str, Any] | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"handoffId": handoff.id, "from": handoff.from_model, "to": handoff.to_model,
                            "status": handoff.status, "review": handoff.review}
    if by:
        data["requestedBy"] = by
    if handoff.status == Handoff.Status.FAILED:
        data["error"], data["code"] = handoff.error, handoff.code
    return data


def perform(session: Session, to_model: str, review_id: str, by: Principal | None = None) -> Handoff:
    """Move `session` to `to_model` as the review `review_id` described, or leave it as it was (see above)."""
    refuse(review(session, to_model), session.deployment.models)
    hooks = session.hooks()  # loaded before the write lock is taken
    requested_by = by.as_dict() if by else None
    with transaction.atomic():
        # Leased for the confirming call's bound: if this request dies without ending it (even on the
        # way to failing), the recovery sweep frees the session once the lease lapses.
        turn = Turn(session=session, trigger=Turn.Trigger.HANDOFF, status=Turn.Status.RUNNING,
                    claimed_by=process_id(), started_at=timezone.now(),
                    lease_until=timezone.now() + timedelta(seconds=CONFIRM_TIMEOUT + LEASE_MARGIN), **tracing.link())
        if not lifecycle.lock_for_call(session, turn, parks=False):
            transaction.set_rollback(True)
            raise AdmissionError("session_busy", "a turn is running on this session; retry when it has settled", 409)
        # Read again under the lock: nothing can move the session now but this handoff.
        current = Session.objects.select_related("agent", "deployment").get(pk=session.pk)
        fresh = review(current, to_model)
        if fresh["reviewId"] != review_id:
            transaction.set_rollback(True)
            raise AdmissionError("review_stale", "the session moved on since this review: review it again "
                                 f"(GET .../handoff?to={to_model})", 409, {"reviewId": fresh["reviewId"]})
        handoff = Handoff.objects.create(
            session=current, turn=turn, from_model=current.bound_model, to_model=to_model, review_id=review_id,
            review=fresh, requested_by=(by.principal_id if by else "")[:200])
    try:
        made = materialize(list(current.conversation or []), handoff.from_model, to_model)
        confirm(current, to_model, made)
    except ProviderError as exc:
        _fail(current, turn, handoff, str(exc), exc.code, hooks, requested_by)
    except Exception as exc:  # a bug must not leave the session locked
        log.exception("handoff %s crashed", handoff.id)
        _fail(current, turn, handoff, f"internal error: {type(exc).__name__}: {exc}", "internal_error", hooks,
              requested_by)
    # An operator moving someone else's session is recorded as such, as their other acts are.
    acted = [operator_acted(by, "handoff", handoffId=handoff.id)] if by is not None and by.oversees(current) else []
    try:
        won = _commit(current, turn, handoff, made, hooks, requested_by, acted)
    except Exception as exc:  # a database error: nothing of the commit was kept
        log.exception("handoff %s could not commit", handoff.id)
        _fail(current, turn, handoff, f"could not commit: {type(exc).__name__}: {exc}", "database_error", hooks,
              requested_by)
    if not won:
        raise AdmissionError("handoff_failed", f"the handoff was abandoned; the session stays on {handoff.from_model}",
                             502, {"handoffId": handoff.id, "cause": "worker_lost"})
    return handoff


def _commit(session: Session, turn: Turn, handoff: Handoff, made: list[dict[str, Any]], hooks, by,
            acted: list[tuple[str, dict[str, Any]]]) -> bool:
    """Step 4, in one transaction; False (and nothing kept) if the lock was no longer this handoff's."""
    with transaction.atomic():
        lifecycle.principal_turn_lock(session)  # the lock order: the principal's first (lifecycle)
        events = acted + [(EventType.SESSION_HANDOFF, {**event_data(handoff, by), "status": Handoff.Status.COMPLETED})]
        # Each step is conditional on the lock still being this handoff's: if recovery took the
        # turn for lost (and failed the record), none of it is kept.
        won = (handoff.commit_model()
               and lifecycle.settle(session, turn, events, status=Turn.Status.COMPLETED, messages=made, hooks=hooks)
               and handoff.end(Handoff.Status.COMPLETED))
        if not won:
            transaction.set_rollback(True)
    return bool(won)


def _fail(session: Session, turn: Turn, handoff: Handoff, error: str, code: str, hooks, by) -> None:
    """End the handoff as failed with the session untouched, free the lock, and raise 502 `handoff_failed`."""
    with transaction.atomic():
        lifecycle.principal_turn_lock(session)
        if handoff.end(Handoff.Status.FAILED, error=error, code=code):
            lifecycle.settle(session, turn, [(EventType.SESSION_HANDOFF, event_data(handoff, by))],
                             status=Turn.Status.FAILED, error=error, hooks=hooks)
    raise AdmissionError("handoff_failed", f"the handoff to {handoff.to_model} failed and the session stays on "
                         f"{handoff.from_model}: {error}", 502, {"handoffId": handoff.id, "cause": code})


def confirm(session: Session, to_model: str, messages: list[dict[str, Any]]) -> None:
    """Raise ProviderError unless the target answers a call carrying the whole re-made history.

    The scripted model is offline and takes any neutral transcript: nothing to ask.
    Tools are declared from the names the history uses (a provider refuses tool
    calls in a history without tools), so no workspace or MCP server is opened.
    """
    provider_name, model = parse_model_id(to_model)
    if provider_name == "scripted" or not messages:
        return
    chosen = overrides(load_deployment(session.deployment), session.ab_variants)
    params = params_for(to_model, chosen.params, chosen.model)  # not another provider's server and key
    probe = client_params(params)  # the rest shape an answer the confirming call does not need
    probe["max_retries"] = 0  # the session is locked meanwhile: one try, bounded by the timeout
    probe["timeout"] = min(float(params.get("timeout", CONFIRM_TIMEOUT)), CONFIRM_TIMEOUT)
    probe["max_completion_tokens" if "max_completion_tokens" in params else "max_tokens"] = 1
    names = sorted({call["name"] for m in messages if m.get("role") == "assistant" for call in m.get("toolCalls") or []}
                   | {m["name"] for m in messages if m.get("role") == "tool" and m.get("name")})
    tools = [ToolSpec(name, "a tool this conversation used", {"type": "object"}) for name in names]
    request = ModelRequest(model=model, system="", messages=messages + [{"role": "user", "content": PROBE}],
                           tools=tools, params=probe)
    provider, _ = get_provider(to_model)
    with acting_for(session.agent.slug):
        for _ in provider.stream(request):
            pass


def abandon(turn: Turn) -> list[tuple[str, dict[str, Any]]]:
    """For the recovery sweep, ending a lost handoff turn: its pending record failed, and the event
    that says so (to append with the turn's end). The session was never changed: it stays on its source."""
    handoff = Handoff.objects.filter(turn=turn, status=Handoff.Status.PENDING).first()
    if handoff is None or not handoff.end(Handoff.Status.FAILED, error=LOST_ERROR, code="worker_lost"):
        return []
    return [(EventType.SESSION_HANDOFF, event_data(handoff))]


def register() -> None:
    """A lost handoff turn's record fails with it (sessions.apps)."""
    extensions.add_trigger(Turn.Trigger.HANDOFF, extensions.Trigger(lost=abandon))
