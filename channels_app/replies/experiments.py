"""Bodies of the A/B routes (`/<slug>/v1/abs…`), built from a release's experiments and the
stored samples (`sessions.experiments.results`)."""
from __future__ import annotations

from datetime import datetime
from typing import Literal

from agents.experiments import ABTest
from agents.models import Agent
from channels_app.replies.base import Reply
from sessions.experiments.results import Difference, Estimate, VariantResult, results
from sessions.models import Experiment, ExperimentSample


class VariantDescription(Reply):
    id: str
    label: str
    # The variant's model, when it replaces the agent's.
    model: str | None


class ExperimentSummary(Reply):
    name: str
    # The variant every session gets once the experiment is stopped; the one differences are taken against.
    control: str
    holdout: float
    stopped_at: datetime | None
    variants: list[VariantDescription]
    # Built-in metrics first, then the experiment's `derive` ones.
    metrics: list[str]
    # Sessions that gave at least one sample.
    sessions: int

    @classmethod
    def of(cls, agent: Agent, test: ABTest) -> ExperimentSummary:
        sessions = (ExperimentSample.objects.filter(agent=agent.slug, experiment=test.name)
                    .values("session_id").distinct().count())
        return cls(
            name=test.name,
            control=test.control,
            holdout=test.holdout,
            stopped_at=stopped_at(agent.pk, test.name),
            variants=[VariantDescription(id=v.id, label=v.label, model=v.model) for v in test.variants.values()],
            metrics=test.metric_names(),
            sessions=sessions,
        )


class ExperimentList(Reply):
    """The experiments the agent's active release declares (few: not paged)."""

    experiments: list[ExperimentSummary]


class MetricEstimate(Reply):
    """Mean per session and its 95% Student's t interval (null bounds with fewer than 2 sessions)."""

    n: int
    mean: float | None
    low: float | None
    high: float | None

    @classmethod
    def of(cls, e: Estimate) -> MetricEstimate:
        return cls(
            n=e.n,
            mean=e.mean,
            low=e.low,
            high=e.high,
        )


class MetricDifference(Reply):
    """This variant's mean minus control's, with Welch's 95% interval."""

    diff: float | None
    low: float | None
    high: float | None

    @classmethod
    def of(cls, d: Difference) -> MetricDifference:
        return cls(
            diff=d.diff,
            low=d.low,
            high=d.high,
        )


class VariantResults(Reply):
    id: str
    label: str
    control: bool
    sessions: int
    metrics: dict[str, MetricEstimate]
    # Samples (turns) whose cost is unknown (a model without a price, tokens never reported):
    # their sessions are left out of `costUsd`, never counted as free.
    unpriced_samples: int
    # Null for the control variant itself.
    vs_control: dict[str, MetricDifference] | None

    @classmethod
    def of(cls, r: VariantResult, control: str) -> VariantResults:
        return cls(
            id=r.id,
            label=r.label,
            control=r.id == control,
            sessions=r.sessions,
            metrics={m: MetricEstimate.of(e) for m, e in r.metrics.items()},
            unpriced_samples=r.unpriced_samples,
            vs_control=None if r.id == control else {m: MetricDifference.of(d) for m, d in r.vs_control.items()},
        )


class ExperimentResults(Reply):
    name: str
    control: str
    holdout: float
    stopped_at: datetime | None
    interval: Literal["student-t-95"]
    difference: Literal["welch-95"]
    metrics: list[str]
    variants: list[VariantResults]

    @classmethod
    def of(cls, agent: Agent, test: ABTest) -> ExperimentResults:
        metrics = test.metric_names()
        labels = {v.id: v.label for v in test.variants.values()}
        found = results(agent.slug, test.name, labels, test.control, metrics)
        return cls(
            name=test.name,
            control=test.control,
            holdout=test.holdout,
            stopped_at=stopped_at(agent.pk, test.name),
            interval="student-t-95",
            difference="welch-95",
            metrics=metrics,
            variants=[VariantResults.of(r, test.control) for r in found],
        )


def stopped_at(agent_id: int, name: str) -> datetime | None:
    """When the experiment `name` of the agent was stopped (None: it runs)."""
    return Experiment.objects.filter(agent_id=agent_id, name=name).values_list("stopped_at", flat=True).first()
