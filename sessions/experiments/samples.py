"""One A/B sample per settled turn of an enrolled session, per experiment.

`record_samples` runs inside `lifecycle.settle`'s transaction, after the turn's
conditional end won: only one settle of a turn ever commits, so each turn gives
its samples once (the (turn, experiment) unique constraint says so to the
database too). The experiment's `on_sample` gets them after commit; one that
raises is logged and changes nothing.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Iterable, Mapping

from django.db import transaction
from django.utils import timezone

from agents.experiments import Sample, SampleEvent
from sessions.experiments.enrollment import experiments_of
from sessions.models import Event, EventType, ExperimentSample, Session, Turn
from sessions.turn import extensions

log = logging.getLogger(__name__)


def record_samples(session: Session, turn: Turn, *, status: str, usage: Mapping[str, Any] | None,
                   timings: Mapping[str, Any] | None) -> None:
    enrolled = session.ab_variants or {}
    if not enrolled:
        return
    experiments = experiments_of(session.deployment)
    live = {name: variant for name, variant in enrolled.items() if name in experiments}
    if not live:
        return
    events = [SampleEvent(type=t, data=d or {}, index=i) for t, d, i in Event.objects.filter(
        session_id=session.id, turn_id=turn.id).order_by("index").values_list("type", "data", "index")]
    builtin = builtin_metrics(events, status=status, usage=usage, timings=timings)
    now = timezone.now()
    rows, samples = [], []
    for name, variant in sorted(live.items()):
        test = experiments[name]
        metrics = {**builtin, **derived(test.derive, events, name)}
        rows.append(ExperimentSample(agent=session.agent.slug, experiment=name, variant=variant,
                                     session_id=session.id, turn_id=turn.id, metrics=metrics, at=now))
        if test.on_sample is not None:
            samples.append((test.on_sample, Sample(experiment=name, variant=variant, agent=session.agent.slug,
                                                   session_id=session.id, turn_id=turn.id, at=now, metrics=metrics)))
    ExperimentSample.objects.bulk_create(rows)
    for handler, sample in samples:
        transaction.on_commit(lambda handler=handler, sample=sample: hand_over(handler, sample))


def builtin_metrics(events: Iterable[SampleEvent], *, status: str, usage: Mapping[str, Any] | None,
                    timings: Mapping[str, Any] | None) -> dict[str, float | None]:
    """The built-in metrics of one turn. Tokens unknown to the provider stay None (unknown, not zero),
    and so does the cost of a turn with any call of unknown price (`turn_cost`)."""
    events = list(events)
    results = [e for e in events if e.type == EventType.ACTION_RESULT]
    failed_turn = status != Turn.Status.COMPLETED
    return {
        "turns": 1,
        "toolCalls": len(results),
        "errors": sum(1 for e in results if "error" in e.data) + (1 if failed_turn else 0),
        "approvals": sum(1 for e in events if e.type == EventType.ACTION_APPROVAL_REQUESTED),
        "inputTokens": usage.get("inputTokens") if usage else None,
        "outputTokens": usage.get("outputTokens") if usage else None,
        "costUsd": turn_cost(usage),
        "wallTimeMs": (timings or {}).get("totalMs"),
        "firstTokenMs": (timings or {}).get("firstTokenMs"),
    }


def turn_cost(usage: Mapping[str, Any] | None) -> float | None:
    """The turn's cost in dollars, or None when it is not known whole: its tokens unknown, or a call
    on a model without a price (the sum of the other calls would understate it, and bias a mean)."""
    if not usage or usage.get("unpricedCalls") or usage.get("costUsd") is None:
        return None
    return usage["costUsd"]


def derived(derive: Mapping[str, Any], events: list[SampleEvent], experiment: str) -> dict[str, float]:
    """Each `derive` function summed over the turn's events (None and non-numbers count nothing)."""
    totals: dict[str, float] = {}
    for metric, fn in derive.items():
        total = 0.0
        for event in events:
            try:
                value = fn(event)
            except Exception:
                log.exception("derive[%r] of experiment %s failed on %s", metric, experiment, event.type)
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                total += value
        totals[metric] = total
    return totals


def hand_over(handler, sample: Sample) -> None:
    try:
        handler(sample)
    except Exception:
        log.exception("on_sample of experiment %s failed for turn %s", sample.experiment, sample.turn_id)


class Sampled(extensions.TurnObserver):
    def turn_settled(self, session, turn, status, usage, timings, events) -> None:
        record_samples(session, turn, status=status, usage=usage, timings=timings)  # enrolled sessions only


def register() -> None:
    """Each settled turn of an enrolled session is a sample of its variants (sessions.apps)."""
    extensions.add_observer(Sampled())
