"""Bodies of the artifact routes: the files a session's turns produced, and where each downloads."""
from __future__ import annotations

from datetime import datetime
from urllib.parse import quote

from channels_app.replies.base import Page, Reply
from sessions.models import Artifact as ArtifactRow


class Artifact(Reply):
    """A file a turn produced; `downloadUrl` serves its content to the session's principal."""

    name: str
    content_type: str
    size: int
    sha256: str
    turn_id: str | None
    call_id: str | None
    download_url: str
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, row: ArtifactRow, slug: str) -> Artifact:
        return cls(
            name=row.name,
            content_type=row.content_type,
            size=row.size,
            sha256=row.sha256,
            turn_id=row.turn_id or None,
            call_id=row.call_id or None,
            download_url=artifact_path(slug, row.session_id, row.name),
            created_at=row.created_at,
            updated_at=row.updated_at,
        )


class ArtifactList(Page):
    """One page of the session's artifacts, oldest first; `nextCursor` only when another page follows."""

    artifacts: list[Artifact]
    next_cursor: str | None = None


def artifact_path(slug: str, session_id: str, name: str) -> str:
    """Where an artifact downloads, with its name percent-encoded as one path segment."""
    return f"/{slug}/v1/session/{session_id}/artifacts/{quote(name, safe='')}"
