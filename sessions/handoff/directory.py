"""The model directory (`GET /v1/models`): every model this server is set up to run, whether its
provider answers, and how many sessions are bound to it.

The models are those of the agents' active releases (their `models` and
`fallback`) and the server's default. A model's credentials and base URL are
read as each agent that lists it reads them (its secrets, then the
environment), so one model may reach several endpoints; each endpoint is
probed once (agents.providers.health, cached).
"""
from __future__ import annotations

from collections import Counter
from contextvars import copy_context
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable

from django.db.models import Count

from agents.discovery import default_model
from agents.models import Agent, Deployment
from agents.providers import get_provider, parse_model_id
from agents.providers.base import Endpoint, params_for
from agents.providers.health import PROBE_TIMEOUT_SECONDS, Health, check
from agents.providers.runtimes import missing_runtime
from agents.secrets.store import acting_for
from sessions.models import Session


@dataclass
class DirectoryEntry:
    id: str
    provider: str
    model: str
    configured: bool = False
    # None: not probed (nothing configured for it).
    reachable: bool | None = None
    checked_at: datetime | None = None
    error: str = ""
    sessions: int = 0
    agents: list[str] = field(default_factory=list)
    default: bool = False  # the server's default model (of agents that name none)
    endpoints: list[Endpoint] = field(default_factory=list)

    def take(self, health: dict[Endpoint, Health]) -> None:
        """Its endpoints' health as one answer: unreachable if any is (with that one's error)."""
        probed = [health[e] for e in self.endpoints if health[e].reachable is not None]
        if not probed:
            return
        failed = [h for h in probed if h.reachable is False]
        self.reachable = not failed
        self.error = failed[0].error if failed else self.error
        self.checked_at = min(h.checked_at for h in probed if h.checked_at)


def declared_models(manifest: dict[str, Any]) -> list[str]:
    """A release's models (the first is its default) and fallbacks, each once."""
    listed = [manifest.get("model", "")] + list(manifest.get("models") or []) + list(manifest.get("fallback") or [])
    return list(dict.fromkeys(m for m in listed if m))


def model_directory() -> list[DirectoryEntry]:
    entries: dict[str, DirectoryEntry] = {}
    probes: dict[Endpoint, Callable[[], None]] = {}

    def add(model_id: str, slug: str | None, params: dict[str, Any]) -> None:
        entry = entries.get(model_id)
        if entry is None:
            provider, _, model = model_id.partition(":")
            entry = entries[model_id] = DirectoryEntry(model_id, provider, model)
        if slug and slug not in entry.agents:
            entry.agents.append(slug)
        if problem := missing_runtime(model_id):  # released where its runtime is installed, but not here
            entry.error = entry.error or problem
            return
        try:
            parse_model_id(model_id)
            provider, _ = get_provider(model_id)
            endpoint = provider.endpoint(params)
        except Exception as exc:  # a release naming a provider this server no longer has, or odd params
            entry.error = entry.error or f"{type(exc).__name__}: {exc}"
            return
        entry.configured = entry.configured or endpoint.configured
        if endpoint not in entry.endpoints:
            entry.endpoints.append(endpoint)
        # The probe runs in a pool thread: it reads credentials from this agent's scope, copied here.
        probes.setdefault(endpoint, lambda run=copy_context().run: run(provider.probe, params, PROBE_TIMEOUT_SECONDS))

    agents = Agent.objects.exclude(active_deployment=None).select_related("active_deployment").order_by("slug")
    for agent in agents:
        manifest = agent.active_deployment.manifest or {}
        params = manifest.get("params") or {}
        with acting_for(agent.slug):
            for model_id in declared_models(manifest):
                add(model_id, agent.slug, params_for(model_id, params, manifest.get("model", "")))
    server_default = default_model()
    add(server_default, None, {})
    entries[server_default].default = True

    health = check(probes)
    counts = bound_sessions()
    for entry in entries.values():
        entry.take(health)
        entry.sessions = counts.get(entry.id, 0)
    return sorted(entries.values(), key=lambda e: e.id)


def bound_sessions() -> Counter[str]:
    """Sessions per model they are bound to; one made before sessions stored theirs counts under its release's.

    Two grouped queries and one over the releases such old sessions are on.
    """
    counts: Counter[str] = Counter(dict(
        Session.objects.exclude(model="").values_list("model").annotate(n=Count("pk")).values_list("model", "n")))
    unbound = dict(Session.objects.filter(model="").values_list("deployment_id").annotate(n=Count("pk"))
                   .values_list("deployment_id", "n"))
    if unbound:
        for pk, model in Deployment.objects.filter(pk__in=unbound).values_list("pk", "manifest__model"):
            if model:
                counts[model] += unbound[pk]
    return counts
