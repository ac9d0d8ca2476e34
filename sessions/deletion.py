"""Deleting a session: stop its turn, cancel its reminders, then the rows and its workspace.

The session's events, turns, tool calls, artifacts (content included: it is
stored in the database) and session-scoped key-value entries go with it, by
cascade.

Apart from admission because it needs the reminders, which admit their
own follow-ups through admission.
"""
from __future__ import annotations

from django.db import transaction

from sessions.admission import stop_session
from sessions.models import Session
from sessions.reminders import cancel_session_reminders
from sessions.workspaces import delete_workspace


def delete_session(session: Session) -> None:
    stop_session(session)
    cancel_session_reminders(session)
    with transaction.atomic():
        # Lock the row before the cascade is collected. A worker still finishing
        # the turn would otherwise add events after the collection, and on
        # PostgreSQL the delete then fails its deferred foreign-key check; with
        # the lock, the worker's next append waits and finds the session gone.
        Session.objects.select_for_update().filter(pk=session.pk).values_list("pk", flat=True).first()
        Session.objects.filter(pk=session.pk).delete()
    # After the rows: a turn still finishing finds its session gone and stops writing here.
    delete_workspace(session.id)
