"""Deleting a session: stop its turn, cancel its reminders, then the rows and its workspace.

The session's events, turns, tool calls, artifacts (content included: it is
stored in the database) and session-scoped key-value entries go with it, by
cascade.

Apart from admission because it needs the reminders, which admit their
own follow-ups through admission.
"""
from __future__ import annotations

import logging

from django.db import transaction

from sessions.eventlog import wakeups
from sessions.turn.admission import stop_session
from sessions.turn.lifecycle import refill_slots
from sessions.models import Reminder, Session, Turn
from sessions.principal import Principal
from sessions.timers.reminders import cancel_session_reminders
from sessions.workspaces.store import delete_workspace

log = logging.getLogger(__name__)

def delete_session(session: Session, by: Principal | None = None, *, unless_in_flight: bool = False) -> bool:
    """Delete `session`; False if it was gone already (or, with `unless_in_flight`, busy).

    An operator (`by`) deleting someone else's session is logged: not as
    `operator.acted`, which the session's log would lose with it, and not as a
    row of its own: the server's log is the record that outlives the session.
    `unless_in_flight` (retention): a session with a queued or running turn is
    left alone instead of stopped (False), and its reminders go with it
    instead of staying behind as cancelled rows.
    """
    if by is not None and by.oversees(session):  # warning: the level the server logs by default
        log.warning("operator %s (%s) deleted session %s of agent %s, started by %s (%s)", by.principal_id,
                    by.authenticator, session.id, session.agent_id, session.principal_id, session.authenticator)
    if not unless_in_flight:
        stop_session(session)
        cancel_session_reminders(session)
    with transaction.atomic():
        # Lock the row before the cascade is collected. A worker still finishing
        # the turn would otherwise add events after the collection, and on
        # PostgreSQL the delete then fails its deferred foreign-key check; with
        # the lock, the worker's next append waits and finds the session gone.
        if Session.objects.select_for_update().filter(pk=session.pk).values_list("pk", flat=True).first() is None:
            return False
        if unless_in_flight:
            # Under the lock: a turn admitted from here on waits for it and finds the session gone.
            if Turn.in_flight(session.pk):
                return False
            cancel_session_reminders(session)
            Reminder.objects.filter(session=session.pk).delete()
        Session.objects.filter(pk=session.pk).delete()
        # Its followers end now rather than at the next safety-net pass (sessions.eventlog.feeds).
        wakeups.announce(session.pk, wakeups.DELETED)
    # A turn of the session that held one of its principal's running slots will not settle:
    # the principal's turns waiting for the cap take the slot now.
    refill_slots(session.principal_id, session.authenticator)
    # After the rows: a turn still finishing finds its session gone and stops writing here.
    delete_workspace(session.id)
    return True
