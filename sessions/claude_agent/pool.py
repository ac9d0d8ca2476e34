"""Runtime children kept alive between a session's turns, in the worker process that ran them.

A follow-up that comes within AGENTSITE_CLAUDE_AGENT_KEEP_SECONDS goes to
the same child (the SDK's streaming input): no new process, no transcript
to resume, the runtime's own context as it left it. Another worker of this
machine that dequeues it hands it to this one (sessions.turn.affinity). A
child is taken only for the turn that follows the one it ran: the
session's conversation must have the length it left it with, and the
session the same release, model and working directory; otherwise (another
process ran a turn meanwhile, a handoff) it is closed and the turn starts
a child that resumes from the stored conversation. At most
AGENTSITE_CLAUDE_AGENT_KEPT children are kept per process, the least
recently used closed first; a thread closes those idle too long, and those
whose session a later turn has moved on from in another process (its
child here would never be taken). A forked process keeps none of its
parent's.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection

from sessions.claude_agent.bridge import Child
from sessions.claude_agent.home import RunHome
from sessions.claude_agent.proxy import ModelProxy
from sessions.models import Turn

log = logging.getLogger(__name__)

REAP_SECONDS = 5.0


@dataclass
class Kept:
    child: Child
    home: RunHome
    proxy: ModelProxy
    cwd: str
    key: tuple[Any, ...] = ()  # what the session must still be: its release, model and working directory
    seen: int = 0  # the conversation's length when its turn ended
    cost: float = 0.0  # the runtime's session's cost so far, as the SDK reports it (a running total)
    limit: float | None = None  # the running total its runtime stops at (a budget's), set when it started
    turn_created: datetime | None = None  # when the turn it ran last was created
    used: float = field(default_factory=time.monotonic)

    def close(self) -> None:
        try:
            self.child.close()
        finally:
            self.proxy.__exit__(None, None, None)
            self.home.remove()


_lock = threading.Lock()
_kept: OrderedDict[str, Kept] = OrderedDict()
_reaper_pid: int | None = None


def take(session_id: str, key: tuple[Any, ...], seen: int) -> Kept | None:
    """The child kept for the session's next turn, if it is still that turn's to take."""
    with _lock:
        kept = _kept.pop(session_id, None)
    if kept is None:
        return None
    if kept.key == key and kept.seen == seen and kept.child.alive():
        return kept
    kept.close()
    return None


def keep(session_id: str, kept: Kept) -> None:
    global _reaper_pid
    if settings.AGENTSITE_CLAUDE_AGENT_KEEP_SECONDS <= 0 or settings.AGENTSITE_CLAUDE_AGENT_KEPT <= 0:
        kept.close()
        return
    kept.used = time.monotonic()
    evicted = []
    with _lock:
        _kept[session_id] = kept
        while len(_kept) > settings.AGENTSITE_CLAUDE_AGENT_KEPT:
            evicted.append(_kept.popitem(last=False)[1])
        if _reaper_pid != os.getpid():
            _reaper_pid = os.getpid()
            threading.Thread(target=_reap, name="claude-agent-reaper", daemon=True).start()
    for old in evicted:  # closed aside: the turn that kept its child ends without waiting for this one's
        close_aside(old)


def close_aside(kept: Kept) -> None:
    """Close a child on a thread of its own (closing waits for the runtime to end)."""
    threading.Thread(target=kept.close, name="claude-agent-close", daemon=True).start()


def kept_sessions() -> list[str]:
    with _lock:
        return list(_kept)


def close_all() -> None:
    with _lock:
        kept = list(_kept.values())
        _kept.clear()
    for one in kept:
        one.close()


def _reap() -> None:
    while True:
        time.sleep(REAP_SECONDS)
        try:
            reap()
        except Exception:  # the next round tries again: the thread must outlive a bad one
            log.exception("closing kept Claude Agent SDK children failed")


def reap() -> None:
    """Close the children idle too long, and those whose session moved on elsewhere."""
    deadline = time.monotonic() - settings.AGENTSITE_CLAUDE_AGENT_KEEP_SECONDS
    try:
        overtaken = _overtaken()
    except DatabaseError:  # read again next round
        log.warning("cannot read which kept children's sessions moved on", exc_info=True)
        overtaken = {}
    finally:
        connection.close()  # the reaper's thread holds no connection between rounds
    with _lock:  # a child taken and kept again since `overtaken` was read ran a newer turn: it stays
        gone = [sid for sid, kept in _kept.items()
                if kept.used < deadline or (sid in overtaken and overtaken[sid] == kept.turn_created)]
        expired = [_kept.pop(sid) for sid in gone]
    for kept in expired:
        try:
            kept.close()
        except Exception:  # one child that will not close must not stop the others closing
            log.exception("a kept Claude Agent SDK child did not close")


def _overtaken() -> dict[str, datetime]:
    """Kept sessions a later turn has ended in, in another process (their child will never be taken),
    each with the turn its child ran, as read."""
    with _lock:
        last = {sid: kept.turn_created for sid, kept in _kept.items() if kept.turn_created is not None}
    if not last:
        return {}
    ended = Turn.objects.filter(session_id__in=list(last), status__in=Turn.FINISHED,
                                created_at__gt=min(last.values())).values_list("session_id", "created_at")
    return {sid: last[sid] for sid, created in ended if created > last[sid]}


def _forget() -> None:
    global _lock, _reaper_pid
    _lock = threading.Lock()
    _kept.clear()  # the parent's children, threads and sockets: not this process's to use
    _reaper_pid = None


os.register_at_fork(after_in_child=_forget)
