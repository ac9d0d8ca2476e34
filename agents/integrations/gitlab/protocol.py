"""GitLab project webhooks: check a delivery's secret token and normalize it to a `RepoEvent`."""
from __future__ import annotations

import re
from typing import Any, Mapping

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
from agents.integrations.signatures import verify_shared_token

# Users GitLab creates for project and group access tokens.
TOKEN_BOT = re.compile(r"(?:project|group)_\d+_bot(?:_[0-9a-f]+)?")
# GitLab's verbs, in the vocabulary the other providers share.
MERGE_REQUEST_ACTIONS = {"open": "opened", "close": "closed", "reopen": "reopened", "merge": "merged",
                         "update": "updated", "approved": "approved", "unapproved": "unapproved",
                         "approval": "approved", "unapproval": "unapproved"}
NOTE_ACTIONS = {"create": "created", "update": "edited"}


def verify_token(expected: str | None, headers: Mapping[str, str]) -> None:
    """Check X-Gitlab-Token against the configured secret token. Raises SignatureError."""
    verify_shared_token(expected, header(headers, "X-Gitlab-Token"), header_name="X-Gitlab-Token")


def parse_delivery(headers: Mapping[str, str], body: bytes) -> RepoEvent:
    data = load_json(body)
    event = header(headers, "X-Gitlab-Event") or ""
    if not event and not data.get("object_kind"):
        raise PayloadError("the delivery has neither an X-Gitlab-Event header nor an object_kind")
    return normalize_event(data, event=event, delivery_id=header(headers, "X-Gitlab-Event-UUID") or "")


def normalize_event(data: Mapping[str, Any], *, event: str = "", delivery_id: str = "") -> RepoEvent:
    """Lift the fields hooks decide on out of one hook payload (by its object_kind)."""
    kind_name = text(data.get("object_kind")) or text(data.get("event_name"))
    attributes = dig(data, "object_attributes") or {}
    repo = text(dig(data, "project", "path_with_namespace"))
    login = text(dig(data, "user", "username")) or text(data.get("user_username"))
    fields: dict[str, Any] = dict(
        provider="gitlab", event=event or kind_name, delivery_id=delivery_id, repo=repo, sender_login=login,
        sender_type="Bot" if TOKEN_BOT.fullmatch(login) else "User" if login else "", payload=data,
    )
    merge_request = False

    if kind_name == "merge_request":
        kind = EventKind.PULL_REQUEST
        action = text(attributes.get("action"))
        # An update that moved the source branch is new commits, as GitHub's synchronize.
        if action == "update" and attributes.get("oldrev"):
            action = "synchronize"
        fields.update(action=MERGE_REQUEST_ACTIONS.get(action, action), subject=Subject.PULL_REQUEST,
                      number=integer(attributes.get("iid")), title=text(attributes.get("title")),
                      body=text(attributes.get("description")), html_url=text(attributes.get("url")),
                      head_sha=text(dig(attributes, "last_commit", "id")), ref=text(attributes.get("source_branch")))
        merge_request = True
    elif kind_name == "note":
        kind = EventKind.COMMENT
        noteable = text(attributes.get("noteable_type"))
        fields.update(action=NOTE_ACTIONS.get(text(attributes.get("action")), text(attributes.get("action"))) or "created",
                      comment=text(attributes.get("note")), comment_id=integer(attributes.get("id")),
                      html_url=text(attributes.get("url")))
        if noteable == "MergeRequest":
            mr = dig(data, "merge_request") or {}
            fields.update(subject=Subject.PULL_REQUEST, number=integer(mr.get("iid")), title=text(mr.get("title")),
                          body=text(mr.get("description")), head_sha=text(dig(mr, "last_commit", "id")),
                          ref=text(mr.get("source_branch")))
            merge_request = True
        elif noteable == "Issue":
            issue = dig(data, "issue") or {}
            fields.update(subject=Subject.ISSUE, number=integer(issue.get("iid")), title=text(issue.get("title")),
                          body=text(issue.get("description")))
        elif noteable == "Commit":
            fields.update(subject=Subject.COMMIT, head_sha=text(dig(data, "commit", "id")))
    elif kind_name in ("issue", "work_item"):
        kind = EventKind.ISSUES
        action = text(attributes.get("action"))
        fields.update(action=MERGE_REQUEST_ACTIONS.get(action, action), subject=Subject.ISSUE,
                      number=integer(attributes.get("iid")), title=text(attributes.get("title")),
                      body=text(attributes.get("description")), html_url=text(attributes.get("url")))
    elif kind_name == "pipeline":
        kind = EventKind.PIPELINE
        number = integer(dig(data, "merge_request", "iid"))
        fields.update(action=text(attributes.get("status")), conclusion=text(attributes.get("status")),
                      head_sha=text(attributes.get("sha")), ref=text(attributes.get("ref")),
                      html_url=text(attributes.get("url")), title=text(dig(data, "commit", "title")),
                      subject=Subject.PULL_REQUEST if number is not None else Subject.COMMIT, number=number)
        merge_request = number is not None
    elif kind_name in ("push", "tag_push"):
        kind = EventKind.PUSH
        fields.update(action="pushed", subject=Subject.COMMIT, head_sha=text(data.get("after")),
                      ref=text(data.get("ref")), title=text(dig(data, "commits", -1, "title")),
                      html_url=text(dig(data, "commits", -1, "url")) or text(dig(data, "project", "web_url")))
    else:
        kind = EventKind.OTHER
        fields.update(action=text(attributes.get("action")))

    fields["continuation_key"] = continuation_key(fields.get("subject"), repo, fields.get("number"),
                                                  fields.get("head_sha", ""), merge_request=merge_request)
    return RepoEvent(kind=kind, **fields)
