"""The shape every repository provider's webhook is normalized to, and the
errors verification and parsing raise."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Mapping


class WebhookError(Exception):
    """A delivery the channel must refuse; `status` is the HTTP answer to give."""

    status = 400


class SignatureError(WebhookError):
    """Missing, malformed, stale or wrong signature (or no secret configured to check it)."""

    status = 401


class PayloadError(WebhookError):
    """A signed delivery whose body cannot be read."""

    status = 400


class EventKind(StrEnum):
    PULL_REQUEST = "pull_request"   # GitHub pull_request, GitLab merge_request, Bitbucket pull requests
    COMMENT = "comment"             # on a pull request, merge request, issue or commit
    ISSUES = "issues"
    CHECK_SUITE = "check_suite"
    CHECK_RUN = "check_run"
    WORKFLOW_RUN = "workflow_run"
    STATUS = "status"
    PIPELINE = "pipeline"
    PUSH = "push"
    OTHER = "other"


class Subject(StrEnum):
    """What an event is about, which decides where a reply goes."""

    PULL_REQUEST = "pull_request"
    ISSUE = "issue"
    COMMIT = "commit"


@dataclass(frozen=True)
class RepoEvent:
    """One webhook delivery from a code host, in the fields hooks decide on.

    `continuation_key` names the conversation the event belongs to
    (`pr:owner/repo#12`, `issue:owner/repo#7`, `mr:group/project!5`,
    `commit:owner/repo@<sha>`): events with the same key continue one session.
    `payload` is the whole decoded body for anything not lifted out here.
    """

    provider: str                       # "github" | "gitlab" | "bitbucket"
    kind: EventKind
    event: str                          # the provider's own event name
    action: str = ""                    # opened, created, completed, synchronize, merged, ...
    delivery_id: str = ""
    repo: str = ""                      # owner/repo, group/subgroup/project, PROJECT/repo
    subject: Subject | None = None
    number: int | None = None           # pull request, merge request or issue number
    sender_login: str = ""
    sender_type: str = ""               # "User" | "Bot" | the provider's own word
    head_sha: str = ""
    ref: str = ""                       # head branch (pull requests) or pushed ref
    title: str = ""
    body: str = ""                      # pull request / issue description
    comment: str = ""                   # comment text (kind COMMENT)
    comment_id: int | None = None
    html_url: str = ""
    conclusion: str = ""                # check/workflow/pipeline/status outcome: success, failure, ...
    installation_id: int | None = None  # GitHub App deliveries
    continuation_key: str | None = None
    payload: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def sender_is_bot(self) -> bool:
        return self.sender_type.lower() in ("bot", "service", "app_user") or self.sender_login.endswith("[bot]")


def continuation_key(subject: Subject | None, repo: str, number: int | None = None, sha: str = "",
                     *, merge_request: bool = False) -> str | None:
    """`pr:owner/repo#12`, `mr:group/project!5`, `issue:owner/repo#7`, `commit:owner/repo@sha`."""
    if not repo:
        return None
    if subject is Subject.PULL_REQUEST and number is not None:
        return f"mr:{repo}!{number}" if merge_request else f"pr:{repo}#{number}"
    if subject is Subject.ISSUE and number is not None:
        return f"issue:{repo}#{number}"
    if subject is Subject.COMMIT and sha:
        return f"commit:{repo}@{sha}"
    return None


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header by name, whatever the case of the mapping's keys (Django's
    `request.headers` is case-insensitive; a plain dict is not)."""
    value = headers.get(name)
    if value is None:
        lowered = name.lower()
        value = next((v for k, v in headers.items() if k.lower() == lowered), None)
    return value


def load_json(body: bytes | str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PayloadError(f"the body is not JSON: {exc}") from exc
    except RecursionError:  # nested deeper than the parser goes: no delivery of a provider's is
        raise PayloadError("the body is JSON nested too deep") from None
    if not isinstance(data, dict):
        raise PayloadError("the body is not a JSON object")
    return data


def dig(data: Any, *path: str | int) -> Any:
    """data[p0][p1]... or None where any step is missing or of the wrong type."""
    for step in path:
        if isinstance(step, int):
            if not isinstance(data, list) or not -len(data) <= step < len(data):
                return None
        elif not isinstance(data, Mapping):
            return None
        data = data[step] if isinstance(step, int) else data.get(step)
        if data is None:
            return None
    return data


def text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None
