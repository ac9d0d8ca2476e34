from __future__ import annotations

import hashlib
import hmac
import json
from urllib.parse import urlencode

import pytest

from agents.integrations.events import EventKind, PayloadError, SignatureError, Subject
from agents.integrations.github import GitHubConfig, normalize_event, parse_delivery, verify_signature

from .conftest import fixture_bytes

SECRET = "webhook-secret-123"


def signed(body: bytes, secret: str = SECRET) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature-256": f"sha256={digest}"}


def test_githubs_published_test_vector_verifies():
    headers = {"X-Hub-Signature-256": "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"}
    verify_signature("It's a Secret to Everybody", headers, b"Hello, World!")


def test_a_valid_signature_verifies_whatever_the_header_case():
    body = fixture_bytes("github/pull_request.opened.json")
    verify_signature(SECRET, {k.lower(): v for k, v in signed(body).items()}, body)


def test_an_altered_body_is_refused():
    body = fixture_bytes("github/pull_request.opened.json")
    with pytest.raises(SignatureError, match="does not match"):
        verify_signature(SECRET, signed(body), body.replace(b'"opened"', b'"closed"'))


def test_an_altered_signature_is_refused():
    body = b'{"zen": "Keep it logically awesome."}'
    header = signed(body)["X-Hub-Signature-256"]
    flipped = header[:-1] + ("0" if header[-1] != "0" else "1")
    with pytest.raises(SignatureError, match="does not match"):
        verify_signature(SECRET, {"X-Hub-Signature-256": flipped}, body)


def test_a_signature_made_with_another_secret_is_refused():
    body = b"{}"
    with pytest.raises(SignatureError):
        verify_signature(SECRET, signed(body, "other-secret"), body)


def test_a_sha1_only_signature_is_refused():
    body = b"{}"
    sha1 = "sha1=" + hmac.new(SECRET.encode(), body, hashlib.sha1).hexdigest()
    with pytest.raises(SignatureError, match="only the SHA-1"):
        verify_signature(SECRET, {"X-Hub-Signature": sha1}, body)


@pytest.mark.parametrize("value", ["", "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
                                   "sha1=757107ea", "sha256="])
def test_a_malformed_signature_is_refused(value):
    with pytest.raises(SignatureError):
        verify_signature(SECRET, {"X-Hub-Signature-256": value}, b"{}")


def test_a_missing_signature_is_refused():
    with pytest.raises(SignatureError, match="no X-Hub-Signature-256"):
        verify_signature(SECRET, {}, b"{}")


@pytest.mark.parametrize("secret", [None, ""])
def test_without_a_configured_secret_nothing_verifies(secret):
    body = b"{}"
    with pytest.raises(SignatureError, match="no webhook secret"):
        verify_signature(secret, signed(body, "x"), body)


def delivery(event: str, fixture: str) -> tuple[dict[str, str], bytes]:
    body = fixture_bytes(fixture)
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
               "Content-Type": "application/json", **signed(body)}
    return headers, body


def test_a_pull_request_opened_delivery_normalizes():
    headers, body = delivery("pull_request", "github/pull_request.opened.json")
    verify_signature(SECRET, headers, body)
    event = parse_delivery(headers, body)
    assert event.kind is EventKind.PULL_REQUEST and event.action == "opened"
    assert (event.provider, event.event, event.delivery_id) == ("github", "pull_request",
                                                                 "72d3162e-cc78-11e3-81ab-4c9367dc0958")
    assert (event.repo, event.subject, event.number) == ("octo-org/widgets", Subject.PULL_REQUEST, 12)
    assert (event.sender_login, event.sender_type, event.sender_is_bot) == ("mona", "User", False)
    assert event.head_sha == "6dcb09b5b57875f334f61aebed695e2e4193db5e" and event.ref == "retry-fetch"
    assert event.title == "Add retry to the sprocket fetcher"
    assert event.body.startswith("Fetching sprockets fails")
    assert event.html_url == "https://github.com/octo-org/widgets/pull/12"
    assert event.installation_id == 48213
    assert event.continuation_key == "pr:octo-org/widgets#12"
    assert event.payload["pull_request"]["commits"] == 2


def test_a_comment_on_a_pull_request_continues_the_pull_requests_conversation():
    event = parse_delivery(*delivery("issue_comment", "github/issue_comment.created.json"))
    assert (event.kind, event.action, event.subject) == (EventKind.COMMENT, "created", Subject.PULL_REQUEST)
    assert event.comment == "@widgets-bot can you review the backoff constants?"
    assert event.comment_id == 1983374811
    assert event.html_url.endswith("#issuecomment-1983374811")
    assert event.sender_login == "hubot"
    assert event.continuation_key == "pr:octo-org/widgets#12"


def test_a_comment_on_an_issue_continues_the_issue():
    data = json.loads(fixture_bytes("github/issue_comment.created.json"))
    del data["issue"]["pull_request"]
    data["issue"]["number"] = 7
    event = normalize_event("issue_comment", data)
    assert event.subject is Subject.ISSUE and event.continuation_key == "issue:octo-org/widgets#7"


def test_an_issues_delivery_normalizes():
    event = parse_delivery(*delivery("issues", "github/issues.opened.json"))
    assert (event.kind, event.action, event.number) == (EventKind.ISSUES, "opened", 7)
    assert event.title == "Sprockets come back upside down"
    assert event.continuation_key == "issue:octo-org/widgets#7"


def test_a_review_comment_is_a_comment_on_the_pull_request():
    data = json.loads(fixture_bytes("github/pull_request.opened.json"))
    data.update(action="created", comment={"id": 99, "body": "nit: rename", "html_url": "https://x/r99"})
    event = normalize_event("pull_request_review_comment", data)
    assert (event.kind, event.comment, event.comment_id) == (EventKind.COMMENT, "nit: rename", 99)
    assert event.continuation_key == "pr:octo-org/widgets#12"


def test_a_failed_check_run_on_a_pull_request_normalizes():
    event = parse_delivery(*delivery("check_run", "github/check_run.completed.json"))
    assert (event.kind, event.action, event.conclusion) == (EventKind.CHECK_RUN, "completed", "failure")
    assert event.title == "test (3.11)" and event.ref == "retry-fetch"
    assert event.head_sha == "6dcb09b5b57875f334f61aebed695e2e4193db5e"
    assert event.html_url.endswith("/job/22187354921")
    assert event.sender_is_bot
    assert event.continuation_key == "pr:octo-org/widgets#12"


def test_a_workflow_run_without_a_pull_request_continues_on_its_commit():
    event = parse_delivery(*delivery("workflow_run", "github/workflow_run.completed.json"))
    assert (event.kind, event.conclusion, event.ref) == (EventKind.WORKFLOW_RUN, "success", "main")
    assert event.title == "Merge pull request #11 from octo-org/faster-cogs"
    assert (event.subject, event.number) == (Subject.COMMIT, None)
    assert event.continuation_key == "commit:octo-org/widgets@d6fde92930d4715a2b49857d24b940956b26d2d3"


def test_a_check_suite_uses_its_pull_request():
    data = json.loads(fixture_bytes("github/check_run.completed.json"))
    suite = dict(data["check_run"]["check_suite"], pull_requests=data["check_run"]["pull_requests"])
    event = normalize_event("check_suite", {**data, "check_suite": suite})
    assert (event.kind, event.conclusion, event.number) == (EventKind.CHECK_SUITE, "failure", 12)


def test_a_status_delivery_normalizes():
    event = parse_delivery(*delivery("status", "github/status.json"))
    assert (event.kind, event.conclusion, event.title) == (EventKind.STATUS, "failure", "ci/legacy")
    assert event.html_url == "https://ci.example.com/builds/4411" and event.ref == "retry-fetch"
    assert event.continuation_key == "commit:octo-org/widgets@6dcb09b5b57875f334f61aebed695e2e4193db5e"


def test_other_events_are_kept_as_other():
    event = normalize_event("ping", {"zen": "Design for failure.", "hook_id": 1,
                                     "repository": {"full_name": "octo-org/widgets"}})
    assert (event.kind, event.repo, event.continuation_key) == (EventKind.OTHER, "octo-org/widgets", None)


def test_a_form_encoded_delivery_is_read_from_its_payload_field():
    payload = fixture_bytes("github/issues.opened.json").decode()
    body = urlencode({"payload": payload}).encode()
    headers = {"X-GitHub-Event": "issues", "Content-Type": "application/x-www-form-urlencoded", **signed(body)}
    verify_signature(SECRET, headers, body)
    assert parse_delivery(headers, body).number == 7


def test_a_delivery_without_an_event_header_or_with_a_broken_body_is_a_payload_error():
    with pytest.raises(PayloadError, match="X-GitHub-Event"):
        parse_delivery({}, b"{}")
    with pytest.raises(PayloadError, match="not JSON"):
        parse_delivery({"X-GitHub-Event": "push"}, b"{nope")
    with pytest.raises(PayloadError, match="not a JSON object"):
        parse_delivery({"X-GitHub-Event": "push"}, b"[1, 2]")


def test_the_config_reads_the_secret_at_call_time_and_never_shows_it():
    environ = {"GITHUB_WEBHOOK_SECRET": "s3cret-value", "GITHUB_TOKEN": "ghp_tokenvalue"}
    config = GitHubConfig(environ=environ)
    assert config.webhook_secret() == "s3cret-value"
    environ["GITHUB_WEBHOOK_SECRET"] = "rotated"
    assert config.webhook_secret() == "rotated"
    shown = repr(config) + json.dumps(config.describe())
    assert "rotated" not in shown and "ghp_tokenvalue" not in shown
    assert config.describe()["token_env"] == {"env": "GITHUB_TOKEN", "set": True}
    assert config.describe()["app_id_env"] == {"env": "GITHUB_APP_ID", "set": False}
    assert repr(config.auth()) == "TokenAuth()"


def test_the_config_names_other_variables_and_an_enterprise_url():
    config = GitHubConfig(webhook_secret_env="ACME_GH_SECRET", api_url="https://ghe.acme.test/api/v3/",
                          environ={"ACME_GH_SECRET": "x", "GITHUB_WEBHOOK_SECRET": "y"})
    assert config.webhook_secret() == "x"
    assert config.api_base() == "https://ghe.acme.test/api/v3"
    assert GitHubConfig(environ={"GITHUB_API_URL": "https://ghe.other.test/api/v3"}).api_base() == \
        "https://ghe.other.test/api/v3"
    assert GitHubConfig(environ={}).api_base() == "https://api.github.com"
