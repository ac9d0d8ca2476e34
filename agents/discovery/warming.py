"""What a process that forks turn workers loads first, so that each worker need not.

Importing a provider's SDK costs a worker about half a second of CPU (the
`openai` client alone; its chat resource and HTTP transport, about 0.1 s more,
are imported only when a client first uses them, so a provider's `warm()`
builds one), and loading a release imports its agent's modules:
done in each worker, on its first turn, that is paid again per worker and
per recycled worker, and that first turn waits for it. Done once in the
process the workers are forked from, it is paid once and its pages are
shared by every worker.
"""
from __future__ import annotations

import logging
import time

from django.db.models import F

from agents.discovery.releases import load_deployment, release
from agents.models import Deployment
from agents.pricing.prices import TABLE_PROVIDERS, load_table
from agents.providers import get_provider
from agents.providers.runtimes import runtime_of

log = logging.getLogger(__name__)


def warm_active_releases() -> list[str]:
    """Load each agent's active release and import the providers of the models it may call
    (and the price table when one of them is a public provider's).

    Returns the slugs warmed. A release that cannot be loaded here is left for
    its turns to load (and to report): warming never stops the workers starting.
    """
    started = time.monotonic()
    warmed = []
    active = Deployment.objects.filter(agent__active_deployment=F("pk")).order_by("agent__slug")
    for pk, content_hash, slug in active.values_list("pk", "content_hash", "agent__slug"):
        try:
            deployment = release(pk, content_hash)  # the row read once, kept for the workers' turns
            loaded = load_deployment(deployment)
            for model_id in dict.fromkeys([loaded.model, *loaded.models, *loaded.fallback,
                                           *(s.model for s in loaded.subagents.values())]):
                if model_id and not runtime_of(model_id):  # a whole runtime's SDK loads with its first turn
                    provider, _ = get_provider(model_id)
                    if warm := getattr(provider, "warm", None):
                        warm()  # the SDK's lazily imported parts: a worker's first call would import them
                    if model_id.partition(":")[0] in TABLE_PROVIDERS:
                        load_table()  # its calls are priced from the public table
        except (Exception, SystemExit):  # a provider's SDK missing, a module exiting: its first turn says why
            log.warning("agent %s: its release was not loaded before the workers started", slug,
                        exc_info=True)
            continue
        warmed.append(slug)
    log.info("loaded %d active release(s) before starting the workers, in %d ms", len(warmed),
             (time.monotonic() - started) * 1000)
    return warmed
