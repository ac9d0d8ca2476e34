"""Signals agents send to the layers built on it (agents imports none of them)."""
from __future__ import annotations

from django.dispatch import Signal

# Sent inside the deploy's transaction when a deploy leaves a release active
# (a new release, or the active one re-deployed unchanged), with
# `agent` (agents.models.Agent), `deployment` and `loaded` (discovery.LoadedAgent).
# Sessions syncs the agent's schedules from it; a receiver that raises rolls
# the deploy back.
deployment_activated = Signal()
