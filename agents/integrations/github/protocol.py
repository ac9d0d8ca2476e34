"""GitHub webhooks: verify a delivery's signature and normalize it to a `RepoEvent`."""
from __future__ import annotations

from typing import Any, Mapping
from urllib.parse import parse_qs

from agents.integrations.events import (
    EventKind,
    PayloadError,
    RepoEvent,
    SignatureError,
    Subject,
    continuation_key,
    dig,
    header,
    integer,
    load_json,
    text,
)
from agents.integrations.signatures import verify_sha256_header


def verify_signature(secret: str | bytes | None, headers: Mapping[str, str], body: bytes) -> None:
    """Check X-Hub-Signature-256 (HMAC-SHA256 of the raw body). Raises SignatureError.

    The SHA-1 `X-Hub-Signature` alone is not accepted: GitHub sends both when
    a secret is set, so a delivery with only the SHA-1 one is not GitHub's.
    """
    signature = header(headers, "X-Hub-Signature-256")
    if not signature and header(headers, "X-Hub-Signature"):
        raise SignatureError("only the SHA-1 X-Hub-Signature was sent; X-Hub-Signature-256 is required")
    verify_sha256_header(secret, body, signature, header_name="X-Hub-Signature-256")


def parse_delivery(headers: Mapping[str, str], body: bytes) -> RepoEvent:
    """A delivery's headers and raw body (JSON, or form-encoded `payload=`) as a RepoEvent."""
    event = header(headers, "X-GitHub-Event")
    if not event:
        raise PayloadError("the delivery has no X-GitHub-Event header")
    content_type = (header(headers, "Content-Type") or "").lower()
    if content_type.startswith("application/x-www-form-urlencoded"):
        form = parse_qs(body.decode("utf-8", "replace"))
        if "payload" not in form:
            raise PayloadError("a form-encoded delivery without a payload field")
        data = load_json(form["payload"][0])
    else:
        data = load_json(body)
    return normalize_event(event, data, delivery_id=header(headers, "X-GitHub-Delivery") or "")


def normalize_event(event: str, data: Mapping[str, Any], *, delivery_id: str = "") -> RepoEvent:
    """Lift the fields hooks decide on out of one event's payload."""
    repo = text(dig(data, "repository", "full_name"))
    fields: dict[str, Any] = dict(
        provider="github", event=event, action=text(data.get("action")), delivery_id=delivery_id, repo=repo,
        sender_login=text(dig(data, "sender", "login")), sender_type=text(dig(data, "sender", "type")),
        installation_id=integer(dig(data, "installation", "id")), payload=data,
    )

    if event == "pull_request" or event in ("pull_request_review", "pull_request_review_comment"):
        pr = dig(data, "pull_request") or {}
        fields.update(subject=Subject.PULL_REQUEST, number=integer(pr.get("number")) or integer(data.get("number")),
                      head_sha=text(dig(pr, "head", "sha")), ref=text(dig(pr, "head", "ref")),
                      title=text(pr.get("title")), body=text(pr.get("body")), html_url=text(pr.get("html_url")))
        if event == "pull_request":
            kind = EventKind.PULL_REQUEST
        elif event == "pull_request_review_comment":
            kind = EventKind.COMMENT
            fields.update(comment=text(dig(data, "comment", "body")), comment_id=integer(dig(data, "comment", "id")),
                          html_url=text(dig(data, "comment", "html_url")) or fields["html_url"])
        else:
            kind = EventKind.OTHER
            fields.update(comment=text(dig(data, "review", "body")), conclusion=text(dig(data, "review", "state")))
    elif event in ("issue_comment", "issues"):
        issue = dig(data, "issue") or {}
        fields.update(subject=Subject.PULL_REQUEST if issue.get("pull_request") else Subject.ISSUE,
                      number=integer(issue.get("number")), title=text(issue.get("title")),
                      body=text(issue.get("body")), html_url=text(issue.get("html_url")))
        if event == "issue_comment":
            kind = EventKind.COMMENT
            fields.update(comment=text(dig(data, "comment", "body")), comment_id=integer(dig(data, "comment", "id")),
                          html_url=text(dig(data, "comment", "html_url")) or fields["html_url"])
        else:
            kind = EventKind.ISSUES
    elif event in ("check_suite", "check_run", "workflow_run"):
        kind = EventKind(event)
        run = dig(data, event) or {}
        number = integer(dig(run, "pull_requests", 0, "number"))
        fields.update(subject=Subject.PULL_REQUEST if number is not None else Subject.COMMIT, number=number,
                      head_sha=text(run.get("head_sha")),
                      ref=text(run.get("head_branch")) or text(dig(run, "check_suite", "head_branch")),
                      title=text(run.get("display_title")) or text(run.get("name")),
                      conclusion=text(run.get("conclusion")) or text(run.get("status")),
                      html_url=text(run.get("html_url")))
    elif event == "status":
        kind = EventKind.STATUS
        fields.update(subject=Subject.COMMIT, head_sha=text(data.get("sha")), conclusion=text(data.get("state")),
                      title=text(data.get("context")), body=text(data.get("description")),
                      html_url=text(data.get("target_url")), ref=text(dig(data, "branches", 0, "name")))
    elif event == "push":
        kind = EventKind.PUSH
        fields.update(subject=Subject.COMMIT, head_sha=text(data.get("after")), ref=text(data.get("ref")),
                      html_url=text(data.get("compare")),
                      title=text(dig(data, "head_commit", "message")).split("\n", 1)[0])
    else:
        kind = EventKind.OTHER

    fields["continuation_key"] = continuation_key(fields.get("subject"), repo, fields.get("number"),
                                                  fields.get("head_sha", ""))
    return RepoEvent(kind=kind, **fields)
