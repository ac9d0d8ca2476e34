"""A/B experiments' state on the server: whether an operator stopped one (`Experiment`) and the
samples of settled turns (`ExperimentSample`).

Samples hold no content (numbers, ids, variant, time) and name their agent and
session by plain fields, not foreign keys: deleting a session (retention's
purge) leaves its samples, so an experiment's results outlive its sessions.
"""
from __future__ import annotations

from django.db import models
from django.utils import timezone


class Experiment(models.Model):
    """One row per (agent, experiment name), made when an operator first acts on it."""

    agent = models.ForeignKey("agents.Agent", on_delete=models.CASCADE, related_name="experiments")
    name = models.CharField(max_length=64)
    # Set: new sessions go to control; sessions already enrolled keep their variant.
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["agent", "name"], name="experiment_agent_name")]

    def __str__(self) -> str:
        return f"{self.agent_id}:{self.name}"

    @classmethod
    def stop(cls, agent, name: str) -> bool:
        """Stop experiment `name` of `agent`; True only for the call that stopped it."""
        row, _ = cls.objects.get_or_create(agent=agent, name=name)
        return bool(cls.objects.filter(pk=row.pk, stopped_at=None).update(stopped_at=timezone.now()))

    @classmethod
    def stopped_names(cls, agent_id) -> set[str]:
        return set(cls.objects.filter(agent_id=agent_id, stopped_at__isnull=False).values_list("name", flat=True))


class ExperimentSample(models.Model):
    agent = models.CharField(max_length=64)  # the agent's slug
    experiment = models.CharField(max_length=64)
    variant = models.CharField(max_length=64)
    session_id = models.CharField(max_length=40)
    turn_id = models.CharField(max_length=40)
    metrics = models.JSONField(default=dict)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["turn_id", "experiment"], name="sample_turn_experiment")]
        indexes = [models.Index(fields=["agent", "experiment", "at"], name="sample_experiment_at")]

    def __str__(self) -> str:
        return f"{self.experiment}/{self.variant} {self.turn_id}"
