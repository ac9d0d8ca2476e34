"""GitHub channels in-process: what a delivery gets back, which turns it starts, and the
replies that reach a (loopback) provider API. GitLab, Bitbucket, /info and replays:
test_repo_channels_other."""
from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from django.test import Client

from sessions.models import Session, Turn
from tests.agents.integrations.conftest import fixture_bytes

from .repo_channel_support import (  # noqa: F401 (api, calls, repos: fixtures)
    LOCAL, REMOTE, SECRET, api, calls, comment, github, pull_request, recorded, repos, requests_to, sign, transactional,
)

pytestmark = transactional


# -- GitHub: verification -----------------------------------------------------------------

def test_a_signed_pull_request_starts_a_turn_and_the_reply_is_a_comment(repos, api):
    response = github(Client(**REMOTE), "pull_request", pull_request())

    assert response.status_code == 202, response.content
    answer = response.json()
    assert answer["created"] is True and answer["deliveryId"] == "d-1"
    session = Session.objects.get(pk=answer["sessionId"])
    assert session.channel == "github" and session.principal_id == "github:mona"
    assert session.channel_state["repo"] == "octo-org/widgets" and session.channel_state["number"] == 12
    comments = requests_to(api, "POST", "/issues/12/comments")
    assert [c.path for c in comments] == ["/repos/octo-org/widgets/issues/12/comments"]
    body = comments[0].json()["body"]
    assert body.startswith("You said: GitHub pull_request (opened) on pull request octo-org/widgets#12 by @mona.")
    assert "Title: Add retry to the sprocket fetcher" in body
    assert comments[0].headers["authorization"] == "Bearer ghp_test_token_value"


def test_a_commit_status_is_pending_during_the_turn_then_success(repos, api):
    github(Client(**REMOTE), "pull_request", pull_request())

    statuses = [r.json() for r in requests_to(api, "POST", "/statuses/6dcb09b5b57875f334f61aebed695e2e4193db5e")]
    assert [s["state"] for s in statuses] == ["pending", "success"]
    assert {s["context"] for s in statuses} == {"agentsite/repos"}


@pytest.mark.parametrize("tamper", ["body", "signature", "sha1-only", "missing"])
def test_a_delivery_that_fails_verification_is_401_and_starts_nothing(repos, tamper):
    body = pull_request()
    if tamper == "body":
        response = github(Client(**REMOTE), "pull_request", body.replace(b'"opened"', b'"closed"', 1),
                          signature=sign(body))
    elif tamper == "signature":
        good = sign(body)
        response = github(Client(**REMOTE), "pull_request", body, signature=good[:-1] + ("0" if good[-1] != "0" else "1"))
    elif tamper == "sha1-only":
        sha1 = "sha1=" + hmac.new(SECRET.encode(), body, hashlib.sha1).hexdigest()
        response = github(Client(**REMOTE), "pull_request", body, signature=None, HTTP_X_HUB_SIGNATURE=sha1)
    else:
        response = github(Client(**LOCAL), "pull_request", body, signature=None)

    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_signature"
    assert Session.objects.count() == 0


def test_githubs_published_test_vector_is_verified_by_the_channel(repos, monkeypatch):
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", "It's a Secret to Everybody")
    vector = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"

    verified = github(Client(**REMOTE), "push", b"Hello, World!", signature=vector)
    tampered = github(Client(**REMOTE), "push", b"Hello, World?", signature=vector)

    # Verified, then refused because "Hello, World!" is no JSON event: 400, not 401.
    assert verified.status_code == 400 and verified.json()["error"]["code"] == "invalid_payload"
    assert tampered.status_code == 401


def test_without_a_secret_only_a_loopback_caller_of_a_dev_server_is_admitted(repos, settings, monkeypatch):
    monkeypatch.delenv("GITHUB_WEBHOOK_SECRET")

    refused = github(Client(**LOCAL), "pull_request", pull_request(), signature=None)
    settings.AGENTSITE_DEV = True
    remote = github(Client(**REMOTE), "pull_request", pull_request(), signature=None)
    proxied = github(Client(**LOCAL), "pull_request", pull_request(), signature=None,
                     HTTP_X_FORWARDED_FOR="203.0.113.9")
    admitted = github(Client(**LOCAL), "pull_request", pull_request(), signature=None)

    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "webhook_secret_not_configured"
    assert "GITHUB_WEBHOOK_SECRET" in refused.json()["error"]["message"]
    assert remote.status_code == 401 and proxied.status_code == 401
    assert admitted.status_code == 202, admitted.content


# -- GitHub: deliveries, hooks, conversations ---------------------------------------------

def test_a_redelivery_starts_no_second_turn(repos):
    client = Client(**REMOTE)
    first = github(client, "pull_request", pull_request(), delivery="same")
    again = github(client, "pull_request", pull_request(), delivery="same")

    assert first.status_code == 202
    assert again.status_code == 200 and again.json() == {"duplicate": True, "deliveryId": "same"}
    assert Turn.objects.count() == 1


def test_a_ping_is_answered(repos):
    response = github(Client(**REMOTE), "ping", b'{"zen": "Design for failure.", "hook_id": 1}')

    assert response.status_code == 200 and response.json() == {"pong": True}


def test_a_comment_continues_the_pull_requests_session_with_the_hooks_message(repos, api):
    client = Client(**REMOTE)
    opened = github(client, "pull_request", pull_request(), delivery="d-1").json()
    pushed = github(client, "pull_request", pull_request("synchronize", sha="a" * 40), delivery="d-2").json()
    asked = github(client, "issue_comment", comment("@widgets-bot what about retries?"), delivery="d-3").json()

    assert opened["sessionId"] == pushed["sessionId"] == asked["sessionId"]
    assert (pushed["created"], asked["created"]) == (False, False)
    session = Session.objects.get(pk=opened["sessionId"])
    assert session.channel_state["head_sha"] == "a" * 40
    bodies = [r.json()["body"] for r in requests_to(api, "POST", "/issues/12/comments")]
    assert len(bodies) == 3 and bodies[-1] == "You said: Answer: @widgets-bot what about retries?"


def test_the_agents_own_bot_comment_is_skipped(repos, api):
    response = github(Client(**REMOTE), "issue_comment", comment("Looks good.", "Bot", "widgets-bot[bot]"))

    assert response.status_code == 200
    assert response.json()["skipped"] == "bot sender widgets-bot[bot]"
    assert Session.objects.count() == 0


def test_a_hook_returning_none_skips_the_delivery(repos):
    response = github(Client(**REMOTE), "pull_request", pull_request("closed"))

    assert response.status_code == 200 and response.json()["skipped"] == "the hook returned None"
    assert Session.objects.count() == 0


def test_a_task_runs_on_a_worker_with_the_parsed_event(repos, calls):
    response = github(Client(**REMOTE), "check_run", fixture_bytes("github/check_run.completed.json"))

    assert response.status_code == 202 and response.json() == {"task": True, "deliveryId": "d-1"}
    assert recorded(calls) == [{"task": "check_run", "conclusion": "failure", "channel": "github"}]
    assert Session.objects.count() == 0


def test_a_task_given_as_a_lambda_is_found_by_asking_the_hook_again(repos, calls):
    response = github(Client(**REMOTE), "status", fixture_bytes("github/status.json"))

    assert response.status_code == 202
    assert recorded(calls) == [{"status": "failure", "by": "lambda"}]


def test_a_hook_answer_that_is_neither_a_turn_nor_a_task_is_a_500(repos, calls):
    response = github(Client(**REMOTE), "issue_comment", comment("this is broken"))

    assert response.status_code == 500 and response.json()["error"]["code"] == "internal_error"
    assert Session.objects.count() == 0 and recorded(calls) == []


def test_workspace_files_may_be_a_function_of_the_event(repos):
    from sessions.workspaces.store import workspace_dir

    answer = github(Client(**REMOTE), "pull_request", pull_request()).json()
    assert json.loads((workspace_dir(answer["sessionId"]) / "pr.json").read_text()) == {"number": 12}
