"""GitHub, GitLab and Bitbucket channels on a real server (`manage.py serve --dev`):
signed deliveries over HTTP start turns on the workers, and the replies reach a
loopback stand-in for each provider's API; `manage.py github replay` (in this test's process) posts
the recorded fixtures to it. Which turns a delivery started is read from the server's database."""
from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import httpx
import pytest

from sessions.models import Turn
from tests.agents.integrations.conftest import FIXTURES, fixture_bytes
from tests.agents.integrations.fakeapi import Answer, FakeAPI
from tests.command_line import run_command_line
from tests.server_database import on_server_database
from tests.support import Server, run_server

# GitHub's published example secret: its test vector below is checked by the channel itself.
GITHUB_SECRET = "It's a Secret to Everybody"
VECTOR = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
GITLAB_TOKEN = "gitlab-hook-token-1"
BITBUCKET_SECRET = "bitbucket-hook-secret-1"

CHANNELS = {
    "github": "from agents.sdk import default_auth, github_channel\n\n"
              "channel = github_channel(on_pull_request=lambda ctx, e: {'auth': default_auth(e)},\n"
              "                         on_comment=lambda ctx, e: {'auth': default_auth(e)})\n",
    # A channel whose secret variable is unset: only unsigned loopback fixtures under --dev reach it.
    "github_dev": "from agents.sdk import default_auth, github_channel\n\n"
                  "channel = github_channel(webhook_secret_env='HUB_UNSET_SECRET',\n"
                  "                         on_pull_request=lambda ctx, e: {'auth': default_auth(e)})\n",
    "gitlab": "from agents.sdk import default_auth, gitlab_channel\n\n"
              "channel = gitlab_channel(on_comment=lambda ctx, e: {'auth': default_auth(e)})\n",
    "bitbucket": "from agents.sdk import bitbucket_channel, default_auth\n\n"
                 "channel = bitbucket_channel(on_comment=lambda ctx, e: {'auth': default_auth(e)})\n",
}


@pytest.fixture(scope="module")
def api() -> Iterator[FakeAPI]:
    with FakeAPI() as fake:
        fake.route("POST", r"/repos/.+/issues/\d+/comments", Answer(201, {"id": 501}))
        fake.route("POST", r"/projects/[^/]+/merge_requests/\d+/notes", Answer(201, {"id": 601}))
        fake.route("POST", r"/repositories/[^/]+/[^/]+/pullrequests/\d+/comments", Answer(201, {"id": 701}))
        yield fake


@pytest.fixture(scope="module")
def server(tmp_path_factory, api) -> Iterator[Server]:
    agents = tmp_path_factory.mktemp("agents")
    base = agents / "hub" / "agent"
    (base / "channels").mkdir(parents=True)
    (base / "instructions.md").write_text("Echo.\n")
    (base / "agent.py").write_text('from agents.sdk import Agent\nagent = Agent(model="scripted:echo")\n')
    for name, text in CHANNELS.items():
        (base / "channels" / f"{name}.py").write_text(text)
    env = {"GITHUB_WEBHOOK_SECRET": GITHUB_SECRET, "GITHUB_TOKEN": "ghp_live_token", "GITHUB_API_URL": api.url,
           "GITLAB_WEBHOOK_TOKEN": GITLAB_TOKEN, "GITLAB_TOKEN": "glpat-live", "GITLAB_API_URL": api.url,
           "BITBUCKET_WEBHOOK_SECRET": BITBUCKET_SECRET, "BITBUCKET_TOKEN": "bb-live",
           "BITBUCKET_API_URL": api.url, "AGENTSITE_OUTBOUND_ALLOW": "127.0.0.1/32"}
    with run_server(tmp_path_factory.mktemp("repo-channels"), "--agents", str(agents), "--no-examples", "--dev",
                    env=env) as running, running.client(timeout=30) as http:
        running.http = http  # one client for every delivery: a new one loads the CA bundle, ~40 ms of CPU
        yield running


def sign(body: bytes, secret: str = GITHUB_SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def pull_request(number: int, action: str = "opened") -> bytes:
    data = json.loads(fixture_bytes("github/pull_request.opened.json"))
    data["action"] = action
    data["number"] = data["pull_request"]["number"] = number
    return json.dumps(data).encode()


def post_github(server: Server, body: bytes, *, event: str = "pull_request", delivery: str,
                signature: str | None = "sign", channel: str = "github", **headers: str) -> httpx.Response:
    sent = {"Content-Type": "application/json", "X-GitHub-Event": event, "X-GitHub-Delivery": delivery, **headers}
    if signature == "sign":
        sent["X-Hub-Signature-256"] = sign(body)
    elif signature is not None:
        sent["X-Hub-Signature-256"] = signature
    return server.http.post(f"/hub/v1/channels/{channel}", content=body, headers=sent)


def wait_for(api: FakeAPI, path: str, count: int = 1, timeout: float = 60) -> list:
    deadline = time.monotonic() + timeout
    while True:
        found = [r for r in api.requests if r.method == "POST" and r.path == path]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


@pytest.fixture(scope="module")
def turns(server, django_db_blocker):
    """The statuses of the turns in the server's database of a session, or whose message holds some text."""
    def statuses(session_id: str | None = None, text: str | None = None) -> list[str]:
        where = {"session_id": session_id} if session_id else {"message__contains": text}
        with on_server_database(server.state_root, django_db_blocker):
            return list(Turn.objects.filter(**where).order_by("created_at").values_list("status", flat=True))
    return statuses


def test_a_signed_pull_request_is_answered_with_a_comment_on_it(server, api):
    response = post_github(server, pull_request(101), delivery="live-101")

    assert response.status_code == 202, response.text
    assert response.json()["created"] is True and response.json()["deliveryId"] == "live-101"
    comments = wait_for(api, "/repos/octo-org/widgets/issues/101/comments")
    assert len(comments) == 1
    assert comments[0].json()["body"].startswith(
        "You said: GitHub pull_request (opened) on pull request octo-org/widgets#101 by @mona.")
    assert comments[0].headers["authorization"] == "Bearer ghp_live_token"


def test_githubs_published_test_vector_passes_verification(server):
    verified = post_github(server, b"Hello, World!", event="push", delivery="vector-1", signature=VECTOR)
    altered = post_github(server, b"Hello, World?", event="push", delivery="vector-2", signature=VECTOR)

    # The signature holds, so the body is read, and "Hello, World!" is no JSON event: 400, not 401.
    assert verified.status_code == 400 and verified.json()["error"]["code"] == "invalid_payload"
    assert altered.status_code == 401 and altered.json()["error"]["code"] == "invalid_signature"


def test_altered_deliveries_and_sha1_only_signatures_are_refused(server, api, turns):
    body = pull_request(102)
    good = sign(body)
    flipped = good[:-1] + ("0" if good[-1] != "0" else "1")
    sha1 = "sha1=" + hmac.new(GITHUB_SECRET.encode(), body, hashlib.sha1).hexdigest()

    answers = [post_github(server, body.replace(b'"opened"', b'"closed"', 1), delivery="bad-1", signature=good),
               post_github(server, body, delivery="bad-2", signature=flipped),
               post_github(server, body, delivery="bad-3", signature=None, **{"X-Hub-Signature": sha1}),
               post_github(server, body, delivery="bad-4", signature=None)]

    assert [a.status_code for a in answers] == [401, 401, 401, 401]
    assert {a.json()["error"]["code"] for a in answers} == {"invalid_signature"}
    assert "only the SHA-1" in answers[2].json()["error"]["message"]
    assert turns(text="octo-org/widgets#102 ") == []  # a delivery's turn is made before its answer
    assert wait_for(api, "/repos/octo-org/widgets/issues/102/comments", timeout=0) == []


def test_unsigned_fixtures_are_taken_only_from_loopback_under_dev(server):
    body = pull_request(103)

    admitted = post_github(server, body, delivery="dev-1", signature=None, channel="github_dev")
    forwarded = post_github(server, body, delivery="dev-2", signature=None, channel="github_dev",
                            **{"X-Forwarded-For": "203.0.113.9"})

    assert admitted.status_code == 202, admitted.text
    assert forwarded.status_code == 401
    assert "HUB_UNSET_SECRET" in forwarded.json()["error"]["message"]


def test_a_redelivery_starts_no_second_turn(server, api, turns):
    body = pull_request(104)

    first = post_github(server, body, delivery="again-1")
    again = post_github(server, body, delivery="again-1")

    assert first.status_code == 202 and again.status_code == 200
    assert again.json() == {"duplicate": True, "deliveryId": "again-1"}
    assert len(wait_for(api, "/repos/octo-org/widgets/issues/104/comments")) == 1
    assert len(turns(text="octo-org/widgets#104 ")) == 1  # in any session: none queued behind the one that answered


def test_two_concurrent_copies_of_a_delivery_start_one_turn(server, api, turns):
    body = pull_request(105)
    gate = threading.Barrier(2)

    def deliver(_: int) -> httpx.Response:
        gate.wait()
        return post_github(server, body, delivery="race-1")

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(deliver, range(2)))

    assert sorted(a.status_code for a in answers) == [200, 202], [a.text for a in answers]
    assert [a.json() for a in answers if a.status_code == 200] == [{"duplicate": True, "deliveryId": "race-1"}]
    assert len(wait_for(api, "/repos/octo-org/widgets/issues/105/comments")) == 1
    assert len(turns(text="octo-org/widgets#105 ")) == 1  # in any session: none queued behind the one that answered


def post_gitlab(server: Server, token: str, uuid: str) -> httpx.Response:
    return server.http.post("/hub/v1/channels/gitlab", content=fixture_bytes("gitlab/note.merge_request.json"),
                            headers={"Content-Type": "application/json", "X-Gitlab-Event": "Note Hook",
                                     "X-Gitlab-Token": token, "X-Gitlab-Event-UUID": uuid})


def comment_on(number: int, text: str) -> bytes:
    data = json.loads(fixture_bytes("github/issue_comment.created.json"))
    data["issue"]["number"] = number
    data["comment"]["body"] = text
    return json.dumps(data).encode()


def test_comments_and_a_push_on_a_busy_pull_request_each_get_an_answer(server, api, turns):
    """Events on one pull request queue behind its running turn: none is dropped."""
    path = "/repos/octo-org/widgets/issues/131/comments"
    first = post_github(server, comment_on(131, "/sleep 1500\nfirst question"), event="issue_comment",
                        delivery="busy-1")
    assert first.status_code == 202, first.text
    deadline = time.monotonic() + 30
    while turns(first.json()["sessionId"]) == ["queued"]:  # until a worker runs it: what follows queues behind it
        assert time.monotonic() < deadline, "no worker took the first turn"
        time.sleep(0.05)
    second = post_github(server, comment_on(131, "second question"), event="issue_comment", delivery="busy-2")
    pushed = post_github(server, pull_request(131, "synchronize"), delivery="busy-3")

    assert second.status_code == pushed.status_code == 202
    assert {first.json()["sessionId"], second.json()["sessionId"], pushed.json()["sessionId"]} == \
        {first.json()["sessionId"]}
    bodies = [r.json()["body"] for r in wait_for(api, path, count=3)]
    assert len(bodies) == 3
    assert "first question" in bodies[0] and "second question" in bodies[1] and "(synchronize)" in bodies[2]


def test_a_gitlab_merge_request_note_is_answered_with_a_note_and_a_wrong_token_is_refused(server, api):
    refused = post_gitlab(server, "not-the-token", "gl-1")
    accepted = post_gitlab(server, GITLAB_TOKEN, "gl-2")

    assert refused.status_code == 401
    assert accepted.status_code == 202, accepted.text
    notes = wait_for(api, "/projects/acme%2Fplatform%2Fbilling/merge_requests/5/notes")
    assert len(notes) == 1 and notes[0].headers["private-token"] == "glpat-live"
    assert notes[0].json()["body"].startswith("You said: GitLab note (created) on merge request acme/platform/billing!5")


def test_a_bitbucket_cloud_comment_is_answered_and_a_bad_signature_refused(server, api):
    body = fixture_bytes("bitbucket/cloud.pullrequest_comment_created.json")

    def deliver(signature: str, uuid: str) -> httpx.Response:
        return server.http.post("/hub/v1/channels/bitbucket", content=body, headers={
            "Content-Type": "application/json", "X-Event-Key": "pullrequest:comment_created",
            "X-Hub-Signature": signature, "X-Request-UUID": uuid})

    refused = deliver(sign(body, "not-the-secret"), "bb-1")
    accepted = deliver(sign(body, BITBUCKET_SECRET), "bb-2")

    assert refused.status_code == 401
    assert accepted.status_code == 202, accepted.text
    posted = wait_for(api, "/repositories/acme-team/payments-api/pullrequests/5/comments")
    assert len(posted) == 1 and posted[0].json()["content"]["raw"].startswith("You said: Bitbucket")
    assert posted[0].headers["authorization"] == "Bearer bb-live"


def test_info_lists_the_channels_with_their_config_and_no_secret(server):
    info = server.http.get("/hub/v1/info")

    assert info.status_code == 200
    channels = {c["id"]: c for c in info.json()["channels"]}
    assert {k: channels[k]["kind"] for k in CHANNELS} == {"github": "github", "github_dev": "github",
                                                         "gitlab": "gitlab", "bitbucket": "bitbucket"}
    assert channels["github"]["routes"][0]["url"] == "/hub/v1/channels/github"
    assert channels["github"]["config"]["webhookSecretEnv"] == {"env": "GITHUB_WEBHOOK_SECRET", "set": True}
    assert channels["github_dev"]["config"]["webhookSecretEnv"] == {"env": "HUB_UNSET_SECRET", "set": False}
    for secret in (GITHUB_SECRET, "ghp_live_token", GITLAB_TOKEN, "glpat-live", BITBUCKET_SECRET, "bb-live"):
        assert secret not in info.text


def replay(server: Server, monkeypatch, secret: str) -> tuple[int, str, str]:
    """`manage.py github replay` signing with `secret`: (exit code, stdout, stderr)."""
    monkeypatch.setenv("REPLAY_SECRET", secret)
    return run_command_line("github", "replay", str(FIXTURES / "github"), "--url",
                            f"{server.base_url}/hub/v1/channels/github", "--secret-env", "REPLAY_SECRET")


def test_replay_posts_every_recorded_delivery_signed(server, api, monkeypatch):
    code, out, err = replay(server, monkeypatch, GITHUB_SECRET)

    assert code == 0, out + err
    lines = dict(line.split("  ", 1) for line in out.splitlines() if line.endswith("}"))
    assert lines["pull_request.opened.json"].startswith("202 ")
    assert lines["issue_comment.created.json"].startswith("202 ")
    assert lines["check_run.completed.json"].startswith("200 ")  # a CI bot's run, and no hook takes it
    assert "6 deliveries accepted" in out
    assert wait_for(api, "/repos/octo-org/widgets/issues/12/comments", count=2)


def test_replay_with_the_wrong_secret_reports_each_refusal_and_fails(server, monkeypatch):
    code, out, err = replay(server, monkeypatch, "not-the-secret")

    assert code != 0
    assert out.count("  401  ") == 6
    assert "6 of 6 deliveries failed" in err
