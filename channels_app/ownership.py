"""Who may reach a session: the one lookup every surface runs.

The HTTP views, the NDJSON/SSE stream, the websocket and the playground
pages all find a session the same way: it must belong to the agent in the
URL (404 otherwise) and to the caller (403 otherwise). Operators (staff and
the `operators` group) may also reach other principals' sessions where a route
says so (`operators=True`): to read (artifacts and reminders too), follow, decide
approvals, stop, cancel reminders and delete, never to speak in someone else's
conversation (nor to set or fire a reminder in it). Each function raises
an `APIError` carrying status, code and message; the JSON routes answer it
as is, the websocket turns the status into a close code (4404, 4403) and the
playground into a page. One query on success; the agent is only looked up
again to tell an unknown agent from an unknown session when the first found
nothing.
"""
from __future__ import annotations

from agents.models import Agent
from channels_app.doors import is_operator
from channels_app.errors import APIError
from sessions.models import Reminder, Session
from sessions.sql import access


# Agents with their active deployment, by slug, as last loaded by this process.
# Every lookup still asks the database which row is current (one narrow
# read, written out: sessions.sql.access); only the full load, the ORM's costliest query on the
# create path, is skipped while the row is unchanged. A deploy, a rollback or
# an edit moves `updated_at` or `active_deployment_id`, and so misses.
_agents: dict[str, tuple[tuple, Agent]] = {}
_AGENTS_KEPT = 256


def get_agent(slug: str) -> Agent:
    """The agent `slug` with its active deployment (404 if there is none). Treat it as read-only: it is shared."""
    current = access.agent_version(slug)
    if current is None:
        raise APIError(404, "agent_not_found", f"no agent {slug!r} on this server")
    cached = _agents.get(slug)
    if cached is not None and cached[0] == current:
        return cached[1]
    agent = Agent.objects.select_related("active_deployment").filter(slug=slug).first()
    if agent is None:  # deleted in between
        raise APIError(404, "agent_not_found", f"no agent {slug!r} on this server")
    if len(_agents) >= _AGENTS_KEPT:
        _agents.clear()
    _agents[slug] = (current, agent)  # keyed by the narrow row as read
    return agent


def require_owner(session: Session, principal, *, operators: bool = False) -> Session:
    if not session.is_owned_by(principal) and not (operators and is_operator(principal)):
        raise APIError(403, "forbidden", "this session belongs to another principal")
    return session


def get_owned_session(slug: str, session_id: str, principal, *, operators: bool = False) -> Session:
    """The session `session_id` of agent `slug`, if `principal` owns it or, with `operators`,
    is an operator (else 404 or 403)."""
    session = Session.objects.select_related("agent", "deployment").filter(pk=session_id, agent__slug=slug).first()
    if session is None:
        get_agent(slug)
        raise APIError(404, "session_not_found", f"no session {session_id!r} on agent {slug!r}")
    return require_owner(session, principal, operators=operators)


def check_reader(slug: str, session_id: str, principal) -> str:
    """As get_owned_session, for a reader that needs no more than the answer and
    the session's mode (which it returns): three columns, not the session with
    its agent and deployment. Operators may read any session."""
    row = access.owner_and_mode(session_id, slug)
    if row is None:
        get_agent(slug)
        raise APIError(404, "session_not_found", f"no session {session_id!r} on agent {slug!r}")
    if row[:2] != (principal.principal_id, principal.authenticator) and not is_operator(principal):
        raise APIError(403, "forbidden", "this session belongs to another principal")
    return row[2]


def get_session_by_token(agent: Agent, token: str, principal) -> Session:
    """The session of `agent` a continuation token names, if `principal` owns it (else 404 or 403).

    Staleness is the admission's business (409): this only finds the conversation.
    """
    session_id = Session.id_from_token(token)
    session = Session.objects.select_related("agent", "deployment").filter(pk=session_id or "", agent=agent).first()
    if session is None:
        raise APIError(404, "session_not_found", "no session on this agent matches that continuation token")
    return require_owner(session, principal)


def get_owned_reminder(slug: str, reminder_id: str, principal, *, operators: bool = False) -> Reminder:
    """A reminder of agent `slug` bound to a session `principal` owns or, with `operators`,
    to any session if `principal` is an operator (else 404 or 403)."""
    reminder = Reminder.objects.select_related("session").filter(pk=reminder_id, agent__slug=slug).first()
    if reminder is None:
        get_agent(slug)
        raise APIError(404, "reminder_not_found", f"no reminder {reminder_id!r} on agent {slug!r}")
    if reminder.session is None or not (reminder.session.is_owned_by(principal) or (operators and is_operator(principal))):
        raise APIError(403, "forbidden", "this reminder belongs to another principal's session")
    return reminder
