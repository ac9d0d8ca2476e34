"""Replies against a loopback fake GitHub that checks what real GitHub checks:
the App's JWT (signed with the App's key, iss, iat/exp bounds) and that
installation tokens are the ones it issued."""
from __future__ import annotations

import itertools
import re
from datetime import datetime, timezone

import jwt
import pytest

from agents.integrations.github import GitHubApp, GitHubClient, GitHubConfig, TokenAuth, TokenCache
from agents.integrations.outbound import OutboundClient, OutboundHTTPError, OutboundRefused

from .conftest import LOOPBACK, Clock
from .fakeapi import Answer, FakeAPI, Recorded

APP_ID = "424242"
INSTALLATION = 48213
PREFIX = r"(?:/api/v3)?"


class FakeGitHub(FakeAPI):
    def __init__(self, public_key: str, clock: Clock, token_lifetime: int = 3600):
        super().__init__()
        self.public_key = public_key
        self.clock = clock
        self.token_lifetime = token_lifetime
        self.issued: set[str] = {"ghp_personal"}
        self.exchanges = 0
        self.jwt_claims: list[dict] = []
        serial = itertools.count(1)
        comments = itertools.count(1983374900)

        def app_jwt(request: Recorded) -> Answer | None:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            try:
                claims = jwt.decode(token, self.public_key, algorithms=["RS256"], issuer=APP_ID,
                                    options={"verify_exp": False, "verify_iat": False})
            except jwt.PyJWTError as exc:
                return Answer(401, {"message": f"A JSON web token could not be decoded: {exc}"})
            now = self.clock()
            if scheme != "Bearer" or not claims["iat"] <= now < claims["exp"] or claims["exp"] - claims["iat"] > 660:
                return Answer(401, {"message": "'Expiration time' claim ('exp') is too far in the future"})
            self.jwt_claims.append(claims)
            return None

        def token_ok(request: Recorded) -> bool:
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            return scheme in ("Bearer", "token") and token in self.issued

        def access_tokens(request: Recorded, match: re.Match) -> Answer:
            refusal = app_jwt(request)
            if refusal:
                return refusal
            self.exchanges += 1
            token = f"ghs_installation{match['id']}_{next(serial)}"
            self.issued.add(token)
            expires = datetime.fromtimestamp(self.clock() + self.token_lifetime, timezone.utc)
            return Answer(201, {"token": token, "expires_at": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                                "permissions": {"issues": "write", "statuses": "write"}})

        def installation(request: Recorded, match: re.Match) -> Answer:
            return app_jwt(request) or Answer(200, {"id": INSTALLATION, "app_id": int(APP_ID)})

        def create_comment(request: Recorded, match: re.Match) -> Answer:
            if not token_ok(request):
                return Answer(401, {"message": "Bad credentials"})
            number = next(comments)
            return Answer(201, {"id": number, "body": request.json()["body"],
                                "html_url": f"https://github.com/{match['repo']}/pull/{match['n']}#issuecomment-{number}"})

        def update_comment(request: Recorded, match: re.Match) -> Answer:
            if not token_ok(request):
                return Answer(401, {"message": "Bad credentials"})
            return Answer(200, {"id": int(match["id"]), "body": request.json()["body"]})

        def status(request: Recorded, match: re.Match) -> Answer:
            if not token_ok(request):
                return Answer(401, {"message": "Bad credentials"})
            return Answer(201, {"id": 1, **request.json()})

        self.route("POST", PREFIX + r"/app/installations/(?P<id>\d+)/access_tokens", access_tokens)
        self.route("GET", PREFIX + r"/repos/(?P<repo>[^/]+/[^/]+)/installation", installation)
        self.route("POST", PREFIX + r"/repos/(?P<repo>[^/]+/[^/]+)/issues/(?P<n>\d+)/comments", create_comment)
        self.route("PATCH", PREFIX + r"/repos/(?P<repo>[^/]+/[^/]+)/issues/comments/(?P<id>\d+)", update_comment)
        self.route("POST", PREFIX + r"/repos/(?P<repo>[^/]+/[^/]+)/statuses/(?P<sha>\w+)", status)

    def calls(self, method: str, fragment: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and fragment in r.path]


@pytest.fixture
def github(rsa_key, clock):
    with FakeGitHub(rsa_key[1], clock) as fake:
        yield fake


@pytest.fixture
def outbound():
    with OutboundClient(allow=LOOPBACK) as client:
        yield client


def app_client(github: FakeGitHub, rsa_key, clock, outbound, **kwargs) -> GitHubClient:
    app = GitHubApp(app_id=APP_ID, private_key=rsa_key[0], clock=clock, tokens=TokenCache())
    return GitHubClient(f"{github.url}/api/v3", app, outbound=outbound, **kwargs)


def test_a_comment_arrives_with_its_text_token_and_path(github, outbound):
    client = GitHubClient(github.url, TokenAuth("ghp_personal"), outbound=outbound)
    created = client.create_comment("octo-org/widgets", 12, "Looks good, one question about the backoff.")
    assert created["html_url"].endswith(f"#issuecomment-{created['id']}")
    [request] = github.requests
    assert (request.method, request.path) == ("POST", "/repos/octo-org/widgets/issues/12/comments")
    assert request.json() == {"body": "Looks good, one question about the backoff."}
    assert request.headers["authorization"] == "Bearer ghp_personal"
    assert request.headers["accept"] == "application/vnd.github+json"
    assert request.headers["x-github-api-version"] == "2022-11-28"


def test_a_comment_is_updated_in_place(github, outbound):
    client = GitHubClient(github.url, TokenAuth("ghp_personal"), outbound=outbound)
    created = client.create_comment("octo-org/widgets", 12, "Working on it…")
    client.update_comment("octo-org/widgets", created["id"], "Done: 3 suggestions below.")
    request = github.requests[-1]
    assert (request.method, request.path) == ("PATCH", f"/repos/octo-org/widgets/issues/comments/{created['id']}")
    assert request.json() == {"body": "Done: 3 suggestions below."}


def test_a_commit_status_is_set(github, outbound):
    client = GitHubClient(github.url, TokenAuth("ghp_personal"), outbound=outbound)
    sha = "6dcb09b5b57875f334f61aebed695e2e4193db5e"
    client.set_commit_status("octo-org/widgets", sha, "pending", context="agentsite/review",
                             description="x" * 200, target_url="https://agents.example/ses_1")
    [request] = github.requests
    assert request.path == f"/repos/octo-org/widgets/statuses/{sha}"
    sent = request.json()
    assert (sent["state"], sent["context"], sent["target_url"]) == ("pending", "agentsite/review",
                                                                    "https://agents.example/ses_1")
    assert len(sent["description"]) == 140
    with pytest.raises(ValueError, match="state must be one of"):
        client.set_commit_status("octo-org/widgets", sha, "green")
    with pytest.raises(ValueError, match="not a commit sha"):
        client.set_commit_status("octo-org/widgets", "../../admin", "success")


@pytest.mark.parametrize("repo", ["octo-org", "octo-org/widgets/extra", "../admin", "octo-org/..", "a b/c"])
def test_repository_names_that_would_change_the_path_are_refused(github, outbound, repo):
    client = GitHubClient(github.url, TokenAuth("ghp_personal"), outbound=outbound)
    with pytest.raises(ValueError, match="not a repository name"):
        client.create_comment(repo, 1, "x")
    assert github.requests == []


def test_the_app_flow_signs_a_jwt_exchanges_it_and_comments_with_the_installation_token(github, rsa_key, clock,
                                                                                       outbound):
    client = app_client(github, rsa_key, clock, outbound, installation_id=INSTALLATION)
    client.create_comment("octo-org/widgets", 12, "Reviewed.")
    exchange, comment = github.requests
    assert (exchange.method, exchange.path) == ("POST", f"/api/v3/app/installations/{INSTALLATION}/access_tokens")
    [claims] = github.jwt_claims
    assert claims["iss"] == APP_ID
    assert claims["iat"] == int(clock()) - 60 and claims["exp"] == int(clock()) + 540
    assert comment.path == "/api/v3/repos/octo-org/widgets/issues/12/comments"
    assert comment.headers["authorization"] == f"Bearer ghs_installation{INSTALLATION}_1"


def test_the_installation_is_found_from_the_repository_when_not_given(github, rsa_key, clock, outbound):
    client = app_client(github, rsa_key, clock, outbound)
    client.create_comment("octo-org/widgets", 12, "one")
    client.create_comment("octo-org/widgets", 12, "two")
    assert [(r.method, r.path) for r in github.requests] == [
        ("GET", "/api/v3/repos/octo-org/widgets/installation"),
        ("POST", f"/api/v3/app/installations/{INSTALLATION}/access_tokens"),
        ("POST", "/api/v3/repos/octo-org/widgets/issues/12/comments"),
        ("POST", "/api/v3/repos/octo-org/widgets/issues/12/comments"),
    ]


def test_the_installation_token_is_reused_until_shortly_before_it_expires(github, rsa_key, clock, outbound):
    client = app_client(github, rsa_key, clock, outbound, installation_id=INSTALLATION)
    client.create_comment("octo-org/widgets", 12, "first")
    clock.advance(3000)
    client.create_comment("octo-org/widgets", 12, "still cached")
    assert github.exchanges == 1
    clock.advance(400)  # 200 s left: inside the refresh margin
    client.create_comment("octo-org/widgets", 12, "fresh token")
    assert github.exchanges == 2
    assert github.requests[-1].headers["authorization"] == f"Bearer ghs_installation{INSTALLATION}_2"


def test_a_jwt_signed_with_another_key_is_refused_by_github(github, clock, outbound):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    other = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    app = GitHubApp(app_id=APP_ID, private_key=other, clock=clock, tokens=TokenCache())
    client = GitHubClient(github.url, app, outbound=outbound, installation_id=INSTALLATION)
    with pytest.raises(OutboundHTTPError) as caught:
        client.create_comment("octo-org/widgets", 12, "x")
    assert caught.value.status_code == 401


def test_the_config_prefers_the_app_and_reads_its_key_from_a_file(github, rsa_key, clock, outbound, tmp_path):
    key_file = tmp_path / "app.pem"
    key_file.write_text(rsa_key[0])
    environ = {"GITHUB_APP_ID": APP_ID, "GITHUB_APP_PRIVATE_KEY_PATH": str(key_file), "GITHUB_TOKEN": "ghp_personal"}
    config = GitHubConfig(api_url=f"{github.url}/api/v3", environ=environ)
    client = config.client(outbound=outbound, installation_id=INSTALLATION, clock=clock)
    assert isinstance(client.auth, GitHubApp)
    client.auth.tokens.clear()
    client.create_comment("octo-org/widgets", 12, "from the app")
    assert github.requests[-1].headers["authorization"].startswith("Bearer ghs_installation")
    assert rsa_key[0] not in repr(client) + repr(config)


def test_an_inline_key_with_escaped_newlines_is_accepted(rsa_key):
    escaped = rsa_key[0].replace("\n", "\\n")
    config = GitHubConfig(environ={"GITHUB_APP_ID": APP_ID, "GITHUB_APP_PRIVATE_KEY": escaped})
    assert config.private_key() == rsa_key[0]


def test_the_config_falls_back_to_the_token_and_says_when_nothing_is_set(github, outbound):
    config = GitHubConfig(api_url=github.url, environ={"GITHUB_TOKEN": "ghp_personal"})
    config.client(outbound=outbound).create_comment("octo-org/widgets", 3, "hi")
    assert github.requests[-1].headers["authorization"] == "Bearer ghp_personal"
    with pytest.raises(LookupError, match="GITHUB_APP_ID"):
        GitHubConfig(environ={}).client()


def test_replies_go_through_the_outbound_guard(github):
    client = GitHubClient(github.url, TokenAuth("ghp_personal"), outbound=OutboundClient(allow=[]))
    with pytest.raises(OutboundRefused, match="loopback"):
        client.create_comment("octo-org/widgets", 12, "x")
    assert github.requests == []
