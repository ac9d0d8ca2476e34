"""Bitbucket Cloud and Bitbucket Data Center: verify and normalize repository
webhook deliveries (the client that replies is in `client`).

Both editions sign with `X-Hub-Signature: sha256=<HMAC-SHA256 of the body>`
(the same header name GitHub uses for SHA-1, but SHA-256 here) and name the
event in `X-Event-Key`. Their payloads differ (`pullrequest` vs
`pullRequest`, `pullrequest:created` vs `pr:opened`); both normalize to the
same RepoEvent, and one client answers on either edition.
"""
from __future__ import annotations

from typing import Any, Literal, Mapping

from agents.integrations.events import (
    EventKind,
    PayloadError,
    RepoEvent,
    Subject,
    continuation_key,
    dig,
    header,
    integer,
    load_json,
    text,
)
from agents.integrations.signatures import verify_sha256_header

Edition = Literal["cloud", "datacenter"]
CLOUD_ACTIONS = {
    "pullrequest:created": (EventKind.PULL_REQUEST, "opened"),
    "pullrequest:updated": (EventKind.PULL_REQUEST, "updated"),
    "pullrequest:fulfilled": (EventKind.PULL_REQUEST, "merged"),
    "pullrequest:rejected": (EventKind.PULL_REQUEST, "closed"),
    "pullrequest:approved": (EventKind.PULL_REQUEST, "approved"),
    "pullrequest:unapproved": (EventKind.PULL_REQUEST, "unapproved"),
    "pullrequest:changes_request_created": (EventKind.PULL_REQUEST, "changes_requested"),
    "pullrequest:comment_created": (EventKind.COMMENT, "created"),
    "pullrequest:comment_updated": (EventKind.COMMENT, "edited"),
    "pullrequest:comment_deleted": (EventKind.COMMENT, "deleted"),
}
DATA_CENTER_ACTIONS = {
    "pr:opened": (EventKind.PULL_REQUEST, "opened"),
    "pr:from_ref_updated": (EventKind.PULL_REQUEST, "synchronize"),
    "pr:modified": (EventKind.PULL_REQUEST, "updated"),
    "pr:merged": (EventKind.PULL_REQUEST, "merged"),
    "pr:declined": (EventKind.PULL_REQUEST, "closed"),
    "pr:deleted": (EventKind.PULL_REQUEST, "deleted"),
    "pr:reviewer:approved": (EventKind.PULL_REQUEST, "approved"),
    "pr:reviewer:unapproved": (EventKind.PULL_REQUEST, "unapproved"),
    "pr:reviewer:needs_work": (EventKind.PULL_REQUEST, "changes_requested"),
    "pr:reviewer:changes_requested": (EventKind.PULL_REQUEST, "changes_requested"),
    "pr:comment:added": (EventKind.COMMENT, "created"),
    "pr:comment:edited": (EventKind.COMMENT, "edited"),
    "pr:comment:deleted": (EventKind.COMMENT, "deleted"),
}
# actor.type: Cloud "user" / "app_user" (apps and access tokens); Data Center "NORMAL" / "SERVICE".
SENDER_TYPES = {"user": "User", "app_user": "Bot", "NORMAL": "User", "SERVICE": "Bot"}


def verify_signature(secret: str | bytes | None, headers: Mapping[str, str], body: bytes) -> None:
    """Check X-Hub-Signature (sha256=HMAC of the raw body), as both editions send it."""
    verify_sha256_header(secret, body, header(headers, "X-Hub-Signature"), header_name="X-Hub-Signature")


def edition_of(event_key: str, data: Mapping[str, Any]) -> Edition:
    """Data Center puts `eventKey` in the body and uses `pr:` keys; Cloud does neither."""
    if "eventKey" in data or event_key.startswith("pr:") or event_key in ("repo:refs_changed", "diagnostics:ping"):
        return "datacenter"
    return "cloud"


def parse_delivery(headers: Mapping[str, str], body: bytes) -> RepoEvent:
    data = load_json(body)
    key = header(headers, "X-Event-Key") or text(data.get("eventKey"))
    if not key:
        raise PayloadError("the delivery has no X-Event-Key header")
    delivery_id = header(headers, "X-Request-UUID") or header(headers, "X-Request-Id") or ""
    return normalize_event(key, data, delivery_id=delivery_id)


def normalize_event(event_key: str, data: Mapping[str, Any], *, delivery_id: str = "") -> RepoEvent:
    if edition_of(event_key, data) == "datacenter":
        return normalize_data_center(event_key, data, delivery_id)
    return normalize_cloud(event_key, data, delivery_id)


def normalize_cloud(key: str, data: Mapping[str, Any], delivery_id: str) -> RepoEvent:
    repo = text(dig(data, "repository", "full_name"))
    actor = dig(data, "actor") or {}
    fields: dict[str, Any] = dict(
        provider="bitbucket", event=key, delivery_id=delivery_id, repo=repo,
        sender_login=text(actor.get("nickname")) or text(actor.get("display_name")),
        sender_type=SENDER_TYPES.get(text(actor.get("type")), text(actor.get("type"))), payload=data,
    )
    kind, action = CLOUD_ACTIONS.get(key, (EventKind.OTHER, key.partition(":")[2]))
    if key.startswith("pullrequest:"):
        pr = dig(data, "pullrequest") or {}
        fields.update(subject=Subject.PULL_REQUEST, number=integer(pr.get("id")), title=text(pr.get("title")),
                      body=text(pr.get("description")), html_url=text(dig(pr, "links", "html", "href")),
                      head_sha=text(dig(pr, "source", "commit", "hash")), ref=text(dig(pr, "source", "branch", "name")))
        if kind is EventKind.COMMENT:
            fields.update(comment=text(dig(data, "comment", "content", "raw")),
                          comment_id=integer(dig(data, "comment", "id")),
                          html_url=text(dig(data, "comment", "links", "html", "href")) or fields["html_url"])
    elif key == "repo:push":
        kind, action = EventKind.PUSH, "pushed"
        change = dig(data, "push", "changes", -1) or {}
        new = change.get("new") or {}
        fields.update(subject=Subject.COMMIT, head_sha=text(dig(new, "target", "hash")), ref=text(new.get("name")),
                      title=text(dig(new, "target", "message")).split("\n", 1)[0],
                      html_url=text(dig(new, "links", "html", "href")))
    fields.update(kind=kind, action=action)
    fields["continuation_key"] = continuation_key(fields.get("subject"), repo, fields.get("number"),
                                                  fields.get("head_sha", ""))
    return RepoEvent(**fields)


def data_center_repo(repository: Any) -> str:
    key, slug = text(dig(repository, "project", "key")), text(dig(repository, "slug"))
    return f"{key}/{slug}" if key and slug else ""


def normalize_data_center(key: str, data: Mapping[str, Any], delivery_id: str) -> RepoEvent:
    actor = dig(data, "actor") or {}
    fields: dict[str, Any] = dict(
        provider="bitbucket", event=key, delivery_id=delivery_id,
        sender_login=text(actor.get("name")) or text(actor.get("slug")),
        sender_type=SENDER_TYPES.get(text(actor.get("type")), text(actor.get("type"))), payload=data,
    )
    kind, action = DATA_CENTER_ACTIONS.get(key, (EventKind.OTHER, key.rpartition(":")[2]))
    if key.startswith("pr:"):
        pr = dig(data, "pullRequest") or {}
        fields.update(repo=data_center_repo(dig(pr, "toRef", "repository")), subject=Subject.PULL_REQUEST,
                      number=integer(pr.get("id")), title=text(pr.get("title")), body=text(pr.get("description")),
                      html_url=text(dig(pr, "links", "self", 0, "href")),
                      head_sha=text(dig(pr, "fromRef", "latestCommit")), ref=text(dig(pr, "fromRef", "displayId")))
        if kind is EventKind.COMMENT:
            fields.update(comment=text(dig(data, "comment", "text")), comment_id=integer(dig(data, "comment", "id")))
    elif key == "repo:refs_changed":
        kind, action = EventKind.PUSH, "pushed"
        change = dig(data, "changes", -1) or {}
        fields.update(repo=data_center_repo(data.get("repository")), subject=Subject.COMMIT,
                      head_sha=text(change.get("toHash")), ref=text(dig(change, "ref", "id")))
    else:
        fields.update(repo=data_center_repo(data.get("repository")))
    fields.update(kind=kind, action=action)
    fields["continuation_key"] = continuation_key(fields.get("subject"), fields["repo"], fields.get("number"),
                                                  fields.get("head_sha", ""))
    return RepoEvent(**fields)
