"""`wait_until` work: the django-q2 task that finds the function in its release and calls it."""
from __future__ import annotations

import logging
from typing import Any

from agents.discovery import load_deployment
from agents.models import Deployment
from agents.modules import function_by_name
from agents.secrets.store import acting_for
from sessions.custom_channels.context import ChannelContext
from sessions.models import Session
from sessions.principal import Principal

log = logging.getLogger("sessions.custom_channels")


def run_in_background(job: dict[str, Any]) -> None:
    """The django-q2 task of `wait_until` (ChannelContext.wait_until wrote `job`): find the function
    in its release and call it with a context like the one that scheduled it."""
    try:
        deployment = Deployment.objects.select_related("agent").get(pk=job["deployment"])
        load_deployment(deployment)  # imports the release's modules under their names
        target = function_by_name(job["module"], job["qualname"])
        session = Session.objects.select_related("agent", "deployment").filter(pk=job["session"]).first() \
            if job.get("session") else None
        principal = Principal(**{"authenticator": job["principal"]["authenticator"],
                                 "principal_id": job["principal"]["principalId"],
                                 "principal_type": job["principal"]["principalType"],
                                 "attributes": job["principal"].get("attributes") or {}}) \
            if job.get("principal") else None
        ctx = ChannelContext(agent=deployment.agent, channel_id=job["channel"], principal=principal,
                             base_url=job.get("baseUrl", ""), session_row=session, origin=job.get("origin"))
        with acting_for(deployment.agent.slug):
            target(ctx, *job["args"], **job["kwargs"])
    except Exception:
        log.exception("background work %s.%s of channel %s failed", job.get("module"), job.get("qualname"),
                      job.get("channel"))
