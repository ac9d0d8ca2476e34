"""What sessions does when the agents layer below it signals (connected in apps.py)."""
from __future__ import annotations

from typing import Any

from agents.discovery import LoadedAgent
from agents.models import Agent
from sessions.models import Experiment
from sessions.timers.schedules import sync_schedules


def sync_deployed_schedules(sender: Any, *, agent: Agent, loaded: LoadedAgent, **kwargs: Any) -> None:
    """Deploying an agent syncs its schedules: new files start, removed files stop."""
    sync_schedules(agent, loaded)


def sync_deployed_experiments(sender: Any, *, agent: Agent, loaded: LoadedAgent, **kwargs: Any) -> None:
    """Deploying an agent makes a row for each experiment it declares, so the admin lists them
    (a row already there keeps its `stopped_at`: redeploying never restarts a stopped experiment)."""
    Experiment.objects.bulk_create([Experiment(agent=agent, name=name) for name in loaded.experiments],
                                   ignore_conflicts=True)
