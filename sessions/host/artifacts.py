"""`ctx.host.artifacts`: files a turn produces, kept with its session.

Saving one stores the row and appends `artifact.saved` to the session's
event log in one transaction, so a reader who sees the event can download
the file. A name is unique within its session: saving it again replaces the
content (`"replaced": true` in the event). The session's principal lists and
downloads them over HTTP (`channels_app.views.artifacts`); they are deleted
with the session.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from sessions.eventlog.events import append_events
from sessions.host.checks import HostError, check_name, check_text, content_bytes, content_type_for, limit, sha256
from sessions.models import Artifact, EventType, Session


@dataclass(frozen=True)
class ArtifactInfo:
    name: str
    content_type: str
    size: int
    sha256: str
    session_id: str
    turn_id: str
    call_id: str
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: Artifact) -> ArtifactInfo:
        return cls(name=row.name, content_type=row.content_type, size=row.size, sha256=row.sha256,
                   session_id=row.session_id, turn_id=row.turn_id, call_id=row.call_id, created_at=row.created_at,
                   updated_at=row.updated_at)


def save_artifact(session: Session, name: str, content: str | bytes, *, content_type: str | None = None,
                  turn_id: str = "", call_id: str = "") -> Artifact:
    """Store an artifact of `session` and record `artifact.saved`, together or not at all.

    1. Check the name, the content and its type (HostError says what is wrong).
    2. Lock the session row: a concurrent delete then either went first (the
       session is gone: HostError) or waits until this commits.
    3. Insert or replace the row (at most AGENTSITE_ARTIFACTS_PER_SESSION names).
    4. Append the event in the same transaction; hooks and readers are told after commit.
    """
    name = check_name(name)
    data = content_bytes(content, "AGENTSITE_ARTIFACT_MAX_BYTES", f"artifact {name!r}")
    kind = content_type_for(name, content_type, isinstance(content, str))
    hooks = session.hooks()
    now = timezone.now()
    fields = {"content": data, "size": len(data), "sha256": sha256(data), "content_type": kind,
              "turn_id": turn_id, "call_id": call_id, "updated_at": now}
    with transaction.atomic():
        if Session.objects.select_for_update().filter(pk=session.pk).values_list("pk", flat=True).first() is None:
            raise HostError(f"session {session.pk!r} was deleted", "session_not_found")
        replaced = bool(Artifact.objects.filter(session=session, name=name).update(**fields))
        if not replaced:
            most = limit("AGENTSITE_ARTIFACTS_PER_SESSION")
            if Artifact.objects.filter(session=session).count() >= most:
                raise HostError(f"a session keeps at most {most} artifacts: save under an existing name to replace "
                                "one", "too_many_artifacts")
            Artifact.objects.create(session=session, name=name, created_at=now, **fields)
        saved: dict[str, Any] = {"name": name, "contentType": kind, "size": len(data), "sha256": fields["sha256"],
                                 "replaced": replaced}
        if call_id:
            saved["callId"] = call_id
        append_events(session.pk, [(EventType.ARTIFACT_SAVED, saved)], turn_id=turn_id, hooks=hooks)
    return Artifact.objects.get(session=session, name=name)


@dataclass
class Artifacts:
    """`ctx.host.artifacts`: this session's artifacts, or another session's of the agent with `session_id=`."""

    session: Session | None
    agent_id: int | None = None
    turn_id: str = ""
    call_id: str = ""

    def _session(self, session_id: str | None) -> Session:
        if session_id is None:
            if self.session is None:
                raise HostError("no session here: pass session_id= to attribute the artifact to a session")
            return self.session
        session_id = check_text(session_id, "session_id")
        found = Session.objects.select_related("agent", "deployment").filter(pk=session_id)
        if self.agent_id is not None:
            found = found.filter(agent_id=self.agent_id)  # an agent's code reaches its own conversations only
        session = found.first()
        if session is None:
            raise HostError(f"no session {session_id!r} on this agent", "session_not_found")
        return session

    def save(self, name: str, content: str | bytes, *, content_type: str | None = None,
             session_id: str | None = None) -> ArtifactInfo:
        """Store a file for the session's principal to download; text is stored as UTF-8.

        `content_type` defaults to one guessed from the name.
        """
        session = self._session(session_id)
        # The turn and call are this context's only when the artifact is this session's.
        mine = session_id is None or (self.session is not None and self.session.pk == session.pk)
        row = save_artifact(session, name, content, content_type=content_type,
                            turn_id=self.turn_id if mine else "", call_id=self.call_id if mine else "")
        return ArtifactInfo.of(row)

    def list(self, *, session_id: str | None = None) -> list[ArtifactInfo]:
        return [ArtifactInfo.of(r) for r in Artifact.objects.filter(session=self._session(session_id))]

    def read_bytes(self, name: str, *, session_id: str | None = None) -> bytes:
        row = Artifact.objects.filter(session=self._session(session_id), name=check_name(name)).first()
        if row is None:
            raise FileNotFoundError(f"no artifact {name!r} on this session")
        return row.read()

    def read(self, name: str, *, session_id: str | None = None) -> str:
        try:
            return self.read_bytes(name, session_id=session_id).decode("utf-8")
        except UnicodeDecodeError:
            raise HostError(f"artifact {name!r} is not UTF-8 text: use read_bytes()", "not_text") from None
