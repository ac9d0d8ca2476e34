"""The order in which a transaction takes its locks, written once.

A transaction that takes several of these takes them in this order, skipping
the ones it does not need; taking two the other way round deadlocks on
PostgreSQL (on SQLite each write transaction holds the database's lock, so the
advisory locks below are taken there as nothing):

1. a message between agents (`message_locks`): the turn budget of the person's
   message it descends from, then the sending session's sends, then the
   conversation between the two sessions;
2. the principal's turn lock (`principal_turn_lock`), only under a running-turn cap;
3. tool call rows;
4. the session row (an event append or a Session update);
5. the turn row.

Steps 1 and 2 are advisory locks on names, taken through the functions here;
3 to 5 are row locks the model transitions take as they write. A message is
delivered as a turn, so its locks come before admission's. A follow-up holds
the session row while it interrupts the turn: so a move whose winner a turn
update decides makes its session writes first and rolls them back if it lost.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings

from sessions.plumbing.pglocks import lock_for_transaction

if TYPE_CHECKING:
    from sessions.models import Session


def message_locks(root: str, sender_id: str, recipient_id: str | None) -> None:
    """Step 1, for delivering a message: its sends count one after another per person's message
    (`root`), per sending session (else a fresh thread on each call would fan out unbounded), and
    per pair of sessions (`recipient_id`, None while the recipient's session does not exist yet)."""
    lock_for_transaction("agentmsg-root\0" + root)
    lock_for_transaction("agentmsg-from\0" + sender_id)
    if recipient_id is not None:
        lock_for_transaction("agentmsg\0" + "\0".join(sorted((sender_id, recipient_id))))


def principal_turn_lock(session: Session) -> None:
    """Step 2: serialize, per principal, the transactions that count its active turns and take one more."""
    if settings.AGENTSITE_MAX_RUNNING_TURNS:
        lock_for_transaction(f"turns\0{session.authenticator}\0{session.principal_id}")
