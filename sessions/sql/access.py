"""The two reads that admit a request to an agent's sessions, written out.

Every create, follow-up and stream asks which release of its agent is current
(`channels_app.ownership.get_agent`, whose loaded copy is kept per process and
checked with this narrow read) and whose a session is (`check_reader`). As
ORM queries they were a seventh of a web process's CPU on a simple turn
(building each cost some 0.5 ms; the database answered in a tenth of that).
"""
from __future__ import annotations

from django.db import connection

from agents.models import Agent
from sessions.models import Session
from sessions.sql import written_out
from sessions.sql.instances import converted

_VERSION = ("id", "active_deployment_id", "updated_at")


@written_out(orm=Agent.objects.current_version)
def agent_version(slug: str) -> tuple | None:
    """(id, active deployment id, updated_at) of agent `slug`, None if there is none."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, active_deployment_id, updated_at FROM {Agent._meta.db_table} WHERE slug = %s",
                       [slug])
        row = cursor.fetchone()
    return None if row is None else tuple(converted(Agent, connection.alias, _VERSION, row))


@written_out(orm=Session.objects.owner_and_mode)
def owner_and_mode(session_id: str, agent_slug: str) -> tuple[str, str, str] | None:
    """(principal_id, authenticator, mode) of session `session_id` of agent `agent_slug`; None if there is none."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT s.principal_id, s.authenticator, s.mode FROM {Session._meta.db_table} s "
            f"JOIN {Agent._meta.db_table} a ON a.id = s.agent_id WHERE s.id = %s AND a.slug = %s",
            [session_id, agent_slug])
        row = cursor.fetchone()
    return None if row is None else tuple(row)
